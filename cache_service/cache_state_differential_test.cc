// Randomized differential test of CacheState against a deliberately naive
// model: per (worker, cache_salt), the list of cached token
// sequences; the longest cached prefix is the maximum common prefix with any
// of them. Thousands of random operation sequences (register, acquire,
// generate, grow, fork, commit, release, evict, flush, expire, heartbeat,
// new epochs, dead workers, invalid calls) run against both, checking after
// every step:
//   - results against the naive model (prefix_len, matched/page-aligned
//     tokens, inserted tokens, expired and lost leases, evicted tokens);
//   - fork families: every written position has an origin (the lease that
//     computed it; forks copy their parent's origins), and once any lease
//     committed a position of some origin, a Commit of another lease holding
//     that origin with another token there is INVALID_ARGUMENT naming the
//     position (dishonest commits), while honest ones always succeed;
//   - CheckInvariants() and free + evictable + protected == capacity;
//   - a simulated KV pool per worker: every slot holds a hash of the token
//     prefix whose KV it stores; copy ops are executed, computed positions
//     are written, and every cached prefix handed out (and every live
//     lease's written positions) must read back the right hash - so a slot
//     that is reused, freed or shared wrongly is caught;
//   - a failed call leaves CanonicalDump() unchanged.
// Eviction is policy-dependent, so after it the model is re-read from the
// tree after checking that the tree only lost content (never invented any)
// and that every locked prefix survived.
//
// A second test replays the recorded operation log onto a snapshot taken
// mid-run and requires identical results and identical final dumps.
//
// The seed is printed; set RADIXKV_TEST_SEED to reproduce a run and
// RADIXKV_DIFF_SEQUENCES to change the number of sequences.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache_service/cache_state.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

// ---- result descriptions (for replay comparison) ----

std::string Describe(const RegisterWorkerResult& r) {
  return absl::StrCat("register ", r.epoch, " ", r.wiped_previous_epoch, " ",
                      r.released_leases);
}
std::string Describe(const HeartbeatResult& r) {
  return absl::StrCat("heartbeat lost=", absl::StrJoin(r.lost_lease_ids, ","));
}
std::string Describe(const DeregisterResult& r) {
  return absl::StrCat("deregister ", r.released_leases);
}
std::string Describe(const MatchResult& r) {
  std::string out = "match";
  for (const WorkerMatch& w : r.workers) {
    absl::StrAppend(&out, " ", w.worker_id, ":", w.matched_tokens, "/",
                    w.page_aligned_tokens, "@", w.epoch);
  }
  return out;
}
std::string Describe(const std::vector<CopyOp>& ops) {
  std::string out;
  for (const CopyOp& op : ops) {
    absl::StrAppend(&out, op.src_page, ">", op.dst_page, "x", op.num_tokens,
                    ";");
  }
  return out;
}
std::string Describe(const AcquireResult& r) {
  return absl::StrCat("acquire id=", r.lease_id, " prefix=", r.prefix_len, "/",
                      r.page_aligned_prefix_len, "/", r.matched_tokens,
                      " kv=", absl::StrJoin(r.kv_indices, ","),
                      " copy=", Describe(r.copy_ops),
                      " evicted=", r.evicted_tokens);
}
std::string Describe(const GrowResult& r) {
  return absl::StrCat(
      "grow kv=", absl::StrJoin(r.kv_indices, ","),
      " copy=", Describe(r.copy_ops), " remap=", r.first_remapped_position, ":",
      absl::StrJoin(r.remapped_kv_indices, ","), " evicted=", r.evicted_tokens);
}
std::string Describe(const ForkResult& r) {
  std::string out = "fork";
  for (const ForkedLease& c : r.children) {
    absl::StrAppend(&out, " ", c.lease_id, ":",
                    absl::StrJoin(c.kv_indices, ","));
  }
  return out;
}
std::string Describe(const CommitResult& r) {
  return absl::StrCat("commit ", r.inserted_tokens, " ", r.freed_slots, " ",
                      absl::StrJoin(r.kv_indices, ","));
}
std::string Describe(const ReleaseResult& r) {
  return absl::StrCat("release ", r.freed_slots);
}
std::string Describe(const EvictResult& r) {
  return absl::StrCat("evict ", r.evicted_tokens);
}
std::string Describe(const FlushResult& r) {
  return absl::StrCat("flush ", r.evicted_tokens);
}
std::string Describe(const ExpireResult& r) {
  std::string out = "expire";
  for (const ExpiredLease& e : r.expired) {
    absl::StrAppend(&out, " ", e.lease_id, "@", e.worker_id);
  }
  return out;
}
std::string Describe(const DropResult& r) {
  return absl::StrCat("drop ", absl::StrJoin(r.dropped_worker_ids, ","), " ",
                      r.released_leases);
}
template <typename T>
std::string Describe(const absl::StatusOr<T>& r) {
  return r.ok() ? Describe(*r) : r.status().ToString();
}

// ---- the naive model and the simulated worker pools ----

uint64_t KvHash(uint64_t previous, int32_t token) {
  uint64_t x = previous * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(token) +
               0x632BE59BD9B4E019ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x | 1;  // never 0: 0 marks garbage
}

// hash[p] = KV identity of position p given tokens[0..p].
std::vector<uint64_t> PrefixHashes(const std::vector<int32_t>& tokens,
                                   size_t n) {
  std::vector<uint64_t> h(n);
  uint64_t prev = 0;
  for (size_t p = 0; p < n; ++p) h[p] = prev = KvHash(prev, tokens[p]);
  return h;
}

int64_t CommonPrefix(const std::vector<int32_t>& a,
                     const std::vector<int32_t>& b, size_t limit) {
  size_t n = std::min({a.size(), b.size(), limit});
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

// How often the interesting paths ran (printed, and required to be > 0 so
// the test cannot silently stop exercising them).
struct Coverage {
  int64_t acquires = 0, reused_prefixes = 0, partial_page_copies = 0,
          exhausted = 0, evictions = 0, commits = 0, keep_lease_commits = 0,
          forks = 0, cow_grows = 0, expired = 0, wipes = 0, invalid_calls = 0,
          restores = 0, evicted_beside_locked_prefix = 0, child_commits = 0,
          refused_contradictions = 0;
};
Coverage coverage;

struct SimWorker {
  std::string id;
  int64_t epoch = 1;
  int32_t page_size = 1;
  int64_t capacity = 0;
  int64_t last_heartbeat = 0;
  std::vector<uint64_t> pool;  // KV identity stored in every slot
};

struct SimLease {
  uint64_t id = 0;
  std::string worker;
  std::string salt;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;  // tokens[0, written) have KV in table
  int64_t written = 0;
  std::vector<int64_t> table;
  // origin[p]: which computation wrote position p's KV (unique per write;
  // a forked child copies its parent's for the shared positions).
  std::vector<int64_t> origin;
  bool forked = false;
  int64_t locked_len = 0;  // prefix guaranteed resident while the lease lives
  int64_t expires_at = 0;
};

class Harness {
 public:
  Harness(uint64_t seed, bool record) : rng_(seed), record_(record) {
    CacheOptions options;
    options.eviction_policy.kind =
        std::array{EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu,
                   EvictionPolicyKind::kPriority,
                   EvictionPolicyKind::kReuseLru}[Uniform(0, 3)];
    options.eviction_policy.reuse_bonus_ms =
        std::array{0, 5, 1000}[Uniform(0, 2)];
    options.lease_ttl_ms = 1000;
    options.heartbeat_timeout_ms = 4000;
    options.grow_chunk_tokens = std::array{1, 4, 16}[Uniform(0, 2)];
    state_ = CacheState(options);
    const int num_workers = static_cast<int>(Uniform(1, 3));
    for (int i = 0; i < num_workers; ++i) {
      SimWorker w;
      w.id = absl::StrCat("w", i);
      w.page_size = std::array{1, 8, 16}[Uniform(0, 2)];
      w.capacity =
          w.page_size == 1 ? Uniform(24, 160) : w.page_size * Uniform(4, 20);
      workers_[w.id] = w;
      RegisterSim(w.id);
    }
    for (int i = 0; i < 4; ++i) bases_.push_back(RandomTokens(0, 30));
  }

  // Runs num_ops random operations; stops at the first failure.
  void Run(int num_ops) {
    for (int i = 0; i < num_ops && !::testing::Test::HasFailure(); ++i) {
      now_ += Uniform(0, 40);
      if (Uniform(0, 99) < 3) now_ += Uniform(500, 3000);
      step_ = i;
      Step();
      if (::testing::Test::HasFailure()) return;
      CheckAll();
    }
  }

  CacheState& state() { return state_; }
  const std::vector<std::function<std::string(CacheState&)>>& log() const {
    return log_;
  }
  const std::vector<std::string>& summaries() const { return summaries_; }

 private:
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::vector<int32_t> RandomTokens(int64_t min_len, int64_t max_len) {
    std::vector<int32_t> v(Uniform(min_len, max_len));
    for (int32_t& t : v) t = static_cast<int32_t>(Uniform(0, 3));
    return v;
  }
  std::vector<int32_t> RandomPrompt() {
    std::vector<int32_t> p;
    const int64_t kind = Uniform(0, 9);
    if (kind < 6) {
      p = bases_[Uniform(0, bases_.size() - 1)];
    } else if (kind < 9 && !committed_.empty()) {
      p = committed_[Uniform(0, committed_.size() - 1)];
      p.resize(Uniform(0, p.size()));
    }
    const std::vector<int32_t> suffix = RandomTokens(1, 12);
    p.insert(p.end(), suffix.begin(), suffix.end());
    return p;
  }
  std::string RandomSalt() { return Uniform(0, 9) < 8 ? "" : "s"; }

  // Executes f on the state, records it for replay, returns its result.
  template <typename F>
  auto Call(F f) -> decltype(f(std::declval<CacheState&>())) {
    auto result = f(state_);
    if (record_) {
      log_.push_back([f](CacheState& s) { return Describe(f(s)); });
      summaries_.push_back(Describe(result));
    }
    return result;
  }

  std::string Where() const {
    return absl::StrCat("step ", step_, " at t=", now_);
  }

  // Registers (or re-registers) a worker; a new epoch means its pool lost
  // its bytes.
  void RegisterSim(const std::string& id, bool new_epoch = true) {
    SimWorker& w = workers_[id];
    RegisterWorkerRequest r;
    r.worker_id = id;
    r.address = id + ":1";
    r.capacity_slots = w.capacity;
    r.page_size = w.page_size;
    r.model = "m";
    r.epoch = w.epoch;
    r.vocab_size = 1000;
    const int64_t now = now_;
    absl::StatusOr<RegisterWorkerResult> result =
        Call([r, now](CacheState& s) { return s.RegisterWorker(r, now); });
    ASSERT_TRUE(result.ok()) << result.status() << " " << Where();
    w.last_heartbeat = now_;
    if (!new_epoch) return;
    // A new epoch: the KV bytes of the old process are gone.
    w.pool.assign(w.capacity, 0);
    for (uint64_t& v : w.pool) v = rng_() << 1;  // junk (even: never a hash)
  }

  // The worker lost its state (new epoch, drop): forget leases and cache.
  void ForgetWorker(const std::string& id) {
    for (auto it = leases_.begin(); it != leases_.end();) {
      it = it->second.worker == id ? leases_.erase(it) : std::next(it);
    }
    model_.erase({id, ""});
    model_.erase({id, "s"});
  }

  int64_t NaiveMatch(const std::string& worker, const std::string& salt,
                     const std::vector<int32_t>& tokens) {
    int64_t best = 0;
    for (const auto& seq : model_[{worker, salt}]) {
      best = std::max(best, CommonPrefix(seq, tokens, tokens.size()));
    }
    return best;
  }

  SimLease* PickLease() {
    if (leases_.empty()) return nullptr;
    auto it = leases_.begin();
    std::advance(it, Uniform(0, leases_.size() - 1));
    return &it->second;
  }
  std::string PickWorker() {
    auto it = workers_.begin();
    std::advance(it, Uniform(0, workers_.size() - 1));
    return it->first;
  }

  // Checks that pool content at the lease's written positions is right.
  void CheckLeaseContent(const SimLease& l, const std::string& what) {
    const SimWorker& w = workers_.at(l.worker);
    const std::vector<uint64_t> h = PrefixHashes(l.tokens, l.written);
    for (int64_t p = 0; p < l.written; ++p) {
      ASSERT_EQ(w.pool[l.table[p]], h[p])
          << what << ": lease " << l.id << " position " << p << " slot "
          << l.table[p] << " lost its KV, " << Where();
    }
  }

  void ApplyCopies(SimWorker& w, const std::vector<CopyOp>& ops) {
    for (const CopyOp& op : ops) {
      ASSERT_GE(op.num_tokens, 1);
      ASSERT_LE(op.num_tokens, w.page_size);
      for (int32_t i = 0; i < op.num_tokens; ++i) {
        w.pool[op.dst_page * w.page_size + i] =
            w.pool[op.src_page * w.page_size + i];
      }
    }
  }

  void Write(SimLease& l, int64_t upto) {
    SimWorker& w = workers_.at(l.worker);
    const std::vector<uint64_t> h = PrefixHashes(l.tokens, upto);
    for (int64_t p = l.written; p < upto; ++p) {
      w.pool[l.table[p]] = h[p];
      l.origin.push_back(next_origin_++);
    }
    l.written = upto;
  }

  // After eviction: the tree may only have lost content, and every locked
  // prefix must still be resident; then adopt the tree's content.
  void SyncAfterEviction(const std::string& worker) {
    for (const std::string salt : {"", "s"}) {
      absl::StatusOr<std::vector<std::vector<int32_t>>> tree =
          state_.ResidentSequences("m", salt, worker);
      ASSERT_TRUE(tree.ok());
      for (const auto& seq : *tree) {
        ASSERT_EQ(NaiveMatch(worker, salt, seq),
                  static_cast<int64_t>(seq.size()))
            << "tree holds content never inserted, " << Where();
      }
      model_[{worker, salt}] = *tree;
      for (const auto& [id, l] : leases_) {
        if (l.worker != worker || l.salt != salt) continue;
        const int64_t locked = std::min<int64_t>(l.locked_len, l.prompt.size());
        ASSERT_GE(NaiveMatch(worker, salt, l.prompt), locked)
            << "locked prefix of lease " << id << " was evicted, " << Where();
      }
    }
  }

  // Pages of w's pool holding a slot s with s % page_size == p % page_size
  // and simulated KV equal to that of tokens[0..p], for some p < prefix.
  int64_t PrefixCandidatePages(const SimWorker& w,
                               const std::vector<int32_t>& tokens,
                               int64_t prefix) {
    if (prefix == 0) return 0;
    const std::vector<uint64_t> h = PrefixHashes(tokens, prefix);
    std::map<std::pair<uint64_t, int64_t>, int64_t> position_of;
    for (int64_t p = 0; p < prefix; ++p) {
      position_of[{h[p], p % w.page_size}] = p;
    }
    std::set<int64_t> pages;
    for (int64_t slot = 0; slot < static_cast<int64_t>(w.pool.size()); ++slot) {
      if (position_of.count({w.pool[slot], slot % w.page_size}) > 0) {
        pages.insert(slot / w.page_size);
      }
    }
    return static_cast<int64_t>(pages.size());
  }

  int64_t CachedTokens(const std::string& worker) {
    return state_.Stats(worker, now_)->workers.at(0).cached_tokens;
  }

  void CheckAll() {
    const absl::Status s = state_.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s << " " << Where() << "\n"
                        << state_.CanonicalDump();
    absl::StatusOr<StatsResult> stats = state_.Stats("", now_);
    ASSERT_TRUE(stats.ok());
    ASSERT_EQ(stats->workers.size(), workers_.size());
    for (const WorkerStats& w : stats->workers) {
      ASSERT_EQ(w.free_slots + w.evictable_slots + w.protected_slots,
                w.capacity_slots);
      // Distinct non-empty prefixes of the model's sequences (= trie nodes):
      // in sorted order each sequence adds len - lcp(previous).
      int64_t naive_tokens = 0;
      for (const std::string salt : {"", "s"}) {
        std::vector<std::vector<int32_t>> seqs = model_[{w.worker_id, salt}];
        std::sort(seqs.begin(), seqs.end());
        for (size_t i = 0; i < seqs.size(); ++i) {
          naive_tokens += static_cast<int64_t>(seqs[i].size());
          if (i > 0) {
            naive_tokens -= CommonPrefix(seqs[i], seqs[i - 1], seqs[i].size());
          }
        }
      }
      ASSERT_EQ(w.cached_tokens, naive_tokens) << Where();
    }
    ASSERT_EQ(stats->active_leases, static_cast<int64_t>(leases_.size()));
    for (const auto& [id, l] : leases_) {
      CheckLeaseContent(l, "after step");
      if (::testing::Test::HasFailure()) return;
    }
    // A random Match against the naive model.
    const std::string salt = RandomSalt();
    const std::vector<int32_t> prompt = RandomPrompt();
    absl::StatusOr<MatchResult> m =
        state_.Match(MatchRequest{"m", salt, prompt}, now_);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m->workers.size(), workers_.size());
    for (const WorkerMatch& wm : m->workers) {
      const int64_t expected = NaiveMatch(wm.worker_id, salt, prompt);
      const int32_t ps = workers_.at(wm.worker_id).page_size;
      ASSERT_EQ(wm.matched_tokens, expected) << Where();
      ASSERT_EQ(wm.page_aligned_tokens, expected / ps * ps);
      ASSERT_EQ(wm.epoch, workers_.at(wm.worker_id).epoch);
    }
  }

  void Step() {
    const std::string before = state_.CanonicalDump();
    const int64_t roll = Uniform(0, 99);
    const int64_t now = now_;
    if (roll < 24) {
      DoAcquire(before);
    } else if (roll < 38) {
      SimLease* l = PickLease();
      if (l == nullptr || l->written >= static_cast<int64_t>(l->table.size()) ||
          l->expires_at <= now_) {
        return;
      }
      const int64_t upto =
          std::min<int64_t>(l->table.size(), l->written + Uniform(1, 8));
      while (static_cast<int64_t>(l->tokens.size()) < upto) {
        l->tokens.push_back(static_cast<int32_t>(Uniform(0, 3)));
      }
      Write(*l, upto);
    } else if (roll < 46) {
      DoGrow(before);
    } else if (roll < 51) {
      DoFork(before);
    } else if (roll < 66) {
      DoCommit(before);
    } else if (roll < 72) {
      SimLease* l = PickLease();
      if (l == nullptr) return;
      const uint64_t id = l->id;
      absl::StatusOr<ReleaseResult> r =
          Call([id, now](CacheState& s) { return s.Release(id, now); });
      if (l->expires_at <= now_) {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
        ASSERT_EQ(state_.CanonicalDump(), before);
        return;
      }
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->freed_slots % workers_.at(l->worker).page_size, 0);
      ended_.push_back(id);
      leases_.erase(id);
    } else if (roll < 76) {
      const std::string w = PickWorker();
      const int64_t n = Uniform(1, workers_.at(w).capacity);
      const int64_t cached = CachedTokens(w);
      absl::StatusOr<EvictResult> r =
          Call([w, n, now](CacheState& s) { return s.Evict(w, n, now); });
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(cached - CachedTokens(w), r->evicted_tokens);
      if (r->evicted_tokens < n) {
        ASSERT_EQ(state_.Stats(w, now_)->workers[0].evictable_slots, 0);
      }
      SyncAfterEviction(w);
    } else if (roll < 77) {
      const std::string w = Uniform(0, 1) ? PickWorker() : "";
      absl::StatusOr<FlushResult> r =
          Call([w, now](CacheState& s) { return s.Flush(w, now); });
      ASSERT_TRUE(r.ok());
      for (const auto& [id, sim] : workers_) {
        if (w.empty() || id == w) {
          ASSERT_EQ(state_.Stats(id, now_)->workers[0].evictable_slots, 0);
          SyncAfterEviction(id);
        }
      }
    } else if (roll < 81) {
      if (Uniform(0, 1)) now_ += 1000;
      const int64_t t = now_;
      if (Uniform(0, 3) == 0) {
        // The service was paused: liveness and leases are credited.
        const int64_t paused = Uniform(0, 3000);
        Call([paused, t](CacheState& s) {
          s.CreditServicePause(paused, t);
          return absl::StatusOr<FlushResult>(FlushResult{});
        });
        for (auto& [id, w] : workers_) {
          w.last_heartbeat = std::max(w.last_heartbeat,
                                      std::min(t, w.last_heartbeat + paused));
        }
        for (auto& [id, l] : leases_) l.expires_at += paused;
      }
      ExpireResult r = Call([t](CacheState& s) { return s.ExpireLeases(t); });
      std::vector<uint64_t> expected;
      for (const auto& [id, l] : leases_) {
        if (l.expires_at <= now_) expected.push_back(id);
      }
      std::vector<uint64_t> got;
      for (const ExpiredLease& e : r.expired) got.push_back(e.lease_id);
      ASSERT_EQ(got, expected) << Where();
      coverage.expired += static_cast<int64_t>(got.size());
      for (uint64_t id : got) {
        leases_.erase(id);
        ended_.push_back(id);
      }
    } else if (roll < 85) {
      DoHeartbeat();
    } else if (roll < 87) {
      const int64_t t = now_;
      DropResult r = Call([t](CacheState& s) { return s.DropDeadWorkers(t); });
      std::vector<std::string> expected;
      for (const auto& [id, w] : workers_) {
        if (now_ - w.last_heartbeat > 4000) expected.push_back(id);
      }
      ASSERT_EQ(r.dropped_worker_ids, expected);
      for (const std::string& id : expected) {
        ForgetWorker(id);
        ++workers_[id].epoch;
        RegisterSim(id);
      }
    } else if (roll < 88) {
      // Restart of a worker process: new epoch wipes it.
      const std::string id = PickWorker();
      ++coverage.wipes;
      ForgetWorker(id);
      ++workers_[id].epoch;
      RegisterSim(id);
    } else if (roll < 91) {
      DoInvalidCall(before);
    } else if (roll < 94) {
      DoDishonestCommit(before);
    } else if (roll < 95) {
      // Crash + restart: continue on a state restored from a snapshot.
      CacheState restored(state_.options());
      const absl::Status s = restored.Restore(state_.Serialize());
      ASSERT_TRUE(s.ok()) << s << " " << Where();
      ASSERT_EQ(restored.CanonicalDump(), before) << Where();
      state_ = std::move(restored);
      ++coverage.restores;
    } else {
      // Same-epoch re-registration is idempotent for the logical state.
      RegisterSim(PickWorker(), /*new_epoch=*/false);
    }
  }

  void DoAcquire(const std::string& before) {
    const std::string wid = PickWorker();
    SimWorker& w = workers_.at(wid);
    AcquireRequest req;
    req.worker_id = wid;
    req.epoch = w.epoch;
    req.model = "m";
    req.cache_salt = RandomSalt();
    req.tokens = RandomPrompt();
    req.priority = static_cast<int32_t>(Uniform(-2, 2));
    req.reserve_tokens =
        static_cast<int32_t>(Uniform(0, 1) ? 0 : Uniform(0, 20));
    req.disable_match = Uniform(0, 19) == 0;
    const int64_t expected_match =
        req.disable_match ? 0 : NaiveMatch(wid, req.cache_salt, req.tokens);
    const int64_t cached = CachedTokens(wid);
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    const int64_t prefix = std::min(expected_match, n - 1);
    // Room the naive model guarantees: locking only the prefix can protect
    // at most the pages holding its KV, i.e. at most the pages with a slot
    // whose simulated KV equals that of a prefix position at the same page
    // offset (a superset: copies and stale bytes only add candidates). So
    // free + evictable - candidates pages are certainly obtainable.
    const WorkerStats before_stats = state_.Stats(wid, now_)->workers.at(0);
    const int64_t needed_pages =
        (n + req.reserve_tokens + w.page_size - 1) / w.page_size -
        prefix / w.page_size;
    const int64_t guaranteed_pages =
        (before_stats.free_slots + before_stats.evictable_slots) / w.page_size -
        PrefixCandidatePages(w, req.tokens, prefix);
    const int64_t now = now_;
    absl::StatusOr<AcquireResult> r =
        Call([req, now](CacheState& s) { return s.Acquire(req, now); });
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
          << r.status();
      ASSERT_EQ(state_.CanonicalDump(), before) << Where();
      // Locking must not take more than the matched prefix away from
      // eviction (a lock of the whole edge the match ends in did).
      ASSERT_GT(needed_pages, guaranteed_pages)
          << "Acquire refused " << needed_pages << " pages although at least "
          << guaranteed_pages
          << " are obtainable outside the locked prefix: " << r.status() << " "
          << Where();
      ++coverage.exhausted;
      return;
    }
    if (needed_pages <= guaranteed_pages && r->evicted_tokens > 0) {
      ++coverage.evicted_beside_locked_prefix;
    }
    ASSERT_EQ(r->matched_tokens, expected_match) << Where();
    ASSERT_EQ(r->prefix_len, prefix) << Where();
    ASSERT_EQ(r->page_aligned_prefix_len, prefix / w.page_size * w.page_size);
    ASSERT_EQ(static_cast<int64_t>(r->kv_indices.size()),
              n + req.reserve_tokens);
    ASSERT_EQ(r->copy_ops.size(), prefix % w.page_size != 0 ? 1u : 0u);
    ASSERT_EQ(cached - CachedTokens(wid), r->evicted_tokens);
    for (size_t p = 0; p < r->kv_indices.size(); ++p) {
      ASSERT_EQ(r->kv_indices[p] % w.page_size,
                static_cast<int64_t>(p % w.page_size));
    }
    ApplyCopies(w, r->copy_ops);
    ++coverage.acquires;
    if (prefix > 0) ++coverage.reused_prefixes;
    if (!r->copy_ops.empty()) ++coverage.partial_page_copies;
    if (r->evicted_tokens > 0) ++coverage.evictions;
    SimLease l;
    l.id = r->lease_id;
    l.worker = wid;
    l.salt = req.cache_salt;
    l.prompt = req.tokens;
    l.tokens = req.tokens;
    l.table = r->kv_indices;
    l.written = prefix;
    for (int64_t p = 0; p < prefix; ++p) l.origin.push_back(next_origin_++);
    l.locked_len = prefix;
    l.expires_at = now_ + 1000;
    // The reused prefix must read back the right KV.
    CheckLeaseContent(l, "acquire prefix");
    if (::testing::Test::HasFailure()) return;
    Write(l, n);
    leases_[l.id] = l;
    if (r->evicted_tokens > 0) SyncAfterEviction(wid);
  }

  void DoGrow(const std::string& before) {
    SimLease* l = PickLease();
    if (l == nullptr) return;
    const uint64_t id = l->id;
    const int32_t n = static_cast<int32_t>(Uniform(1, 20));
    const int64_t now = now_;
    const int64_t cached = CachedTokens(l->worker);
    absl::StatusOr<GrowResult> r = Call([id, n, now](CacheState& s) {
      return s.Grow({id, n}, now);
    });
    if (l->expires_at <= now_) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
      ASSERT_EQ(state_.CanonicalDump(), before);
      return;
    }
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted)
          << r.status();
      ASSERT_EQ(state_.CanonicalDump(), before) << Where();
      return;
    }
    SimWorker& w = workers_.at(l->worker);
    ASSERT_GE(static_cast<int64_t>(r->kv_indices.size()), n);
    ASSERT_EQ(cached - CachedTokens(l->worker), r->evicted_tokens);
    ApplyCopies(w, r->copy_ops);
    if (r->first_remapped_position >= 0) {
      ++coverage.cow_grows;
      ASSERT_EQ(r->copy_ops.size(), 1u);
      for (size_t i = 0; i < r->remapped_kv_indices.size(); ++i) {
        l->table[r->first_remapped_position + i] = r->remapped_kv_indices[i];
      }
    }
    l->table.insert(l->table.end(), r->kv_indices.begin(), r->kv_indices.end());
    l->expires_at = now_ + 1000;
    CheckLeaseContent(*l, "after grow");
    if (r->evicted_tokens > 0) SyncAfterEviction(l->worker);
  }

  void DoFork(const std::string& before) {
    SimLease* l = PickLease();
    if (l == nullptr || l->written < 1) return;
    const uint64_t id = l->id;
    const int32_t children = static_cast<int32_t>(Uniform(1, 3));
    // Half of the forks share generated positions too (beam search), the
    // rest anywhere (parallel sampling forks at the end of the prompt).
    const int64_t past_prompt =
        std::min<int64_t>(l->written, l->prompt.size() + 1);
    const int64_t num_tokens =
        Uniform(Uniform(0, 1) ? past_prompt : 1, l->written);
    const int64_t now = now_;
    absl::StatusOr<ForkResult> r =
        Call([id, children, num_tokens, now](CacheState& s) {
          return s.Fork({id, children, num_tokens}, now);
        });
    if (l->expires_at <= now_) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
      ASSERT_EQ(state_.CanonicalDump(), before);
      return;
    }
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->children.size(), static_cast<size_t>(children));
    l->expires_at = now_ + 1000;
    ++coverage.forks;
    const SimLease parent = *l;
    for (const ForkedLease& c : r->children) {
      ASSERT_EQ(c.kv_indices,
                std::vector<int64_t>(parent.table.begin(),
                                     parent.table.begin() + num_tokens));
      SimLease child;
      child.id = c.lease_id;
      child.worker = parent.worker;
      child.salt = parent.salt;
      child.prompt.assign(
          parent.prompt.begin(),
          parent.prompt.begin() +
              std::min<int64_t>(num_tokens, parent.prompt.size()));
      child.tokens.assign(parent.tokens.begin(),
                          parent.tokens.begin() + num_tokens);
      child.written = num_tokens;
      child.table = c.kv_indices;
      child.origin.assign(parent.origin.begin(),
                          parent.origin.begin() + num_tokens);
      child.forked = true;
      child.locked_len = std::min(parent.locked_len, num_tokens);
      child.expires_at = now_ + 1000;
      leases_[child.id] = child;
    }
  }

  void DoCommit(const std::string& before) {
    SimLease* l = PickLease();
    if (l == nullptr) return;
    const int64_t c =
        Uniform(static_cast<int64_t>(l->prompt.size()), l->written);
    const std::vector<int32_t> tokens(l->tokens.begin(), l->tokens.begin() + c);
    const bool keep = Uniform(0, 2) == 0;
    const uint64_t id = l->id;
    const int64_t expected_inserted =
        c - NaiveMatch(l->worker, l->salt, tokens);
    const int64_t now = now_;
    absl::StatusOr<CommitResult> r =
        Call([id, tokens, keep, now](CacheState& s) {
          return s.Commit({id, tokens, keep}, now);
        });
    if (l->expires_at <= now_) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kNotFound);
      ASSERT_EQ(state_.CanonicalDump(), before);
      return;
    }
    ASSERT_TRUE(r.ok()) << r.status() << " " << Where();
    ASSERT_EQ(r->inserted_tokens, expected_inserted) << Where();
    ASSERT_EQ(r->freed_slots % workers_.at(l->worker).page_size, 0);
    ++coverage.commits;
    if (keep) ++coverage.keep_lease_commits;
    if (l->forked) ++coverage.child_commits;
    for (int64_t p = 0; p < c; ++p) {
      committed_origin_.emplace(l->origin[p], tokens[p]);
    }
    model_[{l->worker, l->salt}].push_back(tokens);
    committed_.push_back(tokens);
    if (committed_.size() > 64) committed_.erase(committed_.begin());
    if (keep) {
      ASSERT_EQ(r->kv_indices.size(), l->table.size());
      l->table = r->kv_indices;
      l->prompt = tokens;
      l->locked_len = c;
      l->expires_at = now_ + 1000;
      CheckLeaseContent(*l, "after keep_lease commit");
    } else {
      ASSERT_TRUE(r->kv_indices.empty());
      ended_.push_back(id);
      leases_.erase(id);
    }
    // A family member that now shares committed positions may lie next.
    if (Uniform(0, 1)) DoDishonestCommit(state_.CanonicalDump());
  }

  // A commit that changes one token at a position whose origin some lease
  // already committed (through the fork family): refused, naming it.
  void DoDishonestCommit(const std::string& before) {
    std::vector<std::pair<SimLease*, int64_t>> fixed;  // (lease, position)
    for (auto& [id, lease] : leases_) {
      for (int64_t p = static_cast<int64_t>(lease.prompt.size());
           p < lease.written; ++p) {
        if (committed_origin_.contains(lease.origin[p])) {
          fixed.push_back({&lease, p});
        }
      }
    }
    if (fixed.empty()) return;
    const auto [l, p] = fixed[Uniform(0, fixed.size() - 1)];
    std::vector<int32_t> tokens(l->tokens.begin(),
                                l->tokens.begin() + Uniform(p + 1, l->written));
    tokens[p] = (tokens[p] + 1) % 4;
    const uint64_t id = l->id;
    const bool keep = Uniform(0, 1) == 0;
    const int64_t now = now_;
    absl::StatusOr<CommitResult> r =
        Call([id, tokens, keep, now](CacheState& s) {
          return s.Commit({id, tokens, keep}, now);
        });
    ASSERT_EQ(r.status().code(), l->expires_at <= now_
                                     ? absl::StatusCode::kNotFound
                                     : absl::StatusCode::kInvalidArgument)
        << r.status() << " " << Where();
    if (l->expires_at > now_) {
      ASSERT_NE(r.status().message().find(absl::StrCat("position ", p, " ")),
                std::string::npos)
          << r.status() << " " << Where();
      ++coverage.refused_contradictions;
    }
    ASSERT_EQ(state_.CanonicalDump(), before) << Where();
  }

  void DoHeartbeat() {
    const std::string wid = PickWorker();
    HeartbeatRequest req;
    req.worker_id = wid;
    req.epoch = workers_.at(wid).epoch;
    req.load.running_requests = static_cast<int32_t>(Uniform(0, 5));
    std::vector<uint64_t> expected_lost;
    for (auto& [id, l] : leases_) {
      if (Uniform(0, 1)) continue;
      req.lease_ids.push_back(id);
      if (l.worker != wid || l.expires_at <= now_) {
        expected_lost.push_back(id);
      } else {
        l.expires_at = now_ + 1000;
      }
    }
    if (!ended_.empty() && Uniform(0, 1)) {
      req.lease_ids.push_back(ended_[Uniform(0, ended_.size() - 1)]);
      expected_lost.push_back(req.lease_ids.back());
    }
    const int64_t now = now_;
    absl::StatusOr<HeartbeatResult> r =
        Call([req, now](CacheState& s) { return s.Heartbeat(req, now); });
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->lost_lease_ids, expected_lost) << Where();
    workers_.at(wid).last_heartbeat = now_;
  }

  void DoInvalidCall(const std::string& before) {
    const int64_t now = now_;
    const std::string wid = PickWorker();
    const int64_t epoch = workers_.at(wid).epoch;
    absl::StatusCode expected = absl::StatusCode::kInvalidArgument;
    std::string got;
    switch (Uniform(0, 7)) {
      case 0: {  // stale epoch
        AcquireRequest req;
        req.worker_id = wid;
        req.epoch = epoch - 1;
        req.tokens = {1};
        expected = absl::StatusCode::kFailedPrecondition;
        got = Describe(
            Call([req, now](CacheState& s) { return s.Acquire(req, now); }));
        break;
      }
      case 1: {  // double release / commit of an ended lease
        if (ended_.empty()) return;
        const uint64_t id = ended_[Uniform(0, ended_.size() - 1)];
        expected = absl::StatusCode::kNotFound;
        got = Describe(
            Call([id, now](CacheState& s) { return s.Release(id, now); }));
        break;
      }
      case 2: {  // commit tokens that do not extend the prompt
        SimLease* l = PickLease();
        if (l == nullptr) return;
        std::vector<int32_t> tokens = l->prompt;
        tokens.back() = tokens.back() == 0 ? 1 : 0;
        const uint64_t id = l->id;
        expected = l->expires_at <= now_ ? absl::StatusCode::kNotFound
                                         : absl::StatusCode::kInvalidArgument;
        got = Describe(Call([id, tokens, now](CacheState& s) {
          return s.Commit({id, tokens, false}, now);
        }));
        break;
      }
      case 3: {  // commit longer than the lease
        SimLease* l = PickLease();
        if (l == nullptr) return;
        std::vector<int32_t> tokens = l->tokens;
        tokens.resize(l->table.size() + 1, 2);
        const uint64_t id = l->id;
        expected = l->expires_at <= now_ ? absl::StatusCode::kNotFound
                                         : absl::StatusCode::kInvalidArgument;
        got = Describe(Call([id, tokens, now](CacheState& s) {
          return s.Commit({id, tokens, true}, now);
        }));
        break;
      }
      case 4: {  // fork / grow out of range
        SimLease* l = PickLease();
        if (l == nullptr) return;
        const uint64_t id = l->id;
        const int64_t len = static_cast<int64_t>(l->table.size());
        expected = l->expires_at <= now_ ? absl::StatusCode::kNotFound
                                         : absl::StatusCode::kInvalidArgument;
        got = Uniform(0, 1) ? Describe(Call([id, len, now](CacheState& s) {
          return s.Fork({id, 1, len + 1}, now);
        }))
                            : Describe(Call([id, now](CacheState& s) {
                                return s.Grow({id, 0}, now);
                              }));
        break;
      }
      case 5: {  // token out of vocab
        AcquireRequest req;
        req.worker_id = wid;
        req.epoch = epoch;
        req.tokens = {1, 2, 1000};
        got = Describe(
            Call([req, now](CacheState& s) { return s.Acquire(req, now); }));
        break;
      }
      case 6: {  // unknown worker
        expected = absl::StatusCode::kNotFound;
        got = Describe(
            Call([now](CacheState& s) { return s.Evict("nobody", 1, now); }));
        break;
      }
      default: {  // a different shape at the same epoch
        RegisterWorkerRequest r;
        r.worker_id = wid;
        r.capacity_slots = workers_.at(wid).capacity * 2;
        r.page_size = workers_.at(wid).page_size;
        r.model = "m";
        r.epoch = epoch;
        r.vocab_size = 1000;
        expected = absl::StatusCode::kFailedPrecondition;
        got = Describe(
            Call([r, now](CacheState& s) { return s.RegisterWorker(r, now); }));
        break;
      }
    }
    ++coverage.invalid_calls;
    const std::string code_name = absl::StatusCodeToString(expected);
    ASSERT_EQ(got.rfind(code_name, 0), 0u) << got << " " << Where();
    ASSERT_EQ(state_.CanonicalDump(), before) << got << " " << Where();
  }

  std::mt19937_64 rng_;
  bool record_;
  CacheState state_;
  int64_t now_ = 1'000'000;
  int step_ = 0;
  std::map<std::string, SimWorker> workers_;
  std::map<uint64_t, SimLease> leases_;
  std::vector<uint64_t> ended_;
  std::map<std::pair<std::string, std::string>,
           std::vector<std::vector<int32_t>>>
      model_;
  std::vector<std::vector<int32_t>> bases_;
  std::vector<std::vector<int32_t>> committed_;
  int64_t next_origin_ = 1;
  // Origin -> token, for every position some Commit inserted.
  std::map<int64_t, int32_t> committed_origin_;
  std::vector<std::function<std::string(CacheState&)>> log_;
  std::vector<std::string> summaries_;
};

uint64_t TestSeed() {
  if (const char* env = std::getenv("RADIXKV_TEST_SEED")) {
    return std::strtoull(env, nullptr, 10);
  }
  return std::random_device{}();
}

int EnvInt(const char* name, int fallback) {
  const char* env = std::getenv(name);
  return env == nullptr ? fallback : std::atoi(env);
}

TEST(CacheStateDifferentialTest, RandomOperationSequencesMatchNaiveModel) {
  const uint64_t seed = TestSeed();
  std::cout << "RADIXKV_TEST_SEED=" << seed << std::endl;
  const int sequences = EnvInt("RADIXKV_DIFF_SEQUENCES", 2000);
  for (int i = 0; i < sequences; ++i) {
    const uint64_t sequence_seed = seed * 1'000'003 + i;
    SCOPED_TRACE(absl::StrCat("RADIXKV_TEST_SEED=", seed, " sequence ", i,
                              " (seed ", sequence_seed, ")"));
    Harness harness(sequence_seed, /*record=*/false);
    harness.Run(60);
    if (::testing::Test::HasFailure()) return;
  }
  const Coverage& c = coverage;
  std::cout << "coverage: acquires=" << c.acquires
            << " reused_prefixes=" << c.reused_prefixes
            << " partial_page_copies=" << c.partial_page_copies
            << " resource_exhausted=" << c.exhausted
            << " acquires_with_eviction=" << c.evictions
            << " commits=" << c.commits
            << " keep_lease_commits=" << c.keep_lease_commits
            << " forks=" << c.forks << " cow_grows=" << c.cow_grows
            << " expired=" << c.expired << " wipes=" << c.wipes
            << " invalid_calls=" << c.invalid_calls
            << " restores=" << c.restores << " evicted_beside_locked_prefix="
            << c.evicted_beside_locked_prefix
            << " child_commits=" << c.child_commits
            << " refused_contradictions=" << c.refused_contradictions
            << std::endl;
  if (sequences >= 100) {
    for (int64_t n :
         {c.reused_prefixes, c.partial_page_copies, c.exhausted, c.evictions,
          c.keep_lease_commits, c.forks, c.cow_grows, c.expired, c.wipes,
          c.invalid_calls, c.restores, c.evicted_beside_locked_prefix,
          c.child_commits, c.refused_contradictions}) {
      EXPECT_GT(n, 0);
    }
  }
}

TEST(CacheStateDifferentialTest, ReplayOntoSnapshotReproducesState) {
  const uint64_t seed = TestSeed();
  std::cout << "RADIXKV_TEST_SEED=" << seed << std::endl;
  for (int i = 0; i < 100; ++i) {
    const uint64_t sequence_seed = seed * 7919 + i;
    SCOPED_TRACE(absl::StrCat("RADIXKV_TEST_SEED=", seed, " sequence ", i));
    Harness harness(sequence_seed, /*record=*/true);
    harness.Run(40);
    ASSERT_FALSE(::testing::Test::HasFailure());
    const size_t cut = harness.log().size() / 2;
    // Re-run the first half on a fresh state to take the snapshot there.
    CacheState first(harness.state().options());
    for (size_t k = 0; k < cut; ++k) {
      ASSERT_EQ(harness.log()[k](first), harness.summaries()[k]) << k;
    }
    const std::string snapshot = first.Serialize();
    CacheState restored(harness.state().options());
    ASSERT_TRUE(restored.Restore(snapshot).ok());
    ASSERT_EQ(restored.CanonicalDump(), first.CanonicalDump());
    for (size_t k = cut; k < harness.log().size(); ++k) {
      ASSERT_EQ(harness.log()[k](restored), harness.summaries()[k])
          << "op " << k;
    }
    ASSERT_EQ(restored.CanonicalDump(), harness.state().CanonicalDump());
    ASSERT_TRUE(restored.CheckInvariants().ok());
  }
}

}  // namespace
}  // namespace radixkv::cache_service

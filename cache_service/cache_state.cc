#include "cache_service/cache_state.h"

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <map>
#include <set>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cache_service/fork_links.h"
#include "cache_service/lease_table.h"
#include "cache_service/radix_tree.h"

namespace radixkv::cache_service {
namespace {

static_assert(kMaxWorkersPerModel == kMaxResidentWorkers);

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Most page references all leases of a worker may hold together (tables of
// forked children share pages but each holds its own table): 32 per pool
// page, at least 2^20. Bounds lease memory against runaway Fork/Acquire.
int64_t LeasePageRefLimit(int64_t num_pages) {
  return std::max<int64_t>(int64_t{1} << 20, 32 * num_pages);
}

// FAILED_PRECONDITION for a call carrying another epoch than the registered
// one: an older epoch is a stale process; a newer one means the worker
// restarted and must Register its new epoch first.
absl::Status EpochMismatch(std::string_view worker_id, int64_t epoch,
                           int64_t registered) {
  if (epoch > registered) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", std::string(worker_id), ": epoch ", epoch,
        " is newer than the registered epoch ", registered, "; re-register"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("worker ", std::string(worker_id), ": stale epoch ", epoch,
                   " (registered ", registered, ")"));
}

std::string Quote(std::string_view s) {
  return absl::StrCat("\"", absl::CEscape(std::string(s)), "\"");
}

// "a..b" runs of consecutive (step +1 or -1) integers, comma-separated.
template <typename T>
std::string Runs(const std::vector<T>& values) {
  std::string out;
  size_t i = 0;
  while (i < values.size()) {
    size_t j = i;
    int64_t step = 0;
    if (i + 1 < values.size()) {
      const int64_t d = static_cast<int64_t>(values[i + 1]) - values[i];
      if (d == 1 || d == -1) step = d;
    }
    if (step != 0) {
      while (j + 1 < values.size() &&
             static_cast<int64_t>(values[j + 1]) - values[j] == step) {
        ++j;
      }
    }
    if (!out.empty()) out += ",";
    if (j == i) {
      absl::StrAppend(&out, values[i]);
    } else {
      absl::StrAppend(&out, values[i], "..", values[j]);
    }
    i = j + 1;
  }
  return out;
}

// ---- binary snapshot encoding: varints, zigzag, length-prefixed bytes ----

class Writer {
 public:
  void U64(uint64_t v) {
    char buf[10];
    int n = 0;
    while (v >= 0x80) {
      buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    buf[n++] = static_cast<char>(v);
    out_.append(buf, n);
  }
  void Reserve(size_t bytes) { out_.reserve(bytes); }
  void I64(int64_t v) {
    U64((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s.data(), s.size());
  }
  // Delta-encoded (slot runs and free lists step by +-1: one byte each).
  void I32s(const std::vector<int32_t>& v) {
    U64(v.size());
    int64_t previous = 0;
    for (int32_t x : v) {
      I64(static_cast<int64_t>(x) - previous);
      previous = x;
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  uint64_t U64() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return Fail();
      const uint8_t byte = static_cast<uint8_t>(in_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    return Fail();
  }
  int64_t I64() {
    const uint64_t v = U64();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  int32_t I32() {
    const int64_t v = I64();
    if (v < INT32_MIN || v > INT32_MAX) return static_cast<int32_t>(Fail());
    return static_cast<int32_t>(v);
  }
  std::string Str() {
    const uint64_t n = U64();
    if (!ok_ || n > in_.size() - pos_) return Fail(), std::string();
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::vector<int32_t> I32s() {
    const uint64_t n = U64();
    std::vector<int32_t> v;
    if (!ok_ || n > in_.size() - pos_) return Fail(), v;  // >= 1 byte each
    v.reserve(n);
    int64_t previous = 0;
    for (uint64_t i = 0; i < n && ok_; ++i) {
      const int64_t delta = I64();
      if (delta < -(int64_t{1} << 33) || delta > (int64_t{1} << 33)) {
        return Fail(), v;
      }
      const int64_t x = previous + delta;
      if (x < INT32_MIN || x > INT32_MAX) return Fail(), v;
      v.push_back(static_cast<int32_t>(x));
      previous = x;
    }
    return v;
  }

 private:
  uint64_t Fail() {
    ok_ = false;
    pos_ = in_.size();
    return 0;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// v2 added each lease's shared_tokens and the fork links; v1 snapshots
// (no fork families known) are still read.
constexpr std::string_view kSnapshotMagicV1 = "radixkv.cache_state.v1";
constexpr std::string_view kSnapshotMagic = "radixkv.cache_state.v2";

// True when some token, read as uint32, is >= limit (so negative ids count as
// huge). SSE2 (baseline x86-64): unsigned compare as signed compare of
// sign-flipped values, 8 tokens per step; ~3x the scalar loop at -O2.
bool AnyTokenAtOrAbove(const std::vector<int32_t>& tokens, uint32_t limit) {
  const size_t n = tokens.size();
  const int32_t* t = tokens.data();
  size_t i = 0;
  bool bad = false;
#if defined(__SSE2__)
  const __m128i sign = _mm_set1_epi32(INT32_MIN);
  const __m128i max_ok =
      _mm_set1_epi32(static_cast<int32_t>((limit - 1) ^ 0x80000000u));
  __m128i acc0 = _mm_setzero_si128();
  __m128i acc1 = _mm_setzero_si128();
  for (; i + 8 <= n; i += 8) {
    const __m128i a = _mm_xor_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + i)), sign);
    const __m128i b = _mm_xor_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + i + 4)), sign);
    acc0 = _mm_or_si128(acc0, _mm_cmpgt_epi32(a, max_ok));
    acc1 = _mm_or_si128(acc1, _mm_cmpgt_epi32(b, max_ok));
  }
  bad = _mm_movemask_epi8(_mm_or_si128(acc0, acc1)) != 0;
#endif
  for (; i < n; ++i) bad |= static_cast<uint32_t>(t[i]) >= limit;
  return bad;
}

}  // namespace

// ---------------------------------------------------------------------------

struct WorkerEntry {
  RegisterWorkerRequest info;
  WorkerLoad load;
  int64_t last_heartbeat_ms = 0;
  // False from MarkWorkersUnconfirmed until the next Heartbeat or
  // same-epoch Register (not part of the logical state).
  bool confirmed = true;
  int bit = 0;
  std::unique_ptr<PageAllocator> allocator;
  std::unique_ptr<EvictionQueue> queue;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evicted_tokens = 0;
  int64_t expired_leases = 0;
  std::set<uint64_t> lease_ids;
  // Sum of the page-table lengths of the worker's leases (bounded by
  // LeasePageRefLimit so forks cannot grow memory without bound).
  int64_t lease_page_refs = 0;
};

struct ModelEntry {
  std::unique_ptr<WorkerContexts> contexts = std::make_unique<WorkerContexts>();
  uint64_t mask = 0;
  std::array<std::string, kMaxWorkersPerModel> bit_owner;
  std::map<std::string, std::unique_ptr<RadixTree>> trees;  // by cache_salt
};

class CacheStateImpl {
 public:
  explicit CacheStateImpl(CacheOptions options) : options_(options) {
    options_.grow_chunk_tokens = std::max(1, options_.grow_chunk_tokens);
  }

  // All public operations; see cache_state.h.
  absl::StatusOr<RegisterWorkerResult> RegisterWorker(
      const RegisterWorkerRequest& request, int64_t now_ms);
  absl::Status CheckVocabAgreesWithLiveWorkers(
      const RegisterWorkerRequest& request, int64_t now_ms) const;
  absl::Status CheckRegisterWithinBounds(
      const RegisterWorkerRequest& request) const;
  absl::Status CheckCommitWithinBounds(const CommitRequest& request,
                                       int64_t now_ms) const;
  absl::StatusOr<HeartbeatResult> Heartbeat(const HeartbeatRequest& request,
                                            int64_t now_ms);
  absl::StatusOr<DeregisterResult> DeregisterWorker(std::string_view worker_id,
                                                    int64_t epoch);
  absl::StatusOr<MatchResult> Match(const MatchRequest& request,
                                    int64_t now_ms) const;
  absl::StatusOr<AcquireResult> Acquire(const AcquireRequest& request,
                                        int64_t now_ms);
  absl::StatusOr<GrowResult> Grow(const GrowRequest& request, int64_t now_ms);
  absl::StatusOr<ForkResult> Fork(const ForkRequest& request, int64_t now_ms);
  absl::StatusOr<CommitResult> Commit(const CommitRequest& request,
                                      int64_t now_ms);
  absl::StatusOr<ReleaseResult> Release(uint64_t lease_id, int64_t now_ms);
  absl::StatusOr<EvictResult> Evict(std::string_view worker_id,
                                    int64_t num_tokens);
  absl::StatusOr<FlushResult> Flush(std::string_view worker_id);
  absl::StatusOr<StatsResult> Stats(std::string_view worker_id,
                                    int64_t now_ms) const;
  ExpireResult ExpireLeases(int64_t now_ms);
  DropResult DropDeadWorkers(int64_t now_ms);
  void CreditServicePause(int64_t paused_ms, int64_t now_ms);
  void MarkWorkersUnconfirmed();
  std::string CanonicalDump() const;
  std::string Serialize() const;
  static absl::StatusOr<std::unique_ptr<CacheStateImpl>> Deserialize(
      std::string_view snapshot, const CacheOptions& options);
  absl::Status CheckInvariants() const;
  absl::StatusOr<std::vector<std::vector<int32_t>>> ResidentSequences(
      std::string_view model, std::string_view cache_salt,
      std::string_view worker_id) const;

  const CacheOptions& options() const { return options_; }

 private:
  WorkerEntry* FindWorker(std::string_view id) {
    auto it = workers_.find(std::string(id));
    return it == workers_.end() ? nullptr : &it->second;
  }
  const WorkerEntry* FindWorker(std::string_view id) const {
    auto it = workers_.find(std::string(id));
    return it == workers_.end() ? nullptr : &it->second;
  }
  RadixTree* FindTree(const std::string& model, const std::string& salt) const;
  RadixTree* GetOrCreateTree(const std::string& model, const std::string& salt);
  void MaybeDropTree(RadixTree* tree);
  absl::StatusOr<Lease*> LiveLease(uint64_t lease_id, int64_t now_ms);
  absl::Status ValidateTokens(const std::vector<int32_t>& tokens,
                              int32_t vocab_size) const;
  int32_t ModelVocab(const std::string& model) const;
  // Evicts the worker's first evictable leaf; false when none is left.
  bool EvictOne(WorkerEntry& worker, int64_t* evicted_tokens);
  // Evicts until at least `pages` pages are free (the caller checked that
  // free + evictable suffices). Returns tokens evicted.
  int64_t EvictUntilFree(WorkerEntry& worker, int64_t pages);
  // Unlocks the lease's path, drops its page references and erases it.
  // Returns pages freed.
  int64_t EndLease(Lease* lease);
  // Drops every lease and all residency of a worker and unregisters it.
  int32_t RemoveWorker(const std::string& worker_id);
  std::vector<int64_t> TableSlots(const Lease& lease, int32_t page_size,
                                  int64_t from, int64_t to) const;
  // INVALID_ARGUMENT naming the first position where `tokens` contradict
  // what the lease's KV is known to hold (its prompt, then the tokens its
  // fork family committed at positions it shares).
  absl::Status CheckCommitAgrees(const Lease& lease,
                                 const std::vector<int32_t>& tokens) const;
  // After a Commit of `lease_id` with `tokens`: every lease sharing some of
  // positions [0, len(tokens)) with it through Fork learns their tokens.
  void ShareCommittedTokens(uint64_t lease_id,
                            const std::vector<int32_t>& tokens);
  // Snapshot restore: links the leases as `links` say. INVALID_ARGUMENT
  // when a link names an unknown lease, joins two workers, is longer than a
  // table or closes a cycle.
  absl::Status RestoreForkLinks(const std::vector<ForkLink>& links);
  // The fork-link part of CheckInvariants.
  absl::Status CheckForkLinks() const;
  // No slot of a worker is held by two tree records (CheckInvariants).
  absl::Status CheckSlotsHeldOnce(const WorkerEntry& worker,
                                  const ModelEntry& model) const;

  CacheOptions options_;
  std::map<std::string, WorkerEntry> workers_;
  std::map<std::string, ModelEntry> models_;
  LeaseTable leases_;
  // Which live leases share KV positions through Fork.
  ForkLinks fork_links_;
  uint64_t next_node_id_ = 1;
  int64_t expired_leases_total_ = 0;
};

// ---- helpers ----

RadixTree* CacheStateImpl::FindTree(const std::string& model,
                                    const std::string& salt) const {
  auto m = models_.find(model);
  if (m == models_.end()) return nullptr;
  auto t = m->second.trees.find(salt);
  return t == m->second.trees.end() ? nullptr : t->second.get();
}

RadixTree* CacheStateImpl::GetOrCreateTree(const std::string& model,
                                           const std::string& salt) {
  ModelEntry& entry = models_.at(model);
  auto& slot = entry.trees[salt];
  if (slot == nullptr) {
    slot = std::make_unique<RadixTree>(model, salt, options_.eviction_policy,
                                       entry.contexts.get(), &next_node_id_);
  }
  return slot.get();
}

void CacheStateImpl::MaybeDropTree(RadixTree* tree) {
  if (!tree->empty()) return;
  auto m = models_.find(tree->model());
  if (m == models_.end()) return;
  m->second.trees.erase(tree->cache_salt());
}

absl::StatusOr<Lease*> CacheStateImpl::LiveLease(uint64_t lease_id,
                                                 int64_t now_ms) {
  Lease* lease = leases_.Find(lease_id);
  if (lease == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "lease ", lease_id, " not found (unknown, committed or released)"));
  }
  if (lease->expires_at_ms <= now_ms) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " expired at ",
                                            lease->expires_at_ms, " ms"));
  }
  return lease;
}

absl::Status CacheStateImpl::ValidateTokens(const std::vector<int32_t>& tokens,
                                            int32_t vocab_size) const {
  if (tokens.empty()) return absl::InvalidArgumentError("tokens is empty");
  if (static_cast<int64_t>(tokens.size()) > kMaxPromptTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        tokens.size(), " tokens exceed the limit of ", kMaxPromptTokens));
  }
  // SIMD scan first (Match of long prompts is hot), then locate the
  // offending position only on error.
  const uint32_t limit =
      vocab_size > 0 ? static_cast<uint32_t>(vocab_size) : uint32_t{1} << 31;
  if (!AnyTokenAtOrAbove(tokens, limit)) return absl::OkStatus();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || (vocab_size > 0 && tokens[i] >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", tokens[i], " at position ", i, " is outside [0, ",
          vocab_size > 0 ? vocab_size : 0, vocab_size > 0 ? ")" : "inf)"));
    }
  }
  return absl::OkStatus();
}

int32_t CacheStateImpl::ModelVocab(const std::string& model) const {
  int32_t vocab = 0;
  for (const auto& [id, worker] : workers_) {
    if (worker.info.model == model && worker.info.vocab_size > 0) {
      vocab = vocab == 0 ? worker.info.vocab_size
                         : std::min(vocab, worker.info.vocab_size);
    }
  }
  return vocab;
}

bool CacheStateImpl::EvictOne(WorkerEntry& worker, int64_t* evicted_tokens) {
  if (worker.queue->empty()) return false;
  RadixNode* node = worker.queue->Front().second;
  RadixTree* tree = node->tree();
  const EvictOutcome outcome = tree->EvictLeaf(node, worker.bit);
  *evicted_tokens += outcome.evicted_tokens;
  worker.evicted_tokens += outcome.evicted_tokens;
  MaybeDropTree(tree);
  return true;
}

int64_t CacheStateImpl::EvictUntilFree(WorkerEntry& worker, int64_t pages) {
  int64_t evicted = 0;
  while (worker.allocator->num_free_pages() < pages) {
    if (!EvictOne(worker, &evicted)) break;
  }
  return evicted;
}

int64_t CacheStateImpl::EndLease(Lease* lease) {
  WorkerEntry& worker = workers_.at(lease->worker_id);
  if (lease->terminal != nullptr) {
    lease->terminal->tree()->UnlockPath(lease->terminal, worker.bit);
  }
  int64_t freed = 0;
  for (int32_t page : lease->pages) {
    if (worker.allocator->Unref(page, /*protect=*/true)) ++freed;
  }
  worker.lease_ids.erase(lease->id);
  worker.lease_page_refs -= static_cast<int64_t>(lease->pages.size());
  fork_links_.Remove(lease->id);
  leases_.Erase(lease->id);
  return freed;
}

std::vector<int64_t> CacheStateImpl::TableSlots(const Lease& lease,
                                                int32_t page_size, int64_t from,
                                                int64_t to) const {
  std::vector<int64_t> slots(std::max<int64_t>(0, to - from));
  int64_t p = from;
  while (p < to) {
    // One page at a time: no division per position.
    const int64_t page_end = std::min(to, (p / page_size + 1) * page_size);
    const int64_t base =
        static_cast<int64_t>(lease.pages[p / page_size]) * page_size -
        (p / page_size) * page_size;
    for (; p < page_end; ++p) slots[p - from] = base + p;
  }
  return slots;
}

absl::Status CacheStateImpl::CheckCommitAgrees(
    const Lease& lease, const std::vector<int32_t>& tokens) const {
  const int64_t n =
      std::min(static_cast<int64_t>(tokens.size()), lease.known_length());
  const int64_t prompt = static_cast<int64_t>(lease.prompt.size());
  for (int64_t p = 0; p < n; ++p) {
    const int32_t known = lease.known_token(p);
    if (tokens[p] == known) continue;
    if (p < prompt) {
      return absl::InvalidArgumentError(
          absl::StrCat("commit tokens of lease ", lease.id,
                       " do not extend its prompt: position ", p,
                       " holds token ", tokens[p], ", the prompt ", known));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "commit tokens of lease ", lease.id, " disagree at position ", p,
        " with the KV it shares through Fork: a lease of its fork family "
        "committed token ",
        known, " there, this commit has ", tokens[p]));
  }
  return absl::OkStatus();
}

void CacheStateImpl::ShareCommittedTokens(uint64_t lease_id,
                                          const std::vector<int32_t>& tokens) {
  fork_links_.Visit(lease_id, static_cast<int64_t>(tokens.size()),
                    [&](uint64_t other, int64_t shared) {
                      Lease* lease = leases_.Find(other);
                      const int64_t known = lease->known_length();
                      // Everything past `other` already knows what it knows
                      // (the links keep knowledge propagated), so the walk can
                      // stop there.
                      if (known >= shared) return false;
                      lease->shared_tokens.insert(lease->shared_tokens.end(),
                                                  tokens.begin() + known,
                                                  tokens.begin() + shared);
                      return true;
                    });
}

int32_t CacheStateImpl::RemoveWorker(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  WorkerEntry& worker = it->second;
  const int32_t released = static_cast<int32_t>(worker.lease_ids.size());
  // The worker's pool is gone: its leases and residency vanish without
  // touching its allocator (which is dropped with it).
  for (uint64_t id : worker.lease_ids) {
    fork_links_.Remove(id);
    leases_.Erase(id);
  }
  ModelEntry& model = models_.at(worker.info.model);
  for (auto t = model.trees.begin(); t != model.trees.end();) {
    t->second->RemoveWorker(worker.bit);
    t = t->second->empty() ? model.trees.erase(t) : std::next(t);
  }
  (*model.contexts)[worker.bit] = WorkerContext{};
  model.mask &= ~(uint64_t{1} << worker.bit);
  model.bit_owner[worker.bit].clear();
  if (model.mask == 0 && model.trees.empty()) models_.erase(worker.info.model);
  workers_.erase(it);
  return released;
}

// ---- Register / Heartbeat / Deregister ----

namespace {

// The INVALID_ARGUMENT checks of RegisterWorker (see cache_state.h).
absl::Status ValidateRegisterFields(const RegisterWorkerRequest& request) {
  if (request.worker_id.empty() ||
      request.worker_id.size() > kMaxWorkerIdBytes) {
    return absl::InvalidArgumentError("worker_id must be 1..128 bytes");
  }
  if (request.model.empty()) {
    return absl::InvalidArgumentError("model must not be empty");
  }
  if (!IsValidPageSize(request.page_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size ", request.page_size,
                     " is not one of 1, 8, 16, 32, 64, 128"));
  }
  if (request.capacity_slots < request.page_size ||
      request.capacity_slots % request.page_size != 0 ||
      request.capacity_slots > kMaxCapacitySlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_slots ", request.capacity_slots,
                     " must be a multiple of page_size ", request.page_size,
                     " in [", request.page_size, ", ", kMaxCapacitySlots, "]"));
  }
  if (request.epoch < 0 || request.vocab_size < 0) {
    return absl::InvalidArgumentError("epoch and vocab_size must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RegisterWorkerResult> CacheStateImpl::RegisterWorker(
    const RegisterWorkerRequest& request, int64_t now_ms) {
  if (absl::Status s = ValidateRegisterFields(request); !s.ok()) return s;
  RegisterWorkerResult result;
  result.epoch = request.epoch;
  result.lease_ttl_ms = options_.lease_ttl_ms;
  result.heartbeat_timeout_ms = options_.heartbeat_timeout_ms;
  result.heartbeat_interval_ms = std::max<int64_t>(
      1, std::min(options_.heartbeat_timeout_ms, options_.lease_ttl_ms) / 4);
  if (WorkerEntry* known = FindWorker(request.worker_id)) {
    if (request.epoch < known->info.epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", request.worker_id, ": epoch ", request.epoch,
          " is older than the registered epoch ", known->info.epoch));
    }
    if (request.epoch == known->info.epoch) {
      if (request.capacity_slots != known->info.capacity_slots ||
          request.page_size != known->info.page_size ||
          request.model != known->info.model ||
          request.vocab_size != known->info.vocab_size) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", request.worker_id, " epoch ", request.epoch,
            " is already registered with another shape (capacity, page_size, "
            "model or vocab_size); use a new epoch"));
      }
      known->info.address = request.address;
      known->info.metrics_address = request.metrics_address;
      known->last_heartbeat_ms = now_ms;
      known->confirmed = true;
      return result;
    }
    // A newer epoch: the old process's KV is gone. The model might change, so
    // check room in the new model before wiping.
    if (request.model != known->info.model) {
      auto m = models_.find(request.model);
      if (m != models_.end() && m->second.mask == ~uint64_t{0}) {
        return absl::ResourceExhaustedError(
            absl::StrCat("model ", request.model, " already has ",
                         kMaxWorkersPerModel, " workers"));
      }
    }
  } else {
    auto m = models_.find(request.model);
    if (m != models_.end() && m->second.mask == ~uint64_t{0}) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model ", request.model, " already has ",
                       kMaxWorkersPerModel, " workers"));
    }
  }
  // The largest allocation comes first: if it fails, nothing has changed
  // (the previous epoch is still registered).
  absl::StatusOr<PageAllocator> allocator =
      PageAllocator::Create(request.capacity_slots, request.page_size);
  if (!allocator.ok()) return allocator.status();
  if (FindWorker(request.worker_id) != nullptr) {
    result.wiped_previous_epoch = true;
    result.released_leases = RemoveWorker(request.worker_id);
  }
  ModelEntry& model = models_[request.model];
  const int bit = std::countr_one(model.mask);
  WorkerEntry& worker = workers_[request.worker_id];
  worker.info = request;
  worker.last_heartbeat_ms = now_ms;
  worker.bit = bit;
  worker.allocator = std::make_unique<PageAllocator>(*std::move(allocator));
  worker.queue = std::make_unique<EvictionQueue>();
  model.mask |= uint64_t{1} << bit;
  model.bit_owner[bit] = request.worker_id;
  (*model.contexts)[bit] =
      WorkerContext{worker.allocator.get(), worker.queue.get(), 0};
  return result;
}

absl::Status CacheStateImpl::CheckVocabAgreesWithLiveWorkers(
    const RegisterWorkerRequest& request, int64_t now_ms) const {
  if (absl::Status s = ValidateRegisterFields(request); !s.ok()) return s;
  if (request.vocab_size == 0) return absl::OkStatus();
  // workers_ is ordered by worker_id: the first disagreeing worker is the
  // smallest id, so the message is deterministic.
  for (const auto& [id, worker] : workers_) {
    if (id == request.worker_id || worker.info.model != request.model ||
        worker.info.vocab_size <= 0 ||
        worker.info.vocab_size == request.vocab_size ||
        now_ms - worker.last_heartbeat_ms > options_.heartbeat_timeout_ms) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", request.worker_id, ": vocab_size ", request.vocab_size,
        " differs from vocab_size ", worker.info.vocab_size, " of live worker ",
        id, " (epoch ", worker.info.epoch, ") of model ", request.model,
        "; all live workers of a model must share its vocabulary (token ids "
        "are validated against it)"));
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckRegisterWithinBounds(
    const RegisterWorkerRequest& request) const {
  if (absl::Status s = ValidateRegisterFields(request); !s.ok()) return s;
  const MetadataBounds& bounds = options_.bounds;
  int64_t in_use = 0;
  for (const auto& [id, worker] : workers_) {
    if (id != request.worker_id) in_use += worker.info.capacity_slots;
  }
  if (in_use + request.capacity_slots > bounds.max_total_slots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", request.worker_id, ": capacity_slots ",
        request.capacity_slots, " with the ", in_use,
        " slots other workers have registered exceeds the service's limit of ",
        bounds.max_total_slots,
        " slots (--max_total_slots; metadata costs 12 bytes per page and "
        "8-360 bytes per cached token, docs/architecture.md)"));
  }
  const size_t others =
      workers_.size() - (FindWorker(request.worker_id) != nullptr);
  if (static_cast<int64_t>(others) + 1 > bounds.max_workers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", request.worker_id, ": ", others,
                     " workers are registered, the service's limit is ",
                     bounds.max_workers, " (--max_workers)"));
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckCommitWithinBounds(
    const CommitRequest& request, int64_t now_ms) const {
  const Lease* lease = leases_.Find(request.lease_id);
  if (lease == nullptr || lease->expires_at_ms <= now_ms ||
      FindTree(lease->model, lease->cache_salt) != nullptr) {
    return absl::OkStatus();
  }
  size_t trees = 0;
  for (const auto& [name, model] : models_) trees += model.trees.size();
  if (static_cast<int64_t>(trees) < options_.bounds.max_trees) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "commit of lease ", lease->id, " would add a radix tree for model ",
      lease->model, " and its cache_salt to the ", trees,
      " trees the service holds; the limit is ", options_.bounds.max_trees,
      " (--max_trees); the tokens are not cached, the lease is unchanged"));
}

absl::StatusOr<HeartbeatResult> CacheStateImpl::Heartbeat(
    const HeartbeatRequest& request, int64_t now_ms) {
  WorkerEntry* worker = FindWorker(request.worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", request.worker_id));
  }
  if (request.epoch != worker->info.epoch) {
    return EpochMismatch(request.worker_id, request.epoch, worker->info.epoch);
  }
  const WorkerLoad& load = request.load;
  if (load.running_requests < 0 || load.waiting_requests < 0 ||
      load.outstanding_tokens < 0 || load.available_slots < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", request.worker_id,
        ": load values must be >= 0 (running_requests ", load.running_requests,
        ", waiting_requests ", load.waiting_requests, ", outstanding_tokens ",
        load.outstanding_tokens, ", available_slots ", load.available_slots,
        ")"));
  }
  worker->load = request.load;
  worker->last_heartbeat_ms = std::max(worker->last_heartbeat_ms, now_ms);
  worker->confirmed = true;
  HeartbeatResult result;
  for (uint64_t id : request.lease_ids) {
    Lease* lease = leases_.Find(id);
    if (lease == nullptr || lease->worker_id != request.worker_id ||
        lease->expires_at_ms <= now_ms) {
      result.lost_lease_ids.push_back(id);
      continue;
    }
    leases_.Renew(lease, now_ms + options_.lease_ttl_ms);
  }
  return result;
}

absl::StatusOr<DeregisterResult> CacheStateImpl::DeregisterWorker(
    std::string_view worker_id, int64_t epoch) {
  WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", std::string(worker_id)));
  }
  if (epoch != worker->info.epoch) {
    return EpochMismatch(worker_id, epoch, worker->info.epoch);
  }
  DeregisterResult result;
  result.released_leases = RemoveWorker(std::string(worker_id));
  return result;
}

// ---- Match / Acquire ----

absl::StatusOr<MatchResult> CacheStateImpl::Match(const MatchRequest& request,
                                                  int64_t now_ms) const {
  if (request.cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError("cache_salt exceeds 256 bytes");
  }
  if (absl::Status s =
          ValidateTokens(request.tokens, ModelVocab(request.model));
      !s.ok()) {
    return s;
  }
  MatchResult result;
  auto m = models_.find(request.model);
  if (m == models_.end()) return result;
  const ModelEntry& model = m->second;
  std::array<int64_t, kMaxResidentWorkers> matched;
  matched.fill(0);
  if (const RadixTree* tree = FindTree(request.model, request.cache_salt)) {
    tree->MatchAll(request.tokens, model.mask, &matched);
  }
  uint64_t bits = model.mask;
  while (bits != 0) {
    const int bit = std::countr_zero(bits);
    bits &= bits - 1;
    const WorkerEntry& worker = workers_.at(model.bit_owner[bit]);
    WorkerMatch match;
    match.worker_id = worker.info.worker_id;
    match.address = worker.info.address;
    match.epoch = worker.info.epoch;
    // An unconfirmed worker's residency may describe a pool that is gone.
    match.unconfirmed = !worker.confirmed;
    match.matched_tokens = worker.confirmed ? matched[bit] : 0;
    match.page_aligned_tokens =
        match.matched_tokens / worker.info.page_size * worker.info.page_size;
    match.load = worker.load;
    match.heartbeat_age_ms =
        std::max<int64_t>(0, now_ms - worker.last_heartbeat_ms);
    match.capacity_slots = worker.allocator->capacity_slots();
    match.free_slots = worker.allocator->free_slots();
    match.evictable_slots = worker.allocator->evictable_slots();
    match.protected_slots = worker.allocator->protected_slots();
    match.cached_tokens = (*model.contexts)[bit].resident_tokens;
    match.page_size = worker.info.page_size;
    result.workers.push_back(std::move(match));
  }
  std::sort(result.workers.begin(), result.workers.end(),
            [](const WorkerMatch& a, const WorkerMatch& b) {
              return a.worker_id < b.worker_id;
            });
  return result;
}

absl::StatusOr<AcquireResult> CacheStateImpl::Acquire(
    const AcquireRequest& request, int64_t now_ms) {
  WorkerEntry* worker = FindWorker(request.worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", request.worker_id));
  }
  if (request.epoch != worker->info.epoch) {
    return EpochMismatch(request.worker_id, request.epoch, worker->info.epoch);
  }
  if (!request.model.empty() && request.model != worker->info.model) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id, " serves model ",
                     worker->info.model, ", not ", request.model));
  }
  if (request.cache_salt.size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError("cache_salt exceeds 256 bytes");
  }
  if (request.reserve_tokens < 0 ||
      request.reserve_tokens > kMaxReserveTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve_tokens ", request.reserve_tokens, " outside [0, ",
                     kMaxReserveTokens, "]"));
  }
  if (absl::Status s = ValidateTokens(request.tokens, worker->info.vocab_size);
      !s.ok()) {
    return s;
  }
  const std::string& model_name = worker->info.model;
  const int bit = worker->bit;
  const int32_t page_size = worker->info.page_size;
  const int64_t num_tokens = static_cast<int64_t>(request.tokens.size());
  PageAllocator& allocator = *worker->allocator;

  RadixTree* tree = FindTree(model_name, request.cache_salt);
  PathMatch match;
  if (tree != nullptr && !request.disable_match) {
    match = tree->MatchWorker(request.tokens, bit);
  }
  const int64_t prefix_len = std::min(match.matched_tokens, num_tokens - 1);
  RadixNode* terminal = nullptr;
  for (RadixNode* node : match.path) {
    if (node->start() < prefix_len) terminal = node;
  }
  const int64_t length = num_tokens + request.reserve_tokens;
  const int64_t total_pages = CeilDiv(length, page_size);
  const int64_t shared_pages = prefix_len / page_size;
  const int32_t partial = static_cast<int32_t>(prefix_len % page_size);
  const int64_t new_pages = total_pages - shared_pages;

  if (worker->lease_page_refs + total_pages >
      LeasePageRefLimit(allocator.num_pages())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", request.worker_id, ": leases already reference ",
        worker->lease_page_refs, " pages (limit ",
        LeasePageRefLimit(allocator.num_pages()), ")"));
  }
  // Only positions [0, prefix_len) get locked (background.md §2.3-§2.4, SGLang
  // semantics): the rest of the edge the match ends in stays evictable. Room
  // is decided before anything changes - the pages the lock would protect
  // are subtracted from the evictable ones - so a failed call leaves the
  // state (and CanonicalDump) untouched; the split for the lock happens only
  // once success is certain.
  const int64_t free_pages = allocator.num_free_pages();
  int64_t available_pages = free_pages + allocator.num_evictable_pages();
  if (new_pages > free_pages && terminal != nullptr) {
    available_pages -=
        tree->PagesProtectedByLockPrefix(terminal, prefix_len, bit);
  }
  if (new_pages > available_pages) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", request.worker_id, " needs ", new_pages * page_size,
        " slots for ", num_tokens, " tokens (", prefix_len,
        " cached) + reserve ", request.reserve_tokens, " but only ",
        available_pages * page_size,
        " are free or evictable once the cached prefix is locked"));
  }
  // Slots of the matched prefix, read before the split below (which moves
  // the path's last node object to the lower half of its edge).
  std::vector<int32_t> tree_slots;
  if (prefix_len > 0) tree_slots = RadixTree::PathSlots(match, bit, prefix_len);
  // Lock before evicting so that eviction cannot take the matched prefix.
  if (terminal != nullptr)
    terminal = tree->LockPrefix(terminal, prefix_len, bit);
  AcquireResult result;
  result.evicted_tokens = EvictUntilFree(*worker, new_pages);
  if (terminal != nullptr) {
    tree->TouchPath(terminal, bit, now_ms, request.priority,
                    /*count_hit=*/true);
  }

  Lease lease;
  lease.worker_id = request.worker_id;
  lease.model = model_name;
  lease.cache_salt = request.cache_salt;
  lease.request_id = request.request_id;
  lease.terminal = terminal;
  lease.prompt = request.tokens;
  lease.priority = request.priority;
  lease.prefix_len = prefix_len;
  lease.length = length;
  lease.expires_at_ms = now_ms + options_.lease_ttl_ms;
  lease.pages.reserve(total_pages);
  if (prefix_len > 0) {
    // Whole matched pages are shared: the page holding a logical page's last
    // position holds valid KV for all of its positions (page-consistent
    // tables), page ref-count sharing, background.md §1.4.
    for (int64_t k = 0; k < shared_pages; ++k) {
      const int32_t page = tree_slots[(k + 1) * page_size - 1] / page_size;
      allocator.Ref(page, /*protect=*/true);
      lease.pages.push_back(page);
    }
    if (partial > 0) {
      // Token-granular reuse of a partially matched page: copy its first
      // `partial` positions into a fresh page the lease can write.
      const int32_t src = tree_slots[prefix_len - 1] / page_size;
      const int32_t dst = allocator.Allocate(1)[0];
      result.copy_ops.push_back(CopyOp{src, dst, partial});
      lease.pages.push_back(dst);
    }
  }
  const std::vector<int32_t> fresh = allocator.Allocate(static_cast<int32_t>(
      total_pages - static_cast<int64_t>(lease.pages.size())));
  lease.pages.insert(lease.pages.end(), fresh.begin(), fresh.end());

  Lease* added = leases_.Add(std::move(lease));
  worker->lease_ids.insert(added->id);
  worker->lease_page_refs += total_pages;
  worker->prefix_query_tokens += num_tokens;
  worker->prefix_hit_tokens += prefix_len;

  result.lease_id = added->id;
  result.prefix_len = prefix_len;
  result.page_aligned_prefix_len = shared_pages * page_size;
  result.matched_tokens = match.matched_tokens;
  result.kv_indices = TableSlots(*added, page_size, 0, length);
  result.lease_ttl_ms = options_.lease_ttl_ms;
  return result;
}

// ---- Grow / Fork ----

absl::StatusOr<GrowResult> CacheStateImpl::Grow(const GrowRequest& request,
                                                int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(request.lease_id, now_ms);
  if (!found.ok()) return found.status();
  Lease* lease = *found;
  if (request.num_tokens < 1 || request.num_tokens > kMaxGrowTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", request.num_tokens, " outside [1, ",
                     kMaxGrowTokens, "]"));
  }
  WorkerEntry& worker = workers_.at(lease->worker_id);
  PageAllocator& allocator = *worker.allocator;
  const int32_t page_size = worker.info.page_size;
  const int64_t length = lease->length;
  const int64_t target =
      page_size > 1
          ? CeilDiv(length + request.num_tokens, page_size) * page_size
          : length + CeilDiv(request.num_tokens, options_.grow_chunk_tokens) *
                         options_.grow_chunk_tokens;
  const int32_t tail = static_cast<int32_t>(length % page_size);
  const bool copy_on_write =
      tail != 0 && allocator.ref_count(lease->pages.back()) > 1;
  const int64_t new_pages = CeilDiv(target, page_size) -
                            CeilDiv(length, page_size) +
                            (copy_on_write ? 1 : 0);
  // When this lease is the only protecting holder of its last page, every
  // other holder is an unlocked tree record: evicting them all lets the
  // lease write in place, so the copy's page is not strictly needed.
  const bool copy_avoidable =
      copy_on_write && allocator.protect_count(lease->pages.back()) == 1;
  const int64_t min_pages = new_pages - (copy_avoidable ? 1 : 0);
  const int64_t available_pages =
      allocator.num_free_pages() + allocator.num_evictable_pages();
  if (min_pages > available_pages) {
    return absl::ResourceExhaustedError(
        absl::StrCat("lease ", lease->id, " on worker ", lease->worker_id,
                     " needs ", min_pages * page_size, " slots but only ",
                     available_pages * page_size, " are free or evictable"));
  }
  GrowResult result;
  // With only min_pages obtainable this evicts every unlocked record,
  // including the other holders of the last page.
  result.evicted_tokens = EvictUntilFree(worker, new_pages);
  // Eviction may have dropped the other holders of the last page (unlocked
  // tree nodes): then the lease writes in place after all.
  int32_t fresh_last = 0;
  std::optional<CopyOp> op =
      copy_on_write
          ? allocator.CopyOnWrite(lease->pages.back(), tail, &fresh_last)
          : std::nullopt;
  if (op.has_value()) {
    result.copy_ops.push_back(*op);
    lease->pages.back() = fresh_last;
    result.first_remapped_position = length - tail;
    result.remapped_kv_indices =
        TableSlots(*lease, page_size, length - tail, length);
  }
  const std::vector<int32_t> fresh = allocator.Allocate(static_cast<int32_t>(
      CeilDiv(target, page_size) - static_cast<int64_t>(lease->pages.size())));
  lease->pages.insert(lease->pages.end(), fresh.begin(), fresh.end());
  worker.lease_page_refs += static_cast<int64_t>(fresh.size());
  lease->length = target;
  result.kv_indices = TableSlots(*lease, page_size, length, target);
  leases_.Renew(lease, now_ms + options_.lease_ttl_ms);
  return result;
}

absl::StatusOr<ForkResult> CacheStateImpl::Fork(const ForkRequest& request,
                                                int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(request.lease_id, now_ms);
  if (!found.ok()) return found.status();
  Lease* parent = *found;
  if (request.num_children < 1 || request.num_children > kMaxForkChildren) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_children ", request.num_children, " outside [1, ",
                     kMaxForkChildren, "]"));
  }
  if (request.num_tokens < 1 || request.num_tokens > parent->length) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", request.num_tokens, " outside [1, ",
                     parent->length, "] (the lease length)"));
  }
  WorkerEntry& worker = workers_.at(parent->worker_id);
  const int32_t page_size = worker.info.page_size;
  const int64_t shared_pages = CeilDiv(request.num_tokens, page_size);
  const int64_t limit = LeasePageRefLimit(worker.allocator->num_pages());
  if (worker.lease_page_refs + request.num_children * shared_pages > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("lease ", parent->id, ": forking ", request.num_children,
                     " x ", shared_pages,
                     " pages exceeds the worker's lease page references "
                     "limit ",
                     limit, " (", worker.lease_page_refs, " in use)"));
  }
  leases_.Renew(parent, now_ms + options_.lease_ttl_ms);
  const uint64_t parent_id = parent->id;
  ForkResult result;
  for (int32_t i = 0; i < request.num_children; ++i) {
    const Lease& p = *leases_.Find(parent_id);
    Lease child;
    child.worker_id = p.worker_id;
    child.model = p.model;
    child.cache_salt = p.cache_salt;
    child.request_id = p.request_id;
    child.prompt.assign(p.prompt.begin(),
                        p.prompt.begin() + std::min<int64_t>(request.num_tokens,
                                                             p.prompt.size()));
    // What the family already fixed at the shared positions past the prompt.
    const int64_t known = std::min(request.num_tokens, p.known_length());
    for (int64_t k = static_cast<int64_t>(child.prompt.size()); k < known;
         ++k) {
      child.shared_tokens.push_back(p.known_token(k));
    }
    child.priority = p.priority;
    child.prefix_len = std::min(p.prefix_len, request.num_tokens);
    child.pages.assign(p.pages.begin(), p.pages.begin() + shared_pages);
    child.length = request.num_tokens;
    child.expires_at_ms = now_ms + options_.lease_ttl_ms;
    for (int32_t page : child.pages) worker.allocator->Ref(page, true);
    // The child locks only its own prefix [0, prefix_len), which may end
    // inside the parent's terminal edge (split there, token granular).
    if (p.terminal != nullptr && child.prefix_len > 0) {
      child.terminal = p.terminal->tree()->LockPrefix(
          p.terminal, child.prefix_len, worker.bit);
    }
    Lease* added = leases_.Add(std::move(child));
    fork_links_.Link(parent_id, added->id, request.num_tokens);
    worker.lease_ids.insert(added->id);
    worker.lease_page_refs += shared_pages;
    result.children.push_back(ForkedLease{
        added->id, TableSlots(*added, page_size, 0, added->length)});
  }
  return result;
}

// ---- Commit / Release ----

absl::StatusOr<CommitResult> CacheStateImpl::Commit(
    const CommitRequest& request, int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(request.lease_id, now_ms);
  if (!found.ok()) return found.status();
  Lease* lease = *found;
  WorkerEntry& worker = workers_.at(lease->worker_id);
  const int64_t n = static_cast<int64_t>(request.tokens.size());
  if (n < static_cast<int64_t>(lease->prompt.size()) || n > lease->length) {
    return absl::InvalidArgumentError(
        absl::StrCat("commit of ", n, " tokens on lease ", lease->id,
                     ": must be in [", lease->prompt.size(), " (prompt), ",
                     lease->length, " (lease length)]"));
  }
  if (absl::Status s = CheckCommitAgrees(*lease, request.tokens); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateTokens(request.tokens, worker.info.vocab_size);
      !s.ok()) {
    return s;
  }
  const int bit = worker.bit;
  const int32_t page_size = worker.info.page_size;
  PageAllocator& allocator = *worker.allocator;
  RadixTree* tree = GetOrCreateTree(lease->model, lease->cache_salt);
  std::vector<int32_t> slots(n);
  for (int64_t k = 0; k * page_size < n; ++k) {
    const int32_t base = lease->pages[k] * page_size;
    const int64_t end = std::min<int64_t>(n, (k + 1) * page_size);
    for (int64_t p = k * page_size; p < end; ++p) {
      slots[p] = base + static_cast<int32_t>(p - k * page_size);
    }
  }
  const InsertResult inserted =
      tree->Insert(request.tokens, slots, bit, now_ms, lease->priority);
  ShareCommittedTokens(lease->id, request.tokens);
  CommitResult result;
  result.inserted_tokens = inserted.inserted_tokens;
  int64_t freed_pages = 0;
  if (!request.keep_lease) {
    freed_pages = EndLease(lease);
  } else {
    // Lock exactly the committed positions [0, n): Insert's terminal may
    // be an edge that extends past n (tokens already resident inside it).
    RadixNode* locked = tree->LockPrefix(inserted.terminal, n, bit);
    if (lease->terminal != nullptr) {
      lease->terminal->tree()->UnlockPath(lease->terminal, bit);
    }
    lease->terminal = locked;
    // Remap fully duplicated pages to the tree's pages and free the lease's
    // copies (positions [0, resident_before) were already cached).
    const int64_t dup_pages = inserted.resident_before / page_size;
    if (dup_pages > 0) {
      const PathMatch path = tree->MatchWorker(request.tokens, bit);
      const std::vector<int32_t> tree_slots =
          RadixTree::PathSlots(path, bit, dup_pages * page_size);
      for (int64_t k = 0; k < dup_pages; ++k) {
        const int32_t page = tree_slots[(k + 1) * page_size - 1] / page_size;
        if (page == lease->pages[k]) continue;
        allocator.Ref(page, /*protect=*/true);
        if (allocator.Unref(lease->pages[k], /*protect=*/true)) ++freed_pages;
        lease->pages[k] = page;
      }
    }
    // Known tokens past the commit stay known.
    std::vector<int32_t> still_known;
    for (int64_t p = n; p < lease->known_length(); ++p) {
      still_known.push_back(lease->known_token(p));
    }
    lease->prompt = request.tokens;
    lease->shared_tokens = std::move(still_known);
    lease->prefix_len = n;
    leases_.Renew(lease, now_ms + options_.lease_ttl_ms);
    result.kv_indices = TableSlots(*lease, page_size, 0, lease->length);
  }
  result.freed_slots = freed_pages * page_size;
  return result;
}

absl::StatusOr<ReleaseResult> CacheStateImpl::Release(uint64_t lease_id,
                                                      int64_t now_ms) {
  absl::StatusOr<Lease*> found = LiveLease(lease_id, now_ms);
  if (!found.ok()) return found.status();
  const int32_t page_size = workers_.at((*found)->worker_id).info.page_size;
  ReleaseResult result;
  result.freed_slots = EndLease(*found) * page_size;
  return result;
}

// ---- Evict / Flush / Stats / expiry ----

absl::StatusOr<EvictResult> CacheStateImpl::Evict(std::string_view worker_id,
                                                  int64_t num_tokens) {
  WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", std::string(worker_id)));
  }
  if (num_tokens < 1 || num_tokens > worker->info.capacity_slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", num_tokens, " outside [1, ",
                     worker->info.capacity_slots, "]"));
  }
  EvictResult result;
  while (result.evicted_tokens < num_tokens &&
         EvictOne(*worker, &result.evicted_tokens)) {
  }
  return result;
}

absl::StatusOr<FlushResult> CacheStateImpl::Flush(std::string_view worker_id) {
  FlushResult result;
  if (worker_id.empty()) {
    for (auto& [id, worker] : workers_) {
      while (EvictOne(worker, &result.evicted_tokens)) {
      }
    }
    return result;
  }
  WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", std::string(worker_id)));
  }
  while (EvictOne(*worker, &result.evicted_tokens)) {
  }
  return result;
}

absl::StatusOr<StatsResult> CacheStateImpl::Stats(std::string_view worker_id,
                                                  int64_t now_ms) const {
  if (!worker_id.empty() && FindWorker(worker_id) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", std::string(worker_id)));
  }
  StatsResult result;
  for (const auto& [id, worker] : workers_) {
    if (!worker_id.empty() && id != worker_id) continue;
    const ModelEntry& model = models_.at(worker.info.model);
    WorkerStats s;
    s.worker_id = id;
    s.address = worker.info.address;
    s.metrics_address = worker.info.metrics_address;
    s.epoch = worker.info.epoch;
    s.model = worker.info.model;
    s.page_size = worker.info.page_size;
    s.vocab_size = worker.info.vocab_size;
    s.capacity_slots = worker.allocator->capacity_slots();
    s.free_slots = worker.allocator->free_slots();
    s.evictable_slots = worker.allocator->evictable_slots();
    s.protected_slots = worker.allocator->protected_slots();
    s.cached_tokens = (*model.contexts)[worker.bit].resident_tokens;
    s.active_leases = static_cast<int32_t>(worker.lease_ids.size());
    s.load = worker.load;
    s.heartbeat_age_ms =
        std::max<int64_t>(0, now_ms - worker.last_heartbeat_ms);
    s.prefix_query_tokens = worker.prefix_query_tokens;
    s.prefix_hit_tokens = worker.prefix_hit_tokens;
    s.evicted_tokens = worker.evicted_tokens;
    s.expired_leases = worker.expired_leases;
    s.unconfirmed = !worker.confirmed;
    result.workers.push_back(std::move(s));
  }
  result.active_leases = static_cast<int64_t>(leases_.size());
  result.expired_leases_total = expired_leases_total_;
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      ++result.trees;
      result.tree_nodes += tree->num_nodes();
      result.tree_metadata_bytes += tree->MetadataBytes();
      result.tree_tokens += tree->num_tokens();
    }
    for (const WorkerContext& ctx : *model.contexts) {
      result.resident_tokens += ctx.resident_tokens;
    }
  }
  return result;
}

ExpireResult CacheStateImpl::ExpireLeases(int64_t now_ms) {
  ExpireResult result;
  for (uint64_t id : leases_.ExpiredAt(now_ms)) {
    Lease* lease = leases_.Find(id);
    WorkerEntry& worker = workers_.at(lease->worker_id);
    result.expired.push_back(ExpiredLease{id, lease->worker_id});
    ++worker.expired_leases;
    ++expired_leases_total_;
    EndLease(lease);
  }
  return result;
}

DropResult CacheStateImpl::DropDeadWorkers(int64_t now_ms) {
  DropResult result;
  std::vector<std::string> dead;
  for (const auto& [id, worker] : workers_) {
    if (now_ms - worker.last_heartbeat_ms > options_.heartbeat_timeout_ms) {
      dead.push_back(id);
    }
  }
  for (const std::string& id : dead) {
    result.released_leases += RemoveWorker(id);
    result.dropped_worker_ids.push_back(id);
  }
  return result;
}

void CacheStateImpl::CreditServicePause(int64_t paused_ms, int64_t now_ms) {
  if (paused_ms <= 0) return;
  for (auto& [id, worker] : workers_) {
    worker.last_heartbeat_ms =
        std::max(worker.last_heartbeat_ms,
                 std::min(now_ms, worker.last_heartbeat_ms + paused_ms));
  }
  std::vector<Lease*> leases;
  leases.reserve(leases_.size());
  for (const auto& [id, lease] : leases_.leases()) {
    leases.push_back(leases_.Find(id));
  }
  for (Lease* lease : leases) {
    leases_.Renew(lease, lease->expires_at_ms + paused_ms);
  }
}

void CacheStateImpl::MarkWorkersUnconfirmed() {
  for (auto& [id, worker] : workers_) worker.confirmed = false;
}

// ---- dump, snapshot, invariants ----

std::string CacheStateImpl::CanonicalDump() const {
  std::string out =
      absl::StrCat("radixkv.cache_state v1\nnext_lease_id=", leases_.next_id(),
                   " next_node_id=", next_node_id_,
                   " expired_leases_total=", expired_leases_total_, "\n");
  for (const auto& [id, w] : workers_) {
    const PageAllocator& a = *w.allocator;
    absl::StrAppend(
        &out, "worker ", Quote(id), " epoch=", w.info.epoch,
        " model=", Quote(w.info.model), " page_size=", w.info.page_size,
        " capacity_slots=", w.info.capacity_slots,
        " vocab_size=", w.info.vocab_size, " address=", Quote(w.info.address),
        " metrics_address=", Quote(w.info.metrics_address), " bit=", w.bit,
        " last_heartbeat_ms=", w.last_heartbeat_ms, "\n");
    absl::StrAppend(&out, "  load=", w.load.running_requests, ",",
                    w.load.waiting_requests, ",", w.load.outstanding_tokens,
                    ",", w.load.available_slots,
                    " prefix_query_tokens=", w.prefix_query_tokens,
                    " prefix_hit_tokens=", w.prefix_hit_tokens,
                    " evicted_tokens=", w.evicted_tokens,
                    " expired_leases=", w.expired_leases, "\n");
    absl::StrAppend(&out, "  pages free=", a.num_free_pages(),
                    " evictable=", a.num_evictable_pages(),
                    " protected=", a.num_protected_pages(), " free_list=[",
                    Runs(a.free_list()), "]\n  refs=[");
    bool first = true;
    for (int32_t p = 0; p < a.num_pages(); ++p) {
      if (a.ref_count(p) == 0) continue;
      absl::StrAppend(&out, first ? "" : ",", p, ":", a.ref_count(p), "/",
                      a.protect_count(p));
      first = false;
    }
    out += "]\n";
  }
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      absl::StrAppend(&out, "tree model=", Quote(name), " salt=", Quote(salt),
                      " nodes=", tree->num_nodes(), "\n");
      tree->ForEachPreorder([&](const RadixNode& node) {
        if (node.parent() == nullptr) return;
        absl::StrAppend(
            &out, "  node id=", node.id(), " parent=", node.parent()->id(),
            " start=", node.start(), " tokens=[", Runs(node.tokens()), "]\n");
        for (const Residency& r : node.residencies()) {
          absl::StrAppend(
              &out, "    res worker=", Quote(model.bit_owner[r.bit]),
              " lock_ref=", r.lock_ref,
              " resident_children=", r.resident_children,
              " last_access_ms=", r.stats.last_access_ms,
              " hits=", r.stats.hit_count, " priority=", r.stats.priority,
              " slots=[", Runs(r.slots), "]\n");
        }
      });
    }
  }
  for (const auto& [id, l] : leases_.leases()) {
    absl::StrAppend(&out, "lease id=", id, " worker=", Quote(l.worker_id),
                    " model=", Quote(l.model), " salt=", Quote(l.cache_salt),
                    " request=", Quote(l.request_id),
                    " terminal=", l.terminal == nullptr ? 0 : l.terminal->id(),
                    " priority=", l.priority, " prefix_len=", l.prefix_len,
                    " length=", l.length, " expires_at_ms=", l.expires_at_ms,
                    "\n  prompt=[", Runs(l.prompt), "] pages=[", Runs(l.pages),
                    "]\n");
    if (!l.shared_tokens.empty()) {
      absl::StrAppend(&out, "  shared_tokens=[", Runs(l.shared_tokens), "]\n");
    }
  }
  for (const ForkLink& link : fork_links_.Links()) {
    absl::StrAppend(&out, "fork_link ", link.a, " ", link.b,
                    " shared=", link.shared, "\n");
  }
  return out;
}

std::string CacheStateImpl::Serialize() const {
  Writer w;
  // ~3 bytes per random token id + ~1 per (delta-encoded) slot.
  int64_t estimate = 4096;
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      estimate += 3 * tree->num_tokens() + 16 * tree->num_nodes();
    }
    for (const WorkerContext& ctx : *model.contexts) {
      estimate += ctx.resident_tokens;
    }
  }
  w.Reserve(static_cast<size_t>(estimate));
  w.Str(kSnapshotMagic);
  w.U64(leases_.next_id());
  w.U64(next_node_id_);
  w.I64(expired_leases_total_);
  w.U64(workers_.size());
  for (const auto& [id, e] : workers_) {
    w.Str(id);
    w.Str(e.info.address);
    w.Str(e.info.metrics_address);
    w.I64(e.info.capacity_slots);
    w.I64(e.info.page_size);
    w.Str(e.info.model);
    w.I64(e.info.epoch);
    w.I64(e.info.vocab_size);
    w.I64(e.load.running_requests);
    w.I64(e.load.waiting_requests);
    w.I64(e.load.outstanding_tokens);
    w.I64(e.load.available_slots);
    w.I64(e.last_heartbeat_ms);
    w.I64(e.bit);
    w.I64(e.prefix_query_tokens);
    w.I64(e.prefix_hit_tokens);
    w.I64(e.evicted_tokens);
    w.I64(e.expired_leases);
    w.I32s(e.allocator->free_list());
  }
  size_t num_trees = 0;
  for (const auto& [name, model] : models_) num_trees += model.trees.size();
  w.U64(num_trees);
  for (const auto& [name, model] : models_) {
    for (const auto& [salt, tree] : model.trees) {
      w.Str(name);
      w.Str(salt);
      w.U64(tree->num_nodes());
      // Preorder; each node names its parent by preorder index (0 = root).
      absl::flat_hash_map<const RadixNode*, uint64_t> index;
      uint64_t next = 0;
      tree->ForEachPreorder([&](const RadixNode& node) {
        index[&node] = next++;
        if (node.parent() == nullptr) return;
        w.U64(index.at(node.parent()));
        w.U64(node.id());
        w.I32s(node.tokens());
        w.U64(node.residencies().size());
        for (const Residency& r : node.residencies()) {
          w.I64(r.bit);
          w.I64(r.stats.last_access_ms);
          w.I64(r.stats.hit_count);
          w.I64(r.stats.priority);
          w.I32s(r.slots);
        }
      });
    }
  }
  w.U64(leases_.size());
  for (const auto& [id, l] : leases_.leases()) {
    w.U64(id);
    w.Str(l.worker_id);
    w.Str(l.model);
    w.Str(l.cache_salt);
    w.Str(l.request_id);
    w.U64(l.terminal == nullptr ? 0 : l.terminal->id());
    w.I32s(l.prompt);
    w.I64(l.priority);
    w.I64(l.prefix_len);
    w.I32s(l.pages);
    w.I64(l.length);
    w.I64(l.expires_at_ms);
    w.I32s(l.shared_tokens);
  }
  const std::vector<ForkLink> links = fork_links_.Links();
  w.U64(links.size());
  for (const ForkLink& link : links) {
    w.U64(link.a);
    w.U64(link.b);
    w.I64(link.shared);
  }
  return w.Take();
}

absl::StatusOr<std::unique_ptr<CacheStateImpl>> CacheStateImpl::Deserialize(
    std::string_view snapshot, const CacheOptions& options) {
  auto state = std::make_unique<CacheStateImpl>(options);
  Reader r(snapshot);
  auto corrupt = [&](std::string_view what) {
    return absl::DataLossError(
        absl::StrCat("cache_state snapshot: ", std::string(what)));
  };
  const std::string magic = r.Str();
  if (!r.ok() || (magic != kSnapshotMagic && magic != kSnapshotMagicV1)) {
    return corrupt("bad magic");
  }
  const bool v1 = magic == kSnapshotMagicV1;
  const uint64_t next_lease_id = r.U64();
  state->next_node_id_ = r.U64();
  state->expired_leases_total_ = r.I64();
  const uint64_t num_workers = r.U64();
  for (uint64_t i = 0; i < num_workers && r.ok(); ++i) {
    RegisterWorkerRequest info;
    info.worker_id = r.Str();
    info.address = r.Str();
    info.metrics_address = r.Str();
    info.capacity_slots = r.I64();
    info.page_size = static_cast<int32_t>(r.I64());
    info.model = r.Str();
    info.epoch = r.I64();
    info.vocab_size = static_cast<int32_t>(r.I64());
    WorkerLoad load;
    load.running_requests = static_cast<int32_t>(r.I64());
    load.waiting_requests = static_cast<int32_t>(r.I64());
    load.outstanding_tokens = r.I64();
    load.available_slots = r.I64();
    const int64_t last_heartbeat_ms = r.I64();
    const int64_t bit = r.I64();
    const int64_t counters[4] = {r.I64(), r.I64(), r.I64(), r.I64()};
    std::vector<int32_t> free_list = r.I32s();
    if (!r.ok()) break;
    if (info.worker_id.empty() || info.model.empty() ||
        state->workers_.contains(info.worker_id) || bit < 0 ||
        bit >= kMaxWorkersPerModel || info.capacity_slots > kMaxCapacitySlots) {
      return corrupt("bad worker record");
    }
    absl::StatusOr<PageAllocator> allocator = PageAllocator::CreateWithFreeList(
        info.capacity_slots, info.page_size, std::move(free_list));
    if (!allocator.ok())
      return corrupt(std::string(allocator.status().message()));
    ModelEntry& model = state->models_[info.model];
    if ((model.mask >> bit) & 1) return corrupt("worker bit used twice");
    WorkerEntry& e = state->workers_[info.worker_id];
    e.info = info;
    e.load = load;
    e.last_heartbeat_ms = last_heartbeat_ms;
    e.bit = static_cast<int>(bit);
    e.prefix_query_tokens = counters[0];
    e.prefix_hit_tokens = counters[1];
    e.evicted_tokens = counters[2];
    e.expired_leases = counters[3];
    e.allocator = std::make_unique<PageAllocator>(*std::move(allocator));
    e.queue = std::make_unique<EvictionQueue>();
    model.mask |= uint64_t{1} << bit;
    model.bit_owner[bit] = info.worker_id;
    (*model.contexts)[bit] = WorkerContext{e.allocator.get(), e.queue.get(), 0};
  }
  // (tree key, node id) -> node, for lease terminals.
  absl::flat_hash_map<uint64_t, RadixNode*> nodes_by_id;
  const uint64_t num_trees = r.U64();
  for (uint64_t t = 0; t < num_trees && r.ok(); ++t) {
    const std::string model_name = r.Str();
    const std::string salt = r.Str();
    const uint64_t num_nodes = r.U64();
    auto m = state->models_.find(model_name);
    if (!r.ok() || m == state->models_.end() ||
        m->second.trees.contains(salt)) {
      return corrupt("tree of an unknown model or repeated");
    }
    RadixTree* tree = state->GetOrCreateTree(model_name, salt);
    const WorkerContexts& contexts = *m->second.contexts;
    std::vector<RadixNode*> order = {tree->root()};
    for (uint64_t i = 0; i < num_nodes && r.ok(); ++i) {
      const uint64_t parent_index = r.U64();
      const uint64_t id = r.U64();
      std::vector<int32_t> tokens = r.I32s();
      const uint64_t num_res = r.U64();
      if (!r.ok() || parent_index >= order.size() || tokens.empty() ||
          id == 0 || id >= state->next_node_id_ || nodes_by_id.contains(id) ||
          order[parent_index]->children().contains(tokens[0])) {
        return corrupt("bad tree node");
      }
      RadixNode* parent = order[parent_index];
      RadixNode* node = tree->RestoreChild(parent, id, std::move(tokens));
      nodes_by_id[id] = node;
      order.push_back(node);
      for (uint64_t j = 0; j < num_res && r.ok(); ++j) {
        Residency res;
        const int64_t bit = r.I64();
        res.stats.last_access_ms = r.I64();
        res.stats.hit_count = r.I64();
        res.stats.priority = static_cast<int32_t>(r.I64());
        res.slots = r.I32s();
        if (!r.ok() || bit < 0 || bit >= kMaxWorkersPerModel ||
            contexts[bit].allocator == nullptr || node->resident(bit) ||
            (parent != tree->root() && !parent->resident(bit)) ||
            res.slots.size() != node->tokens().size()) {
          return corrupt("bad residency record");
        }
        const PageAllocator& a = *contexts[bit].allocator;
        for (size_t k = 0; k < res.slots.size(); ++k) {
          if (res.slots[k] < 0 || res.slots[k] >= a.capacity_slots() ||
              res.slots[k] % a.page_size() !=
                  (node->start() + static_cast<int64_t>(k)) % a.page_size()) {
            return corrupt("residency slot out of range or not page-aligned");
          }
        }
        res.bit = static_cast<int32_t>(bit);
        tree->RestoreResidency(node, std::move(res));
      }
      if (node->resident_mask() == 0) return corrupt("node without residency");
    }
    if (!r.ok()) break;
    tree->RebuildDerived();
  }
  const uint64_t num_leases = r.U64();
  for (uint64_t i = 0; i < num_leases && r.ok(); ++i) {
    Lease l;
    l.id = r.U64();
    l.worker_id = r.Str();
    l.model = r.Str();
    l.cache_salt = r.Str();
    l.request_id = r.Str();
    const uint64_t terminal_id = r.U64();
    l.prompt = r.I32s();
    l.priority = static_cast<int32_t>(r.I64());
    l.prefix_len = r.I64();
    l.pages = r.I32s();
    l.length = r.I64();
    l.expires_at_ms = r.I64();
    if (!v1) l.shared_tokens = r.I32s();
    if (!r.ok()) break;
    WorkerEntry* worker = state->FindWorker(l.worker_id);
    if (worker == nullptr || worker->info.model != l.model ||
        l.length < static_cast<int64_t>(l.prompt.size()) ||
        static_cast<int64_t>(l.pages.size()) !=
            CeilDiv(l.length, worker->info.page_size) ||
        l.known_length() > l.length) {
      return corrupt("bad lease record");
    }
    for (int32_t page : l.pages) {
      if (page < 0 || page >= worker->allocator->num_pages()) {
        return corrupt("lease page out of range");
      }
    }
    if (terminal_id != 0) {
      auto it = nodes_by_id.find(terminal_id);
      if (it == nodes_by_id.end() ||
          it->second->tree() != state->FindTree(l.model, l.cache_salt)) {
        return corrupt("lease terminal node unknown");
      }
      for (RadixNode* n = it->second; n->parent() != nullptr; n = n->parent()) {
        if (!n->resident(worker->bit)) {
          return corrupt("lease path not resident on its worker");
        }
      }
      l.terminal = it->second;
    }
    Lease* added = state->leases_.AddWithId(std::move(l));
    if (added == nullptr) return corrupt("lease id repeated");
    if (added->terminal != nullptr) {
      added->terminal->tree()->LockPath(added->terminal, worker->bit);
    }
    for (int32_t page : added->pages) worker->allocator->Ref(page, true);
    worker->lease_ids.insert(added->id);
    worker->lease_page_refs += static_cast<int64_t>(added->pages.size());
  }
  std::vector<ForkLink> links;
  const uint64_t num_links = v1 ? 0 : r.U64();
  for (uint64_t i = 0; i < num_links && r.ok(); ++i) {
    links.push_back(ForkLink{r.U64(), r.U64(), r.I64()});
  }
  if (absl::Status s = state->RestoreForkLinks(links); r.ok() && !s.ok()) {
    return corrupt(std::string(s.message()));
  }
  if (!r.ok() || !r.done()) return corrupt("truncated or trailing bytes");
  if (next_lease_id < state->leases_.next_id()) {
    return corrupt("next_lease_id below a lease id");
  }
  state->leases_.set_next_id(next_lease_id);
  // Every page is either on the free list or referenced, never both.
  for (const auto& [id, worker] : state->workers_) {
    const PageAllocator& a = *worker.allocator;
    std::vector<bool> is_free(a.num_pages(), false);
    for (int32_t page : a.free_list()) is_free[page] = true;
    for (int32_t p = 0; p < a.num_pages(); ++p) {
      if (is_free[p] == (a.ref_count(p) > 0)) {
        return corrupt(absl::StrCat(
            "worker ", id, " page ", p,
            is_free[p] ? " free but referenced" : " leaked (no holder)"));
      }
    }
  }
  if (absl::Status s = state->CheckInvariants(); !s.ok()) {
    return corrupt(std::string(s.message()));
  }
  return state;
}

namespace {

// Union-find root of x over `parent` (absent = its own root).
uint64_t ForestRoot(absl::flat_hash_map<uint64_t, uint64_t>& parent,
                    uint64_t x) {
  while (true) {
    auto it = parent.find(x);
    if (it == parent.end() || it->second == x) return x;
    x = it->second;
  }
}

}  // namespace

absl::Status CacheStateImpl::RestoreForkLinks(
    const std::vector<ForkLink>& links) {
  absl::flat_hash_map<uint64_t, uint64_t> parent;
  for (const ForkLink& link : links) {
    const Lease* a = leases_.Find(link.a);
    const Lease* b = leases_.Find(link.b);
    if (a == nullptr || b == nullptr || link.a >= link.b ||
        a->worker_id != b->worker_id || link.shared < 1 ||
        link.shared > std::min(a->length, b->length)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad fork link ", link.a, "-", link.b));
    }
    const uint64_t ra = ForestRoot(parent, link.a);
    const uint64_t rb = ForestRoot(parent, link.b);
    if (ra == rb) {
      return absl::InvalidArgumentError(
          absl::StrCat("fork link ", link.a, "-", link.b, " closes a cycle"));
    }
    parent[ra] = rb;
    fork_links_.Link(link.a, link.b, link.shared);
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckForkLinks() const {
  absl::flat_hash_map<uint64_t, uint64_t> parent;
  for (const ForkLink& link : fork_links_.Links()) {
    const std::string name = absl::StrCat("fork link ", link.a, "-", link.b);
    const Lease* a = leases_.Find(link.a);
    const Lease* b = leases_.Find(link.b);
    if (a == nullptr || b == nullptr) {
      return absl::InternalError(name + ": names an ended lease");
    }
    if (a->worker_id != b->worker_id || link.shared < 1 ||
        link.shared > std::min(a->length, b->length)) {
      return absl::InternalError(
          name + ": joins two workers or is longer than a table");
    }
    const uint64_t ra = ForestRoot(parent, link.a);
    const uint64_t rb = ForestRoot(parent, link.b);
    if (ra == rb) return absl::InternalError(name + ": closes a cycle");
    parent[ra] = rb;
    // Both ends know the same tokens of the shared positions (a Commit told
    // every lease sharing them).
    const int64_t known_a = std::min(link.shared, a->known_length());
    const int64_t known_b = std::min(link.shared, b->known_length());
    if (known_a != known_b) {
      return absl::InternalError(
          absl::StrCat(name, ": the leases know ", known_a, " and ", known_b,
                       " of the ", link.shared, " shared tokens"));
    }
    for (int64_t p = 0; p < known_a; ++p) {
      if (a->known_token(p) != b->known_token(p)) {
        return absl::InternalError(absl::StrCat(
            name, ": the leases disagree on the token of position ", p));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CacheStateImpl::CheckSlotsHeldOnce(const WorkerEntry& worker,
                                                const ModelEntry& model) const {
  // One bit per slot: the record holding a slot is the only one that may
  // (two records on one slot would give one KV two token prefixes).
  std::vector<bool> held(worker.allocator->capacity_slots(), false);
  int64_t twice = -1;
  uint64_t second_node = 0;
  for (const auto& [salt, tree] : model.trees) {
    tree->ForEachPreorder([&](const RadixNode& node) {
      const Residency* r = node.residency(worker.bit);
      if (r == nullptr || twice >= 0) return;
      for (int32_t slot : r->slots) {
        if (held[slot]) {
          twice = slot;
          second_node = node.id();
          return;
        }
        held[slot] = true;
      }
    });
  }
  if (twice < 0) return absl::OkStatus();
  uint64_t first_node = 0;
  for (const auto& [salt, tree] : model.trees) {
    tree->ForEachPreorder([&](const RadixNode& node) {
      const Residency* r = node.residency(worker.bit);
      if (r == nullptr || first_node != 0) return;
      if (std::find(r->slots.begin(), r->slots.end(), twice) !=
          r->slots.end()) {
        first_node = node.id();
      }
    });
  }
  return absl::InternalError(
      absl::StrCat("worker ", worker.info.worker_id, ": slot ", twice,
                   " is held by two tree records (nodes ", first_node, " and ",
                   second_node, ")"));
}

absl::Status CacheStateImpl::CheckInvariants() const {
  // Expected lock_ref per (node, bit), from the leases.
  absl::flat_hash_map<std::pair<uint64_t, int>, int32_t> lock_refs;
  absl::flat_hash_map<std::string, std::set<uint64_t>> leases_of;
  for (const auto& [id, l] : leases_.leases()) {
    if (id == 0 || id >= leases_.next_id()) {
      return absl::InternalError(absl::StrCat("lease id ", id, " >= next id"));
    }
    const WorkerEntry* worker = FindWorker(l.worker_id);
    if (worker == nullptr) {
      return absl::InternalError(absl::StrCat("lease ", id, ": no worker"));
    }
    leases_of[l.worker_id].insert(id);
    if (static_cast<int64_t>(l.pages.size()) !=
            CeilDiv(l.length, worker->info.page_size) ||
        static_cast<int64_t>(l.prompt.size()) > l.length ||
        l.prefix_len > l.length) {
      return absl::InternalError(absl::StrCat("lease ", id, ": bad table"));
    }
    if (l.terminal != nullptr) {
      if (l.terminal->tree() != FindTree(l.model, l.cache_salt)) {
        return absl::InternalError(absl::StrCat("lease ", id, ": wrong tree"));
      }
      if (l.terminal->end() < l.prefix_len) {
        return absl::InternalError(
            absl::StrCat("lease ", id, ": locked path shorter than prefix"));
      }
      for (const RadixNode* n = l.terminal; n->parent() != nullptr;
           n = n->parent()) {
        if (!n->resident(worker->bit)) {
          return absl::InternalError(
              absl::StrCat("lease ", id, ": locked path not resident"));
        }
        ++lock_refs[{n->id(), worker->bit}];
        // The locked path spells the lease's resident prefix. Acquire,
        // Fork and Commit lock exactly [0, prefix_len) (the terminal edge
        // ends there); leases restored from a snapshot of an older version
        // may lock an edge running past it.
        for (size_t k = 0; k < n->tokens().size(); ++k) {
          const int64_t p = n->start() + static_cast<int64_t>(k);
          if (p < l.prefix_len && p < static_cast<int64_t>(l.prompt.size()) &&
              l.prompt[p] != n->tokens()[k]) {
            return absl::InternalError(
                absl::StrCat("lease ", id, ": locked path != prompt"));
          }
        }
      }
    }
  }
  for (const auto& [name, model] : models_) {
    for (int bit = 0; bit < kMaxWorkersPerModel; ++bit) {
      const bool used = (model.mask >> bit) & 1;
      if (used != ((*model.contexts)[bit].allocator != nullptr)) {
        return absl::InternalError("model mask != worker contexts");
      }
      if (used) {
        auto w = workers_.find(model.bit_owner[bit]);
        if (w == workers_.end() || w->second.bit != bit ||
            w->second.info.model != name) {
          return absl::InternalError("model bit owner mismatch");
        }
      }
    }
    for (const auto& [salt, tree] : model.trees) {
      if (tree->empty()) {
        return absl::InternalError("empty tree kept: " + name + "/" + salt);
      }
      if (absl::Status s = tree->CheckInvariants(model.mask, lock_refs);
          !s.ok()) {
        return s;
      }
    }
  }
  for (const auto& [id, worker] : workers_) {
    auto m = models_.find(worker.info.model);
    if (m == models_.end() || !((m->second.mask >> worker.bit) & 1)) {
      return absl::InternalError("worker " + id + " not in its model");
    }
    if (worker.lease_ids != leases_of[id]) {
      return absl::InternalError("worker " + id + ": lease set mismatch");
    }
    int64_t lease_page_refs = 0;
    for (uint64_t lease_id : worker.lease_ids) {
      lease_page_refs +=
          static_cast<int64_t>(leases_.Find(lease_id)->pages.size());
    }
    if (lease_page_refs != worker.lease_page_refs) {
      return absl::InternalError("worker " + id + ": lease_page_refs mismatch");
    }
    const PageAllocator& a = *worker.allocator;
    std::vector<int32_t> refs(a.num_pages(), 0);
    std::vector<int32_t> protects(a.num_pages(), 0);
    int64_t resident_tokens = 0;
    size_t queued = 0;
    for (const auto& [salt, tree] : m->second.trees) {
      tree->ForEachPreorder([&](const RadixNode& node) {
        const Residency* r = node.residency(worker.bit);
        if (r == nullptr) return;
        resident_tokens += static_cast<int64_t>(r->slots.size());
        if (r->lock_ref == 0 && r->resident_children == 0) ++queued;
        int32_t last = -1;
        for (int32_t slot : r->slots) {
          const int32_t page = slot / a.page_size();
          if (page == last) continue;
          last = page;
          ++refs[page];
          if (r->lock_ref > 0) ++protects[page];
        }
      });
    }
    for (uint64_t lease_id : worker.lease_ids) {
      for (int32_t page : leases_.Find(lease_id)->pages) {
        ++refs[page];
        ++protects[page];
      }
    }
    if (absl::Status s = CheckSlotsHeldOnce(worker, m->second); !s.ok()) {
      return s;
    }
    if (queued != worker.queue->size()) {
      return absl::InternalError(
          absl::StrCat("worker ", id, ": eviction queue holds ",
                       worker.queue->size(), " entries, expected ", queued));
    }
    if (resident_tokens != (*m->second.contexts)[worker.bit].resident_tokens) {
      return absl::InternalError("worker " + id + ": resident_tokens mismatch");
    }
    std::vector<bool> is_free(a.num_pages(), false);
    for (int32_t page : a.free_list()) {
      if (is_free[page]) {
        return absl::InternalError(
            absl::StrCat("worker ", id, ": page ", page, " freed twice"));
      }
      is_free[page] = true;
    }
    int32_t num_protected = 0;
    for (int32_t p = 0; p < a.num_pages(); ++p) {
      if (refs[p] != a.ref_count(p) || protects[p] != a.protect_count(p)) {
        return absl::InternalError(
            absl::StrCat("worker ", id, ": page ", p, " ref/protect ",
                         a.ref_count(p), "/", a.protect_count(p),
                         " but holders give ", refs[p], "/", protects[p]));
      }
      if (is_free[p] != (refs[p] == 0)) {
        return absl::InternalError(absl::StrCat(
            "worker ", id, ": page ", p,
            is_free[p] ? " on the free list but held" : " leaked"));
      }
      if (protects[p] > 0) ++num_protected;
    }
    if (num_protected != a.num_protected_pages() ||
        a.free_slots() + a.evictable_slots() + a.protected_slots() !=
            worker.info.capacity_slots ||
        a.num_evictable_pages() < 0) {
      return absl::InternalError("worker " + id +
                                 ": free + evictable + protected != capacity");
    }
  }
  return CheckForkLinks();
}

absl::StatusOr<std::vector<std::vector<int32_t>>>
CacheStateImpl::ResidentSequences(std::string_view model_name,
                                  std::string_view cache_salt,
                                  std::string_view worker_id) const {
  const WorkerEntry* worker = FindWorker(worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", std::string(worker_id)));
  }
  std::vector<std::vector<int32_t>> out;
  if (worker->info.model != model_name) return out;
  const RadixTree* tree =
      FindTree(std::string(model_name), std::string(cache_salt));
  if (tree == nullptr) return out;
  const int bit = worker->bit;
  // Iterative DFS (paths can be deep): (node, length of its path prefix).
  std::vector<std::pair<const RadixNode*, size_t>> stack = {{tree->root(), 0}};
  std::vector<int32_t> prefix;
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    prefix.resize(depth);
    prefix.insert(prefix.end(), node->tokens().begin(), node->tokens().end());
    const Residency* r = node->residency(bit);
    if (r != nullptr && r->resident_children == 0) out.push_back(prefix);
    for (const auto& [key, child] : node->children()) {
      if (child->resident(bit)) stack.push_back({child.get(), prefix.size()});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------

CacheState::CacheState(CacheOptions options)
    : impl_(std::make_unique<CacheStateImpl>(options)) {}
CacheState::~CacheState() = default;
CacheState::CacheState(CacheState&&) noexcept = default;
CacheState& CacheState::operator=(CacheState&&) noexcept = default;

const CacheOptions& CacheState::options() const { return impl_->options(); }

absl::StatusOr<RegisterWorkerResult> CacheState::RegisterWorker(
    const RegisterWorkerRequest& request, int64_t now_ms) {
  return impl_->RegisterWorker(request, now_ms);
}
absl::Status CacheState::CheckVocabAgreesWithLiveWorkers(
    const RegisterWorkerRequest& request, int64_t now_ms) const {
  return impl_->CheckVocabAgreesWithLiveWorkers(request, now_ms);
}
absl::Status CacheState::CheckRegisterWithinBounds(
    const RegisterWorkerRequest& request) const {
  return impl_->CheckRegisterWithinBounds(request);
}
absl::Status CacheState::CheckCommitWithinBounds(const CommitRequest& request,
                                                 int64_t now_ms) const {
  return impl_->CheckCommitWithinBounds(request, now_ms);
}
absl::StatusOr<HeartbeatResult> CacheState::Heartbeat(
    const HeartbeatRequest& request, int64_t now_ms) {
  return impl_->Heartbeat(request, now_ms);
}
absl::StatusOr<DeregisterResult> CacheState::DeregisterWorker(
    std::string_view worker_id, int64_t epoch, int64_t /*now_ms*/) {
  return impl_->DeregisterWorker(worker_id, epoch);
}
absl::StatusOr<MatchResult> CacheState::Match(const MatchRequest& request,
                                              int64_t now_ms) const {
  return impl_->Match(request, now_ms);
}
absl::StatusOr<AcquireResult> CacheState::Acquire(const AcquireRequest& request,
                                                  int64_t now_ms) {
  return impl_->Acquire(request, now_ms);
}
absl::StatusOr<GrowResult> CacheState::Grow(const GrowRequest& request,
                                            int64_t now_ms) {
  return impl_->Grow(request, now_ms);
}
absl::StatusOr<ForkResult> CacheState::Fork(const ForkRequest& request,
                                            int64_t now_ms) {
  return impl_->Fork(request, now_ms);
}
absl::StatusOr<CommitResult> CacheState::Commit(const CommitRequest& request,
                                                int64_t now_ms) {
  return impl_->Commit(request, now_ms);
}
absl::StatusOr<ReleaseResult> CacheState::Release(uint64_t lease_id,
                                                  int64_t now_ms) {
  return impl_->Release(lease_id, now_ms);
}
absl::StatusOr<EvictResult> CacheState::Evict(std::string_view worker_id,
                                              int64_t num_tokens,
                                              int64_t /*now_ms*/) {
  return impl_->Evict(worker_id, num_tokens);
}
absl::StatusOr<FlushResult> CacheState::Flush(std::string_view worker_id,
                                              int64_t /*now_ms*/) {
  return impl_->Flush(worker_id);
}
absl::StatusOr<StatsResult> CacheState::Stats(std::string_view worker_id,
                                              int64_t now_ms) const {
  return impl_->Stats(worker_id, now_ms);
}
ExpireResult CacheState::ExpireLeases(int64_t now_ms) {
  return impl_->ExpireLeases(now_ms);
}
DropResult CacheState::DropDeadWorkers(int64_t now_ms) {
  return impl_->DropDeadWorkers(now_ms);
}
void CacheState::CreditServicePause(int64_t paused_ms, int64_t now_ms) {
  impl_->CreditServicePause(paused_ms, now_ms);
}
void CacheState::MarkWorkersUnconfirmed() { impl_->MarkWorkersUnconfirmed(); }
std::string CacheState::CanonicalDump() const { return impl_->CanonicalDump(); }
std::string CacheState::Serialize() const { return impl_->Serialize(); }
absl::Status CacheState::Restore(std::string_view snapshot) {
  absl::StatusOr<std::unique_ptr<CacheStateImpl>> restored =
      CacheStateImpl::Deserialize(snapshot, impl_->options());
  if (!restored.ok()) return restored.status();
  impl_ = *std::move(restored);
  return absl::OkStatus();
}
absl::Status CacheState::CheckInvariants() const {
  return impl_->CheckInvariants();
}
absl::StatusOr<std::vector<std::vector<int32_t>>> CacheState::ResidentSequences(
    std::string_view model, std::string_view cache_salt,
    std::string_view worker_id) const {
  return impl_->ResidentSequences(model, cache_salt, worker_id);
}

}  // namespace radixkv::cache_service

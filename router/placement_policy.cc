#include "router/placement_policy.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace radixkv::router {
namespace {

absl::Status CheckInput(const PlacementInput& input) {
  if (input.candidates.empty()) {
    return absl::InvalidArgumentError("no candidate worker");
  }
  return absl::OkStatus();
}

// Index of the least loaded candidate; ties go to the larger hit, then to the
// first in rotation order.
int LeastLoaded(const PlacementInput& input, absl::Span<const int64_t> hits,
                uint64_t rotation) {
  const size_t n = input.candidates.size();
  int best = -1;
  for (size_t j = 0; j < n; ++j) {
    const int i = static_cast<int>((j + rotation) % n);
    if (best < 0) {
      best = i;
      continue;
    }
    const WorkerCandidate& c = input.candidates[i];
    const WorkerCandidate& b = input.candidates[best];
    if (c.load_tokens < b.load_tokens ||
        (c.load_tokens == b.load_tokens && !hits.empty() &&
         hits[i] > hits[best]) ||
        (c.load_tokens == b.load_tokens &&
         (hits.empty() || hits[i] == hits[best]) &&
         c.in_flight_requests < b.in_flight_requests)) {
      best = i;
    }
  }
  return best;
}

class CacheAwarePolicy : public PlacementPolicy {
 public:
  explicit CacheAwarePolicy(const CacheAwareOptions& options)
      : options_(options) {}
  absl::string_view name() const override { return "cache_aware"; }
  absl::StatusOr<PlacementDecision> Choose(
      const PlacementInput& input) override {
    if (absl::Status s = CheckInput(input); !s.ok()) return s;
    std::vector<int64_t> hits;
    std::vector<int64_t> hot;
    hits.reserve(input.candidates.size());
    hot.reserve(input.candidates.size());
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const WorkerCandidate& c : input.candidates) {
      hits.push_back(std::max(c.matched_tokens, RecentHit(c.worker_id, c.epoch,
                                                          input.tokens, now)));
      hot.push_back(HotTokens(c.worker_id, c.epoch, now));
    }
    const uint64_t family = FamilyKey(input);
    int assigned = -1;
    if (auto f = family_home_.find(family); f != family_home_.end()) {
      for (size_t i = 0; i < input.candidates.size(); ++i) {
        if (input.candidates[i].worker_id == f->second.first &&
            input.candidates[i].epoch == f->second.second) {
          assigned = static_cast<int>(i);
        }
      }
    }
    const PlacementDecision d = ChooseByPrefixAndLoad(
        input, hits, options_, rotation_++, hot, assigned);
    if (d.memory_placed && assigned < 0 && options_.miss_affinity_tokens > 0) {
      // Remember where the family was homed (a spill past a loaded home
      // keeps the home; bounded: forget all at 64K families).
      if (family_home_.size() >= (1 << 16)) family_home_.clear();
      family_home_[family] = {input.candidates[d.index].worker_id,
                              input.candidates[d.index].epoch};
    }
    // The chosen worker will write the prompt beyond its hit and the output.
    const WorkerCandidate& chosen = input.candidates[d.index];
    Written& w = written_[chosen.worker_id];
    if (w.epoch != chosen.epoch) w = Written{chosen.epoch};
    const int64_t tokens = static_cast<int64_t>(input.tokens.size()) -
                           d.predicted_hit_tokens + input.max_new_tokens;
    w.writes.push_back({now, tokens});
    w.total += tokens;
    return d;
  }

  void OnDispatched(const std::string& worker_id, int64_t epoch,
                    absl::Span<const int32_t> tokens) override {
    absl::MutexLock lock(&mu_);
    Recent& r = recent_[worker_id];
    if (r.epoch != epoch) {
      r.epoch = epoch;
      r.prompts.clear();
    }
    r.prompts.push_front({std::vector<int32_t>(tokens.begin(), tokens.end()),
                          absl::InfiniteFuture()});
  }

  void OnFinished(const std::string& worker_id, int64_t epoch,
                  absl::Span<const int32_t> tokens) override {
    absl::MutexLock lock(&mu_);
    auto it = recent_.find(worker_id);
    if (it == recent_.end() || it->second.epoch != epoch) return;
    for (Prompt& p : it->second.prompts) {
      if (p.expires == absl::InfiniteFuture() &&
          p.tokens.size() == tokens.size() &&
          std::equal(p.tokens.begin(), p.tokens.end(), tokens.begin())) {
        p.expires = absl::Now() + options_.finished_affinity_grace;
        return;
      }
    }
  }

 private:
  struct Prompt {
    std::vector<int32_t> tokens;
    // InfiniteFuture while in flight; then the end of the grace period.
    absl::Time expires;
  };
  struct Recent {
    int64_t epoch = 0;
    std::list<Prompt> prompts;  // newest first
  };

  // Longest common prefix of `tokens` with a prompt in flight on the worker
  // or finished there within the grace period (at most kMaxScanned prompts
  // are compared; expired ones are dropped).
  int64_t RecentHit(const std::string& worker_id, int64_t epoch,
                    absl::Span<const int32_t> tokens, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    constexpr int kMaxScanned = 256;
    auto it = recent_.find(worker_id);
    if (it == recent_.end() || it->second.epoch != epoch) return 0;
    auto& prompts = it->second.prompts;
    int64_t best = 0;
    int scanned = 0;
    for (auto p = prompts.begin(); p != prompts.end();) {
      if (p->expires < now) {
        p = prompts.erase(p);
        continue;
      }
      if (++scanned <= kMaxScanned) {
        const size_t n = std::min(p->tokens.size(), tokens.size());
        size_t k = 0;
        while (k < n && p->tokens[k] == tokens[k]) ++k;
        best = std::max<int64_t>(best, static_cast<int64_t>(k));
      }
      ++p;
    }
    return best;
  }

  // KV tokens this router made a worker write, newest last.
  struct Written {
    int64_t epoch = 0;
    std::deque<std::pair<absl::Time, int64_t>> writes;
    int64_t total = 0;  // sum of writes' tokens
  };

  // Tokens written on the worker within memory_hot_window (drops older).
  int64_t HotTokens(const std::string& worker_id, int64_t epoch, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = written_.find(worker_id);
    if (it == written_.end() || it->second.epoch != epoch) return 0;
    Written& w = it->second;
    while (!w.writes.empty() &&
           w.writes.front().first + options_.memory_hot_window < now) {
      w.total -= w.writes.front().second;
      w.writes.pop_front();
    }
    return w.total;
  }

  // Hash of the prompt's first miss_affinity_tokens tokens.
  uint64_t FamilyKey(const PlacementInput& input) const {
    uint64_t key = 1469598103934665603ULL;  // FNV-1a
    const size_t k =
        std::min<size_t>(options_.miss_affinity_tokens, input.tokens.size());
    for (size_t i = 0; i < k; ++i) {
      key = (key ^ static_cast<uint32_t>(input.tokens[i])) * 1099511628211ULL;
    }
    return key;
  }

  const CacheAwareOptions options_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Recent> recent_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Written> written_ ABSL_GUARDED_BY(mu_);
  // Prompt family (FamilyKey) -> the worker (id, epoch) its miss went to.
  absl::flat_hash_map<uint64_t, std::pair<std::string, int64_t>> family_home_
      ABSL_GUARDED_BY(mu_);
  uint64_t rotation_ ABSL_GUARDED_BY(mu_) = 0;
};

class RoundRobinPolicy : public PlacementPolicy {
 public:
  absl::string_view name() const override { return "round_robin"; }
  absl::StatusOr<PlacementDecision> Choose(
      const PlacementInput& input) override {
    if (absl::Status s = CheckInput(input); !s.ok()) return s;
    PlacementDecision d;
    d.index = static_cast<int>(next_++ % input.candidates.size());
    d.kind = PlacementDecisionKind::kRoundRobin;
    return d;
  }

 private:
  std::atomic<uint64_t> next_{0};
};

class LeastLoadPolicy : public PlacementPolicy {
 public:
  absl::string_view name() const override { return "least_load"; }
  absl::StatusOr<PlacementDecision> Choose(
      const PlacementInput& input) override {
    if (absl::Status s = CheckInput(input); !s.ok()) return s;
    PlacementDecision d;
    d.index = LeastLoaded(input, {}, rotation_++);
    d.kind = PlacementDecisionKind::kLeastLoad;
    d.score = static_cast<double>(input.candidates[d.index].load_tokens);
    return d;
  }

 private:
  std::atomic<uint64_t> rotation_{0};
};

class ApproxTreePolicy : public PlacementPolicy {
 public:
  ApproxTreePolicy(const CacheAwareOptions& options, int64_t capacity_tokens)
      : options_(options), capacity_tokens_(capacity_tokens) {}
  absl::string_view name() const override { return "approx_tree"; }

  absl::StatusOr<PlacementDecision> Choose(
      const PlacementInput& input) override {
    if (absl::Status s = CheckInput(input); !s.ok()) return s;
    std::vector<int64_t> hits;
    uint64_t rotation;
    {
      absl::MutexLock lock(&mu_);
      for (const WorkerCandidate& c : input.candidates) {
        hits.push_back(TreeFor(c.worker_id, c.epoch)->Match(input.tokens));
      }
      rotation = rotation_++;
    }
    return ChooseByPrefixAndLoad(input, hits, options_, rotation);
  }

  void OnDispatched(const std::string& worker_id, int64_t epoch,
                    absl::Span<const int32_t> tokens) override {
    absl::MutexLock lock(&mu_);
    TreeFor(worker_id, epoch)->Insert(tokens);
  }

 private:
  struct WorkerTree {
    int64_t epoch = 0;
    std::unique_ptr<ApproxPrefixTree> tree;
  };

  // The worker's tree; a new epoch (restart) starts an empty one.
  ApproxPrefixTree* TreeFor(const std::string& worker_id, int64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    WorkerTree& t = trees_[worker_id];
    if (t.tree == nullptr || t.epoch != epoch) {
      t.epoch = epoch;
      t.tree = std::make_unique<ApproxPrefixTree>(capacity_tokens_);
    }
    return t.tree.get();
  }

  const CacheAwareOptions options_;
  const int64_t capacity_tokens_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, WorkerTree> trees_ ABSL_GUARDED_BY(mu_);
  uint64_t rotation_ ABSL_GUARDED_BY(mu_) = 0;
};

// splitmix64 finalizer.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Rendezvous (highest random weight) hashing of the prompt's first
// `prefix_tokens` tokens over the candidates' worker ids.
int HomeWorker(const PlacementInput& input, int32_t prefix_tokens) {
  uint64_t key = 1469598103934665603ULL;  // FNV-1a over the prefix
  const size_t k = std::min<size_t>(prefix_tokens, input.tokens.size());
  for (size_t i = 0; i < k; ++i) {
    key = (key ^ static_cast<uint32_t>(input.tokens[i])) * 1099511628211ULL;
  }
  int home = 0;
  uint64_t best = 0;
  for (size_t i = 0; i < input.candidates.size(); ++i) {
    uint64_t h = key;
    for (char c : input.candidates[i].worker_id) {
      h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
    h = Mix(h);
    if (i == 0 || h > best) {
      best = h;
      home = static_cast<int>(i);
    }
  }
  return home;
}

}  // namespace

absl::string_view PlacementDecisionName(PlacementDecisionKind kind) {
  switch (kind) {
    case PlacementDecisionKind::kPrefixHit:
      return "prefix_hit";
    case PlacementDecisionKind::kCostTradeoff:
      return "cost_tradeoff";
    case PlacementDecisionKind::kNoPrefix:
      return "no_prefix";
    case PlacementDecisionKind::kLoadGuard:
      return "load_guard";
    case PlacementDecisionKind::kRoundRobin:
      return "round_robin";
    case PlacementDecisionKind::kLeastLoad:
      return "least_load";
  }
  return "unknown";
}

PlacementDecision ChooseByPrefixAndLoad(const PlacementInput& input,
                                        absl::Span<const int64_t> hits_in,
                                        const CacheAwareOptions& options,
                                        uint64_t rotation,
                                        absl::Span<const int64_t> hot_tokens,
                                        int assigned_home) {
  const size_t n = input.candidates.size();
  const int64_t prompt = static_cast<int64_t>(input.tokens.size());
  // A worker reuses at most prompt - 1 tokens (one is always computed).
  const int64_t max_reusable = std::max<int64_t>(0, prompt - 1);
  std::vector<int64_t> hits(n, 0);
  int64_t max_hit = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!input.prefix_cache_disabled) {
      hits[i] = std::clamp<int64_t>(hits_in[i], 0, max_reusable);
    }
    max_hit = std::max(max_hit, hits[i]);
  }
  auto score_of = [&](size_t i) {
    return options.prefill_weight * static_cast<double>(prompt - hits[i]) +
           options.load_weight *
               static_cast<double>(input.candidates[i].load_tokens);
  };
  int best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < n; ++j) {
    const size_t i = (j + rotation) % n;
    const double s = score_of(i);
    if (best < 0 || s < best_score ||
        (s == best_score && input.candidates[i].load_tokens <
                                input.candidates[best].load_tokens)) {
      best = static_cast<int>(i);
      best_score = s;
    }
  }
  PlacementDecision d;
  d.index = best;
  d.score = best_score;
  const int least = LeastLoaded(input, hits, rotation);
  const int64_t best_load = input.candidates[best].load_tokens;
  const int64_t least_load = input.candidates[least].load_tokens;
  if (least != best && best_load - least_load > options.balance_abs_tokens &&
      static_cast<double>(best_load) >
          options.balance_rel_ratio * static_cast<double>(least_load)) {
    d.index = least;
    d.score = score_of(least);
    d.kind = PlacementDecisionKind::kLoadGuard;
  } else if (max_hit == 0 || max_hit < options.miss_affinity_tokens) {
    d.kind = PlacementDecisionKind::kNoPrefix;
    bool memory_known = false;
    for (const WorkerCandidate& c : input.candidates) {
      memory_known = memory_known || c.capacity_slots > 0;
    }
    const bool memory_aware = options.memory_weight > 0 && memory_known &&
                              hot_tokens.size() == n && n > 1;
    // Workers with room for the new prefix (the whole prompt) whose load is
    // within the guard's absolute threshold of the least loaded.
    std::vector<bool> fits(n, false);
    std::vector<double> room(n, 0);
    size_t num_fit = 0;
    if (memory_aware) {
      for (size_t i = 0; i < n; ++i) {
        const WorkerCandidate& c = input.candidates[i];
        // Hot data is resident: at most the evictable slots (the rest of
        // what was written is protected, or gone, e.g. after a flush).
        room[i] =
            static_cast<double>(c.free_slots + c.evictable_slots -
                                std::min(hot_tokens[i], c.evictable_slots));
        fits[i] = room[i] >= static_cast<double>(prompt) &&
                  c.load_tokens - least_load <= options.balance_abs_tokens;
        if (fits[i]) ++num_fit;
      }
    }
    if (memory_aware && assigned_home >= 0 &&
        assigned_home < static_cast<int>(n) &&
        input.candidates[assigned_home].load_tokens - least_load <=
            options.miss_affinity_slack_tokens) {
      // The family was homed by memory before (its prefix since evicted):
      // back home.
      d.index = assigned_home;
      d.score = score_of(d.index);
      d.memory_placed = true;
    } else if (memory_aware && num_fit > 0 && num_fit < n) {
      // Some workers have room for the new prefix and some do not: the
      // lowest load_weight * load - memory_weight * room among those that
      // do. (When all or none do, memory does not discriminate and the
      // rendezvous home below keeps families together.)
      double best_miss = std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < n; ++j) {
        const size_t i = (j + rotation) % n;
        if (!fits[i]) continue;
        const double s =
            options.load_weight *
                static_cast<double>(input.candidates[i].load_tokens) -
            options.memory_weight * room[i];
        if (s < best_miss) {
          best_miss = s;
          d.index = static_cast<int>(i);
        }
      }
      d.score = score_of(d.index);
      d.memory_placed = true;
    } else if (options.miss_affinity_tokens > 0 && n > 1) {
      const int home = HomeWorker(input, options.miss_affinity_tokens);
      if (input.candidates[home].load_tokens - least_load <=
          options.miss_affinity_slack_tokens) {
        d.index = home;
        d.score = score_of(home);
      }
    }
  } else if (hits[best] == max_hit) {
    d.kind = PlacementDecisionKind::kPrefixHit;
  } else {
    d.kind = PlacementDecisionKind::kCostTradeoff;
  }
  d.predicted_hit_tokens = hits[d.index];
  return d;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> CreatePlacementPolicy(
    absl::string_view name, const CacheAwareOptions& options,
    int64_t approx_tree_capacity_tokens) {
  if (name == "cache_aware") {
    return std::unique_ptr<PlacementPolicy>(new CacheAwarePolicy(options));
  }
  if (name == "round_robin") {
    return std::unique_ptr<PlacementPolicy>(new RoundRobinPolicy());
  }
  if (name == "least_load") {
    return std::unique_ptr<PlacementPolicy>(new LeastLoadPolicy());
  }
  if (name == "approx_tree") {
    // Faithful to routers without the real cache: shortest queue on a miss.
    CacheAwareOptions approx = options;
    approx.miss_affinity_tokens = 0;
    approx.memory_weight = 0;
    return std::unique_ptr<PlacementPolicy>(
        new ApproxTreePolicy(approx, approx_tree_capacity_tokens));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown placement policy \"", name,
                   "\" (expected cache_aware, round_robin, least_load or "
                   "approx_tree)"));
}

std::vector<std::string> PlacementPolicyNames() {
  return {"cache_aware", "round_robin", "least_load", "approx_tree"};
}

}  // namespace radixkv::router

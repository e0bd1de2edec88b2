// PlacementPolicy: chooses the worker for one request from the live workers
// the cache service reports (one CacheService.Match call per request gives,
// per worker, the exact cached prefix, its epoch and its heartbeat load).
//
// Policies (flag --policy of the router):
//   cache_aware  (default) scores each worker by the prefill tokens it would
//                compute (prompt - hit) and its outstanding load, with a
//                load-imbalance guard. The hit is the exact residency of the
//                global radix tree (docs/architecture.md "One request" 2),
//                or, when longer, the common prefix with a prompt this
//                router has in flight on that worker or that finished there
//                within `finished_affinity_grace` (in-flight affinity: a prefix
//                being computed there is committed when that request
//                finishes, possibly just after its last chunk reached the
//                client, so requests of one group or conversation keep
//                landing where their prefix is or will be). A miss homes
//                the new prefix where it will survive: the worker with the
//                most room (free + not recently written evictable KV, from
//                Match's memory state) net of load (CacheAwareOptions).
//   round_robin  ignores residency and load.
//   least_load   the worker with the fewest outstanding tokens.
//   approx_tree  the cache_aware scoring, but with hit lengths from a
//                router-local approximate tree per worker fed only by the
//                requests this router routed (as routers without access to
//                the real cache do, e.g. the SGLang router); it never reads
//                the exact matched_tokens.
#ifndef RADIXKV_ROUTER_PLACEMENT_POLICY_H_
#define RADIXKV_ROUTER_PLACEMENT_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "router/approx_prefix_tree.h"

namespace radixkv::router {

// One live worker as seen at routing time.
struct WorkerCandidate {
  std::string worker_id;
  std::string address;
  // Registration epoch (a restarted worker has a larger one).
  int64_t epoch = 0;
  // Exact longest cached prefix of the prompt on this worker, tokens (from
  // CacheService.Match). Only cache_aware reads it.
  int64_t matched_tokens = 0;
  // Outstanding load, tokens: the worker's last heartbeat
  // outstanding_tokens brought up to date with this router's own dispatches
  // and completions since that heartbeat (WorkerLoadTracker::EstimateLoad).
  int64_t load_tokens = 0;
  // Age of the heartbeat that load_tokens came from (as reported by the
  // cache service); negative when unknown.
  absl::Duration heartbeat_age = -absl::InfiniteDuration();
  // Requests this router has in flight on the worker.
  int64_t in_flight_requests = 0;
  // The worker's KV memory state at Match time (CacheService.Match
  // WorkerMatch), slots (one slot = one token's KV): free + evictable +
  // protected == capacity. All 0 when unknown (then cache_aware ignores
  // memory). Only cache_aware reads them.
  int64_t capacity_slots = 0;
  int64_t free_slots = 0;
  int64_t evictable_slots = 0;
  int64_t protected_slots = 0;
  // The cache service restored this worker from its journal and has not
  // heard from it since: the process at its address may be a new one with
  // an empty pool. Placed on only when no confirmed worker is available.
  bool unconfirmed = false;
};

// Why a worker was chosen; used as the `decision` metric label.
enum class PlacementDecisionKind {
  kPrefixHit,     // the worker with the longest (predicted) prefix won
  kCostTradeoff,  // a worker with a shorter prefix won on load
  kNoPrefix,      // no worker had a (meaningful) prefix: home or least loaded
  kLoadGuard,     // the imbalance guard overrode the best-scored worker
  kRoundRobin,
  kLeastLoad,
};

// Stable snake_case name of a decision ("prefix_hit", "load_guard", ...).
absl::string_view PlacementDecisionName(PlacementDecisionKind kind);

struct PlacementDecision {
  // Index into PlacementInput::candidates.
  int index = -1;
  PlacementDecisionKind kind = PlacementDecisionKind::kNoPrefix;
  // Prompt tokens the policy expects the chosen worker to reuse, tokens.
  int64_t predicted_hit_tokens = 0;
  // Score of the chosen worker (lower is better; 0 for policies without one).
  double score = 0;
  // cache_aware: a miss placed by memory (room), not by the rendezvous home.
  bool memory_placed = false;
};

struct PlacementInput {
  // The prompt token ids.
  absl::Span<const int32_t> tokens;
  // Decode tokens the request may produce (sampling.max_new_tokens).
  int64_t max_new_tokens = 0;
  // The request runs with disable_prefix_cache: nothing will be reused.
  bool prefix_cache_disabled = false;
  // Live workers, excluding ones that already failed this request; not empty.
  std::vector<WorkerCandidate> candidates;
};

// Weights of the cache_aware / approx_tree score
//   score(w) = prefill_weight * (prompt_tokens - hit_tokens(w))
//            + load_weight * load_tokens(w)
// and the imbalance guard: when the best-scored worker's load exceeds the
// least loaded worker's load by more than `balance_abs_tokens` AND by more
// than the factor `balance_rel_ratio`, the least loaded worker is chosen
// instead (the SGLang router's balance_abs/rel thresholds, in tokens), so a
// hot shared prefix cannot pile every request onto one worker.
//
// Miss affinity (cache_aware only): when no worker holds a prefix of at
// least `miss_affinity_tokens` tokens (a BOS or a common word is no
// affinity), the request goes to the prompt's "home" worker, chosen by
// rendezvous hashing of its first `miss_affinity_tokens` tokens, unless the
// home's load exceeds the least loaded worker's by more than
// `miss_affinity_slack_tokens` (then the least loaded). Requests sharing a
// system prompt thus keep meeting on one worker even after their prefix was
// evicted, instead of scattering by load. 0 tokens disables it.
//
// Memory-aware misses (cache_aware, when `memory_weight` > 0 and the cache
// service reported the workers' memory): a miss (no worker holds
// `miss_affinity_tokens` of the prompt) homes a NEW prefix, and it should go
// where that prefix will survive, not onto a worker whose pool is already
// full of other hot prefixes (there LRU would evict it, or them, before
// their reuse). When some workers have room for the whole prompt and others
// do not (and the fitting ones' load is within `balance_abs_tokens` of the
// least loaded), the miss goes to the fitting worker with the lowest
//   miss_score(w) = load_weight * load_tokens(w) - memory_weight * room(w)
//   room(w) = free_slots(w) + evictable_slots(w)
//             - min(hot_tokens(w), evictable_slots(w))          [tokens]
// where hot_tokens(w) is the KV this router made the worker write within
// `memory_hot_window` (per dispatched request: prompt tokens beyond its
// predicted hit + max_new_tokens): evictable data written recently is what
// LRU keeps and what is reused next, so room is the reclaimable memory that
// is NOT recently used (free + cold evictable; protected slots, held by
// running requests, are never room). When all or none fit, memory does not
// discriminate and the rendezvous home applies. The policy remembers where
// each prompt family (the hash of its first miss_affinity_tokens tokens) was
// homed by memory: a later miss of the family (its prefix was evicted) returns
// there while that worker's load is within miss_affinity_slack_tokens of the
// least loaded one, so families do not migrate and unbalance the pools. The
// imbalance guard still applies. Hits are unchanged: they go to the worker
// holding the prefix.
struct CacheAwareOptions {
  double prefill_weight = 1.0;
  // 0.25: a prefix hit of H tokens keeps its worker until that worker's
  // outstanding load exceeds another's by 4H tokens (in practice the
  // imbalance guard decides first). With 1.0, load differences of a few
  // requests scattered shared prefixes onto both workers and duplicated
  // them in memory (docs/perf/2026-11-29-load-weight-ab.md).
  double load_weight = 0.25;
  int64_t balance_abs_tokens = 1024;
  double balance_rel_ratio = 2.0;
  int32_t miss_affinity_tokens = 32;
  int64_t miss_affinity_slack_tokens = 64;
  // cache_aware: how long a finished request's prompt still attracts
  // requests sharing it (covers the Commit that follows the last chunk).
  absl::Duration finished_affinity_grace = absl::Seconds(2);
  // Memory-aware misses (above): score weight per token of room, and how
  // long written KV counts as hot. memory_weight 0 = rendezvous home.
  double memory_weight = 1.0;
  absl::Duration memory_hot_window = absl::Seconds(10);
};

// Thread-safe: Choose and OnDispatched may be called from any thread.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;

  // The flag value that selects this policy.
  virtual absl::string_view name() const = 0;

  // Picks a worker. INVALID_ARGUMENT when `input.candidates` is empty.
  virtual absl::StatusOr<PlacementDecision> Choose(
      const PlacementInput& input) = 0;

  // Tells the policy that `tokens` were sent to `worker_id` at `epoch`
  // (approx_tree learns from it; a new epoch forgets the worker's tree).
  virtual void OnDispatched(const std::string& worker_id, int64_t epoch,
                            absl::Span<const int32_t> tokens) {}

  // Tells the policy that the attempt dispatched with the same arguments
  // ended (any outcome). Every OnDispatched is paired with one OnFinished.
  virtual void OnFinished(const std::string& worker_id, int64_t epoch,
                          absl::Span<const int32_t> tokens) {}
};

// Creates the policy called `name` (cache_aware, round_robin, least_load,
// approx_tree). INVALID_ARGUMENT for other names. `approx_tree_capacity` is
// the per-worker token bound of approx_tree's trees.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> CreatePlacementPolicy(
    absl::string_view name, const CacheAwareOptions& options,
    int64_t approx_tree_capacity_tokens = 1 << 20);

// The names CreatePlacementPolicy accepts.
std::vector<std::string> PlacementPolicyNames();

// Scores candidates with `hits[i]` as their hit lengths (shared by
// cache_aware and approx_tree; exposed for tests). `rotation` breaks exact
// ties fairly. `hot_tokens[i]` is candidate i's recently written KV, tokens
// (see CacheAwareOptions); when empty, or when `options.memory_weight` is 0,
// or no candidate reports capacity_slots, misses use the rendezvous home.
// `assigned_home` (index, or -1): where a memory-aware miss of the same
// prompt family went before; a miss returns there while its load is within
// miss_affinity_slack_tokens of the least loaded worker.
PlacementDecision ChooseByPrefixAndLoad(
    const PlacementInput& input, absl::Span<const int64_t> hits,
    const CacheAwareOptions& options, uint64_t rotation,
    absl::Span<const int64_t> hot_tokens = {}, int assigned_home = -1);

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_PLACEMENT_POLICY_H_

// Eviction order of unlocked radix-tree leaves (background.md §2.4, SGLang
// radix_cache.py evict()): only leaves with lock_ref == 0 are candidates; the
// one with the smallest EvictionKey goes first. A parent whose last resident
// child is evicted becomes a leaf and is queued in turn, so the tree shrinks
// bottom-up back to its root.
//
// Keys are total orders with the node id as the final tie-breaker, so the
// eviction order is deterministic (required for journal replay).
#ifndef RADIXKV_CACHE_SERVICE_EVICTION_POLICY_H_
#define RADIXKV_CACHE_SERVICE_EVICTION_POLICY_H_

#include <compare>
#include <cstdint>
#include <string_view>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"

namespace radixkv::cache_service {

// lru: least recently used first (default). lfu: fewest hits first, then
// least recently used. priority: lowest request priority first, then least
// recently used. reuse_lru: least recently used, where a leaf that some
// Acquire has matched (a reused prefix) counts as reuse_bonus_ms more recent
// than it is, so the unique tails of finished requests, which no request
// has matched, go before the shared prefixes they hang off (a time-bounded
// form of segmented LRU: a prefix unused for longer than the bonus loses its
// protection). tools/workload/two_worker_hit_rate_model.py and
// docs/perf/2026-11-29-two-workers-2x-target.md show where this matters.
enum class EvictionPolicyKind { kLru, kLfu, kPriority, kReuseLru };

// A policy and its parameter. Part of the replayed state: a restarted
// service must use the same values (CacheOptions).
struct EvictionPolicy {
  EvictionPolicyKind kind = EvictionPolicyKind::kLru;
  // reuse_lru only: how much more recent a reused leaf counts. ms, >= 0.
  int64_t reuse_bonus_ms = 5'000;
};

// Parses "lru", "lfu", "priority" or "reuse_lru". INVALID_ARGUMENT otherwise.
absl::StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name);

// "lru", "lfu", "priority" or "reuse_lru".
std::string_view EvictionPolicyName(EvictionPolicyKind kind);

// What the policies look at, per (node, worker) residency.
struct EvictionStats {
  int64_t last_access_ms = 0;  // last Acquire/Commit touching it, ms
  int64_t hit_count = 0;       // Acquires that matched through it
  int32_t priority = 0;        // max request priority that touched it
};

// Sort key of an evictable leaf; smaller is evicted first.
struct EvictionKey {
  int64_t primary = 0;
  int64_t secondary = 0;
  uint64_t node_id = 0;
  friend auto operator<=>(const EvictionKey&, const EvictionKey&) = default;
};

// The key of a residency under a policy.
EvictionKey MakeEvictionKey(const EvictionPolicy& policy,
                            const EvictionStats& stats, uint64_t node_id);

class RadixNode;

// The evictable leaves of one worker (across all its trees), ordered by key.
// The radix tree keeps it exact: a residency is queued iff its lock_ref is 0
// and no child of its node is resident on the same worker.
class EvictionQueue {
 public:
  // Queues node under key. The key must not be queued already.
  void Insert(const EvictionKey& key, RadixNode* node);
  // Removes key; returns false when it was not queued.
  bool Erase(const EvictionKey& key);
  bool Contains(const EvictionKey& key) const;
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  // The next leaf to evict. Requires !empty().
  std::pair<EvictionKey, RadixNode*> Front() const;

  const absl::btree_map<EvictionKey, RadixNode*>& entries() const {
    return queue_;
  }

 private:
  absl::btree_map<EvictionKey, RadixNode*> queue_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_EVICTION_POLICY_H_

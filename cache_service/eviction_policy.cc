#include "cache_service/eviction_policy.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace radixkv::cache_service {

absl::StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  if (name == "lru") return EvictionPolicyKind::kLru;
  if (name == "lfu") return EvictionPolicyKind::kLfu;
  if (name == "priority") return EvictionPolicyKind::kPriority;
  if (name == "reuse_lru") return EvictionPolicyKind::kReuseLru;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown eviction policy '", std::string(name),
                   "' (expected lru, lfu, priority or reuse_lru)"));
}

std::string_view EvictionPolicyName(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return "lru";
    case EvictionPolicyKind::kLfu:
      return "lfu";
    case EvictionPolicyKind::kPriority:
      return "priority";
    case EvictionPolicyKind::kReuseLru:
      return "reuse_lru";
  }
  return "lru";
}

EvictionKey MakeEvictionKey(const EvictionPolicy& policy,
                            const EvictionStats& stats, uint64_t node_id) {
  switch (policy.kind) {
    case EvictionPolicyKind::kLru:
      return {stats.last_access_ms, 0, node_id};
    case EvictionPolicyKind::kLfu:
      return {stats.hit_count, stats.last_access_ms, node_id};
    case EvictionPolicyKind::kPriority:
      return {stats.priority, stats.last_access_ms, node_id};
    case EvictionPolicyKind::kReuseLru:
      return {stats.last_access_ms +
                  (stats.hit_count > 0 ? policy.reuse_bonus_ms : 0),
              0, node_id};
  }
  return {stats.last_access_ms, 0, node_id};
}

void EvictionQueue::Insert(const EvictionKey& key, RadixNode* node) {
  queue_.emplace(key, node);
}

bool EvictionQueue::Erase(const EvictionKey& key) {
  return queue_.erase(key) > 0;
}

bool EvictionQueue::Contains(const EvictionKey& key) const {
  return queue_.contains(key);
}

std::pair<EvictionKey, RadixNode*> EvictionQueue::Front() const {
  return *queue_.begin();
}

}  // namespace radixkv::cache_service

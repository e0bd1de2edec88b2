// ApproxPrefixTree: a router-local radix tree over token ids for one worker,
// fed only with the prompts this router replica sent to that worker. It is
// the approximation that routers without access to the real cache use (the
// SGLang router's per-worker approximate tree); radixkv keeps it only as the
// `approx_tree` placement policy, to be compared against the exact residency
// that CacheService.Match reports.
#ifndef RADIXKV_ROUTER_APPROX_PREFIX_TREE_H_
#define RADIXKV_ROUTER_APPROX_PREFIX_TREE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace radixkv::router {

// Not thread-safe; the owning policy serializes access.
class ApproxPrefixTree {
 public:
  // `capacity_tokens` bounds the tokens stored (edges summed); inserts past
  // it evict least recently used leaves down to 90% of the capacity, the way
  // the real worker cache would forget old prefixes. Must be > 0.
  explicit ApproxPrefixTree(int64_t capacity_tokens);
  ~ApproxPrefixTree();
  ApproxPrefixTree(const ApproxPrefixTree&) = delete;
  ApproxPrefixTree& operator=(const ApproxPrefixTree&) = delete;

  // Length of the longest stored prefix of `tokens`, tokens. Touches the
  // matched path (LRU).
  int64_t Match(absl::Span<const int32_t> tokens);

  // Stores `tokens` (splitting an edge where they diverge), then evicts if
  // over capacity.
  void Insert(absl::Span<const int32_t> tokens);

  // Tokens stored over all edges.
  int64_t size_tokens() const { return size_tokens_; }
  // Nodes excluding the root.
  int64_t num_nodes() const { return num_nodes_; }

 private:
  struct Node {
    std::vector<int32_t> edge;  // tokens on the edge from the parent
    absl::flat_hash_map<int32_t, std::unique_ptr<Node>> children;
    Node* parent = nullptr;
    uint64_t last_access = 0;
  };

  // Splits `node`'s edge after `at` tokens; returns the new upper node.
  Node* Split(Node* node, size_t at);
  void EvictLeastRecentlyUsed(int64_t target_tokens);

  const int64_t capacity_tokens_;
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;
  int64_t size_tokens_ = 0;
  int64_t num_nodes_ = 0;
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_APPROX_PREFIX_TREE_H_

// RadixTree: the radix (compressed prefix) tree of cached token sequences of
// one (model, cache_salt), shared by every worker of the model (background.md
// §2.2, SGLang radix_cache.py TreeNode / _split_node / _insert_helper / evict).
//
// Structure. Each edge holds a run of int32 token ids. Children are keyed by
// their first token: splits happen at token granularity (a match that ends
// inside an edge splits it at that token, background.md §2.2), so two
// siblings never share a first token. SGLang keys children by their first
// page when page_size > 1 because its splits are page-aligned; this tree is
// shared by workers of different page sizes and reuses partially matched
// pages token by token (background.md §2.5), so the first
// token is the only correct key. Page consistency is handled by the caller
// (CacheState) with copy ops.
//
// Per-worker residency. A node carries a 64-bit mask of the workers ("bits",
// 0..63, assigned per model) on which its whole edge is cached, and for each
// resident worker a Residency record: the slot id of every edge token in that
// worker's pool, the lock_ref (SGLang's inc_lock_ref / dec_lock_ref,
// background.md §2.3), the eviction statistics and the count of children
// resident on the same worker. Residency is prefix-closed. MatchAll() finds
// every worker's longest prefix in one walk: O(tokens + path nodes + workers).
// Records are sorted by bit and found by popcount(mask below bit): O(1).
//
// Slots of a record always satisfy slot % page_size == position % page_size
// (page-consistent). Every record holds one reference per distinct page of
// its slots in the worker's PageAllocator (protecting while lock_ref > 0), and
// the record is queued in the worker's EvictionQueue iff lock_ref == 0 and
// no child is resident on the worker (an evictable leaf, background.md §2.4).
//
// The root is permanent (its lock never drops: it has no residency and is
// never evicted); a non-root node exists only while some worker is resident
// on it, so evicting everything shrinks the tree back to its root.
#ifndef RADIXKV_CACHE_SERVICE_RADIX_TREE_H_
#define RADIXKV_CACHE_SERVICE_RADIX_TREE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "cache_service/eviction_policy.h"
#include "cache_service/page_allocator.h"

namespace radixkv::cache_service {

inline constexpr int kMaxResidentWorkers = 64;

// Per-worker context a tree needs to keep the allocator and the eviction
// queue exact. Owned by the model; indexed by worker bit.
struct WorkerContext {
  PageAllocator* allocator = nullptr;  // null: bit unused
  EvictionQueue* queue = nullptr;
  int64_t resident_tokens = 0;  // tokens resident on the worker, all trees
};
using WorkerContexts = std::array<WorkerContext, kMaxResidentWorkers>;

// One worker's copy of a node's edge.
struct Residency {
  int32_t bit = 0;
  int32_t lock_ref = 0;           // leases whose path crosses this node
  int32_t resident_children = 0;  // children resident on the same worker
  EvictionStats stats;
  std::vector<int32_t> slots;  // one per edge token
};

class RadixTree;

class RadixNode {
 public:
  uint64_t id() const { return id_; }
  RadixNode* parent() const { return parent_; }
  RadixTree* tree() const { return tree_; }
  // Sequence position of tokens()[0], tokens.
  int64_t start() const { return start_; }
  int64_t end() const { return start_ + static_cast<int64_t>(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  uint64_t resident_mask() const { return resident_mask_; }
  bool resident(int bit) const { return (resident_mask_ >> bit) & 1; }
  // The record of `bit`, or null when not resident.
  const Residency* residency(int bit) const;
  Residency* residency(int bit);
  const std::vector<Residency>& residencies() const { return residency_; }
  const absl::flat_hash_map<int32_t, std::unique_ptr<RadixNode>>& children()
      const {
    return children_;
  }
  // Children sorted by first token (for deterministic traversal).
  std::vector<RadixNode*> SortedChildren() const;

 private:
  friend class RadixTree;
  uint64_t id_ = 0;
  RadixNode* parent_ = nullptr;
  RadixTree* tree_ = nullptr;
  int64_t start_ = 0;
  std::vector<int32_t> tokens_;
  uint64_t resident_mask_ = 0;
  std::vector<Residency> residency_;  // sorted by bit
  absl::flat_hash_map<int32_t, std::unique_ptr<RadixNode>> children_;
};

// Longest resident prefix of a prompt on one worker.
struct PathMatch {
  int64_t matched_tokens = 0;
  // Nodes from the root's child down to the node holding the last matched
  // token (empty when nothing matched).
  std::vector<RadixNode*> path;
};

struct InsertResult {
  int64_t inserted_tokens = 0;    // positions newly resident on the worker
  int64_t resident_before = 0;    // positions [0, this) were already resident
  RadixNode* terminal = nullptr;  // node holding the last inserted position
};

struct EvictOutcome {
  int64_t evicted_tokens = 0;
  int64_t freed_pages = 0;
};

class RadixTree {
 public:
  // node ids come from *next_node_id (shared by all trees, part of the
  // journaled state); workers must outlive the tree.
  RadixTree(std::string model, std::string cache_salt, EvictionPolicy policy,
            WorkerContexts* workers, uint64_t* next_node_id);
  ~RadixTree();
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  const std::string& model() const { return model_; }
  const std::string& cache_salt() const { return cache_salt_; }
  RadixNode* root() { return &root_; }
  const RadixNode* root() const { return &root_; }
  bool empty() const { return root_.children_.empty(); }
  int64_t num_nodes() const { return num_nodes_; }
  // Tokens on all edges (each once, however many workers hold them).
  int64_t num_tokens() const { return num_tokens_; }

  // For every bit in `workers`, out[bit] = longest prefix of tokens resident
  // on that worker (background.md §2.3). Read-only. O(tokens + path nodes +
  // workers).
  void MatchAll(std::span<const int32_t> tokens, uint64_t workers,
                std::array<int64_t, kMaxResidentWorkers>* out) const;

  // Longest prefix resident on one worker, with its path. Read-only.
  PathMatch MatchWorker(std::span<const int32_t> tokens, int bit) const;

  // Slots on `bit` of positions [0, n) along a path (n <= matched tokens).
  static std::vector<int32_t> PathSlots(const PathMatch& match, int bit,
                                        int64_t n);

  // lock_ref + 1 (resp. - 1) on `bit`'s record of terminal and every
  // ancestor (SGLang's inc_lock_ref / dec_lock_ref, background.md §2.3).
  // terminal == root: no-op.
  void LockPath(RadixNode* terminal, int bit);
  void UnlockPath(RadixNode* terminal, int bit);

  // Locks exactly positions [0, end) of the path through `node` on `bit`
  // (background.md §2.3: a lease locks only its matched prefix, as SGLang's
  // match_prefix splits the last node at the match point). `node` must be
  // resident on `bit` and on the path, with node->end() >= end (any node
  // holding position end - 1 or a descendant of it on the path). When end
  // falls inside an edge, that edge is split at end (token granular) so the
  // rest of it stays unlocked and evictable. Returns the node now ending at
  // `end` (the lease terminal to pass to UnlockPath later), or null when
  // end == 0 (nothing locked).
  RadixNode* LockPrefix(RadixNode* node, int64_t end, int bit);

  // Pages of `bit`'s pool that LockPrefix(node, end, bit) would turn from
  // evictable into protected: distinct pages of the unlocked records on the
  // path of positions [0, end) whose protect_count is 0. Read-only (no split
  // is made); lets a caller decide whether eviction can make room before it
  // mutates anything. O(pages on the newly locked part of the path).
  int64_t PagesProtectedByLockPrefix(const RadixNode* node, int64_t end,
                                     int bit) const;

  // Records an access on terminal and its ancestors: last_access_ms = now,
  // priority = max(priority, old), and hit_count + 1 when `count_hit` (an
  // Acquire that matched this path; Insert's own touch does not count, so a
  // leaf no request has matched has hit_count 0).
  void TouchPath(RadixNode* terminal, int bit, int64_t now_ms, int32_t priority,
                 bool count_hit);

  // Makes tokens[0, n) resident on `bit`, with slots[i] holding position i
  // (page-consistent). Positions already resident keep the tree's slots;
  // the others are added (splitting edges at token granularity, background.md
  // §2.2) and reference their pages. Touches the whole path.
  InsertResult Insert(std::span<const int32_t> tokens,
                      std::span<const int32_t> slots, int bit, int64_t now_ms,
                      int32_t priority);

  // Evicts `bit`'s record of node, which must be an evictable leaf (queued):
  // its pages lose a reference, the node is deleted when no worker is
  // resident any more, and the parent's record may become an evictable leaf
  // (background.md §2.4).
  EvictOutcome EvictLeaf(RadixNode* node, int bit);

  // Drops every record of `bit` without touching allocator or queue (the
  // worker's pool is gone: new epoch, deregistration). Deletes nodes left
  // without residency.
  void RemoveWorker(int bit);

  // Visits nodes in preorder, children sorted by first token; the root first.
  void ForEachPreorder(const std::function<void(const RadixNode&)>& fn) const;

  // Approximate heap + object bytes of the tree's metadata.
  int64_t MetadataBytes() const;

  // Snapshot restore: appends a child under parent with the given id and
  // edge, and a residency record (lock_ref 0) without touching allocators or
  // queues; call RebuildDerived() afterwards.
  RadixNode* RestoreChild(RadixNode* parent, uint64_t id,
                          std::vector<int32_t> tokens);
  void RestoreResidency(RadixNode* node, Residency residency);
  // Recomputes resident_children and resident_tokens, references pages (not
  // protecting) and queues evictable leaves. Locks are applied afterwards
  // with LockPath().
  void RebuildDerived();

  // Structural invariants of the tree (see file comment). `lock_refs`
  // gives the expected lock_ref per (node id, bit) from the leases.
  absl::Status CheckInvariants(
      uint64_t model_workers,
      const absl::flat_hash_map<std::pair<uint64_t, int>, int32_t>& lock_refs)
      const;

 private:
  RadixNode* NewNode(RadixNode* parent, int64_t start,
                     std::vector<int32_t> tokens);
  // Splits child's edge after `length` tokens; returns the new upper node
  // (the original object keeps the lower part, so pointers to it - lease
  // terminals - stay valid and its lock state is inherited by the upper).
  RadixNode* Split(RadixNode* child, int64_t length);
  void AddResidency(RadixNode* node, int bit, std::vector<int32_t> slots,
                    int64_t now_ms, int32_t priority);
  bool Queued(const RadixNode& node, const Residency& r) const;
  void Enqueue(RadixNode* node, const Residency& r);
  void Dequeue(RadixNode* node, const Residency& r);
  int32_t PageSize(int bit) const;
  // Calls fn(page) once per distinct page of slots (runs of equal pages).
  template <typename Fn>
  void ForEachPage(const std::vector<int32_t>& slots, int bit, Fn fn) const;

  std::string model_;
  std::string cache_salt_;
  EvictionPolicy policy_;
  WorkerContexts* workers_;
  uint64_t* next_node_id_;
  RadixNode root_;
  int64_t num_nodes_ = 0;   // root excluded
  int64_t num_tokens_ = 0;  // edge tokens of all nodes
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_RADIX_TREE_H_

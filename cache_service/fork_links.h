// ForkLinks: which live leases hold the same KV at which positions because
// of Fork (vLLM's fork, background.md §1.4: children share the parent's pages
// by ref count).
//
// A Fork of lease P at num_tokens n gives each child C the parent's KV for
// positions [0, n): link (P, C, n). Copy-on-write moves bytes, not meaning,
// so a link outlives any copy of the shared pages. Two leases share
// position p iff some path of links joins them on which every link is
// longer than p: the shared length of a pair is the minimum link length on
// the path between them. Links form a forest (a fork adds a new lease as a
// leaf), so that path is unique.
//
// When a lease ends, its links are replaced by links from each of its
// neighbours to the neighbour it shares the longest prefix with (ties: the
// smallest lease id): every remaining pair keeps its shared length (for
// neighbours y, z and hub h: min(w_y, w_h) = w_y, min(w_y, w_z) through h)
// and the links stay a forest.
//
// CacheState uses it to keep the tokens of shared positions consistent: the
// first Commit of any lease of a family fixes the tokens of the positions
// it shares, and every later Commit must agree (cache_state.h, Commit).
//
// Lease ids are opaque. Deterministic: Visit and Links do not depend on
// hash-map order.
#ifndef RADIXKV_CACHE_SERVICE_FORK_LINKS_H_
#define RADIXKV_CACHE_SERVICE_FORK_LINKS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace radixkv::cache_service {

// Leases a and b hold the same KV at positions [0, shared).
struct ForkLink {
  uint64_t a = 0;  // a < b
  uint64_t b = 0;
  int64_t shared = 0;  // tokens, >= 1
  friend bool operator==(const ForkLink&, const ForkLink&) = default;
};

class ForkLinks {
 public:
  // Records that a and b share positions [0, shared). Requires a != b,
  // shared >= 1, and that a and b are not yet joined by a path (b is a new
  // child, or the caller restores a forest).
  void Link(uint64_t a, uint64_t b, int64_t shared);

  // Forgets `lease`, relinking its neighbours as the file comment says.
  // O(degree). No-op for a lease without links.
  void Remove(uint64_t lease);

  // Walks the leases joined to `from` by a path, in depth-first order of
  // ascending neighbour id. For each one calls visit(lease, shared), shared
  // = min(limit, link lengths on the path), tokens. When visit returns
  // false the walk does not continue past that lease. O(leases visited).
  void Visit(
      uint64_t from, int64_t limit,
      const std::function<bool(uint64_t lease, int64_t shared)>& visit) const;

  // Every link once, sorted by (a, b). For dumps, snapshots and checks.
  std::vector<ForkLink> Links() const;

  // True when `lease` has at least one link.
  bool Linked(uint64_t lease) const { return neighbours_.contains(lease); }
  bool empty() const { return neighbours_.empty(); }

 private:
  struct Neighbour {
    uint64_t lease = 0;
    int64_t shared = 0;
  };
  void AddHalf(uint64_t from, uint64_t to, int64_t shared);
  void RemoveHalf(uint64_t from, uint64_t to);

  // Neighbours of each linked lease, sorted by lease id.
  absl::flat_hash_map<uint64_t, std::vector<Neighbour>> neighbours_;
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_FORK_LINKS_H_

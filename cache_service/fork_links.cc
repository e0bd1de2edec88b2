#include "cache_service/fork_links.h"

#include <algorithm>
#include <utility>

namespace radixkv::cache_service {

void ForkLinks::AddHalf(uint64_t from, uint64_t to, int64_t shared) {
  std::vector<Neighbour>& list = neighbours_[from];
  auto it = std::lower_bound(
      list.begin(), list.end(), to,
      [](const Neighbour& n, uint64_t id) { return n.lease < id; });
  list.insert(it, Neighbour{to, shared});
}

void ForkLinks::RemoveHalf(uint64_t from, uint64_t to) {
  auto entry = neighbours_.find(from);
  if (entry == neighbours_.end()) return;
  std::vector<Neighbour>& list = entry->second;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [to](const Neighbour& n) { return n.lease == to; }),
             list.end());
  if (list.empty()) neighbours_.erase(entry);
}

void ForkLinks::Link(uint64_t a, uint64_t b, int64_t shared) {
  AddHalf(a, b, shared);
  AddHalf(b, a, shared);
}

void ForkLinks::Remove(uint64_t lease) {
  auto entry = neighbours_.find(lease);
  if (entry == neighbours_.end()) return;
  const std::vector<Neighbour> around = std::move(entry->second);
  neighbours_.erase(entry);
  // The hub: the longest shared prefix, then the smallest id (`around` is
  // sorted by id, so the first maximum).
  const Neighbour hub = *std::max_element(
      around.begin(), around.end(), [](const Neighbour& x, const Neighbour& y) {
        return x.shared < y.shared;
      });
  for (const Neighbour& n : around) RemoveHalf(n.lease, lease);
  for (const Neighbour& n : around) {
    if (n.lease != hub.lease) Link(hub.lease, n.lease, n.shared);
  }
}

void ForkLinks::Visit(
    uint64_t from, int64_t limit,
    const std::function<bool(uint64_t, int64_t)>& visit) const {
  // (lease, the lease it was reached from, shared length so far). A forest:
  // not returning to the previous lease is enough to visit each once.
  struct Frame {
    uint64_t lease;
    uint64_t previous;
    int64_t shared;
  };
  std::vector<Frame> stack = {{from, from, limit}};
  while (!stack.empty()) {
    const Frame frame = stack.back();
    stack.pop_back();
    if (frame.lease != from && !visit(frame.lease, frame.shared)) continue;
    auto entry = neighbours_.find(frame.lease);
    if (entry == neighbours_.end()) continue;
    // Reversed so that the smallest id is visited first.
    for (auto it = entry->second.rbegin(); it != entry->second.rend(); ++it) {
      if (it->lease == frame.previous) continue;
      stack.push_back(
          {it->lease, frame.lease, std::min(frame.shared, it->shared)});
    }
  }
}

std::vector<ForkLink> ForkLinks::Links() const {
  std::vector<ForkLink> links;
  for (const auto& [lease, list] : neighbours_) {
    for (const Neighbour& n : list) {
      if (lease < n.lease) links.push_back(ForkLink{lease, n.lease, n.shared});
    }
  }
  std::sort(links.begin(), links.end(),
            [](const ForkLink& x, const ForkLink& y) {
              return x.a != y.a ? x.a < y.a : x.b < y.b;
            });
  return links;
}

}  // namespace radixkv::cache_service

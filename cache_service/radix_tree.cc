#include "cache_service/radix_tree.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace radixkv::cache_service {
namespace {

// Number of leading equal tokens of a and b. Compares 64-token blocks with
// memcmp (vectorized by libc) before the scalar tail: long edges (system
// prompts of thousands of tokens) dominate Match.
int64_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  constexpr size_t kBlock = 64;
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i + kBlock <= n && std::memcmp(a.data() + i, b.data() + i,
                                        kBlock * sizeof(int32_t)) == 0) {
    i += kBlock;
  }
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

uint64_t BitsBelow(int bit) {
  return bit == 0 ? 0 : (~uint64_t{0} >> (64 - bit));
}

}  // namespace

const Residency* RadixNode::residency(int bit) const {
  if (!resident(bit)) return nullptr;
  return &residency_[std::popcount(resident_mask_ & BitsBelow(bit))];
}

Residency* RadixNode::residency(int bit) {
  if (!resident(bit)) return nullptr;
  return &residency_[std::popcount(resident_mask_ & BitsBelow(bit))];
}

std::vector<RadixNode*> RadixNode::SortedChildren() const {
  std::vector<RadixNode*> out;
  out.reserve(children_.size());
  for (const auto& [key, child] : children_) out.push_back(child.get());
  std::sort(out.begin(), out.end(), [](RadixNode* a, RadixNode* b) {
    return a->tokens_[0] < b->tokens_[0];
  });
  return out;
}

RadixTree::RadixTree(std::string model, std::string cache_salt,
                     EvictionPolicy policy, WorkerContexts* workers,
                     uint64_t* next_node_id)
    : model_(std::move(model)),
      cache_salt_(std::move(cache_salt)),
      policy_(policy),
      workers_(workers),
      next_node_id_(next_node_id) {
  root_.tree_ = this;
}

RadixTree::~RadixTree() {
  // Iterative teardown: a path can be ~1M nodes deep (one token per node),
  // too deep for the recursive unique_ptr destructors.
  std::vector<std::unique_ptr<RadixNode>> pending;
  for (auto& [key, child] : root_.children_)
    pending.push_back(std::move(child));
  root_.children_.clear();
  while (!pending.empty()) {
    std::unique_ptr<RadixNode> node = std::move(pending.back());
    pending.pop_back();
    for (auto& [key, child] : node->children_) {
      pending.push_back(std::move(child));
    }
    node->children_.clear();
  }
}

int32_t RadixTree::PageSize(int bit) const {
  return (*workers_)[bit].allocator->page_size();
}

template <typename Fn>
void RadixTree::ForEachPage(const std::vector<int32_t>& slots, int bit,
                            Fn fn) const {
  // Slots are page-consistent (slot % page_size == position % page_size), so
  // the next page starts page_size - offset positions later: O(pages).
  const int shift = std::countr_zero(static_cast<uint32_t>(PageSize(bit)));
  const int32_t mask = (int32_t{1} << shift) - 1;
  const size_t n = slots.size();
  int32_t last = -1;
  for (size_t i = 0; i < n;) {
    const int32_t page = slots[i] >> shift;
    if (page != last) fn(page);
    last = page;
    i += static_cast<size_t>((mask + 1) - (slots[i] & mask));
  }
}

bool RadixTree::Queued(const RadixNode& node, const Residency& r) const {
  return &node != &root_ && r.lock_ref == 0 && r.resident_children == 0;
}

void RadixTree::Enqueue(RadixNode* node, const Residency& r) {
  (*workers_)[r.bit].queue->Insert(MakeEvictionKey(policy_, r.stats, node->id_),
                                   node);
}

void RadixTree::Dequeue(RadixNode* node, const Residency& r) {
  (*workers_)[r.bit].queue->Erase(MakeEvictionKey(policy_, r.stats, node->id_));
}

RadixNode* RadixTree::NewNode(RadixNode* parent, int64_t start,
                              std::vector<int32_t> tokens) {
  auto node = std::make_unique<RadixNode>();
  node->id_ = (*next_node_id_)++;
  node->parent_ = parent;
  node->tree_ = this;
  node->start_ = start;
  node->tokens_ = std::move(tokens);
  RadixNode* raw = node.get();
  parent->children_[raw->tokens_[0]] = std::move(node);
  ++num_nodes_;
  num_tokens_ += static_cast<int64_t>(raw->tokens_.size());
  return raw;
}

void RadixTree::MatchAll(std::span<const int32_t> tokens, uint64_t workers,
                         std::array<int64_t, kMaxResidentWorkers>* out) const {
  out->fill(0);
  uint64_t active = workers;
  const RadixNode* node = &root_;
  int64_t pos = 0;
  const int64_t n = static_cast<int64_t>(tokens.size());
  while (pos < n && active != 0) {
    const auto it = node->children_.find(tokens[pos]);
    if (it == node->children_.end()) break;
    const RadixNode* child = it->second.get();
    // Workers whose residency stops at this node boundary keep pos.
    uint64_t dropped = active & ~child->resident_mask_;
    while (dropped != 0) {
      (*out)[std::countr_zero(dropped)] = pos;
      dropped &= dropped - 1;
    }
    active &= child->resident_mask_;
    if (active == 0) return;
    const int64_t common = CommonPrefix(child->tokens_, tokens.subspan(pos));
    pos += common;
    if (common < static_cast<int64_t>(child->tokens_.size())) break;
    node = child;
  }
  while (active != 0) {
    (*out)[std::countr_zero(active)] = pos;
    active &= active - 1;
  }
}

PathMatch RadixTree::MatchWorker(std::span<const int32_t> tokens,
                                 int bit) const {
  PathMatch match;
  const RadixNode* node = &root_;
  int64_t pos = 0;
  const int64_t n = static_cast<int64_t>(tokens.size());
  while (pos < n) {
    const auto it = node->children_.find(tokens[pos]);
    if (it == node->children_.end() || !it->second->resident(bit)) break;
    RadixNode* child = it->second.get();
    const int64_t common = CommonPrefix(child->tokens_, tokens.subspan(pos));
    pos += common;
    match.path.push_back(child);
    if (common < static_cast<int64_t>(child->tokens_.size())) break;
    node = child;
  }
  match.matched_tokens = pos;
  return match;
}

std::vector<int32_t> RadixTree::PathSlots(const PathMatch& match, int bit,
                                          int64_t n) {
  std::vector<int32_t> slots;
  slots.reserve(n);
  for (const RadixNode* node : match.path) {
    if (static_cast<int64_t>(slots.size()) >= n) break;
    const Residency* r = node->residency(bit);
    const int64_t take = std::min<int64_t>(
        r->slots.size(), n - static_cast<int64_t>(slots.size()));
    slots.insert(slots.end(), r->slots.begin(), r->slots.begin() + take);
  }
  return slots;
}

void RadixTree::LockPath(RadixNode* terminal, int bit) {
  for (RadixNode* node = terminal; node != nullptr && node != &root_;
       node = node->parent_) {
    Residency* r = node->residency(bit);
    if (r->lock_ref++ == 0) {
      if (r->resident_children == 0) Dequeue(node, *r);
      PageAllocator* allocator = (*workers_)[bit].allocator;
      ForEachPage(r->slots, bit,
                  [&](int32_t page) { allocator->Protect(page); });
    }
  }
}

void RadixTree::UnlockPath(RadixNode* terminal, int bit) {
  for (RadixNode* node = terminal; node != nullptr && node != &root_;
       node = node->parent_) {
    Residency* r = node->residency(bit);
    if (--r->lock_ref == 0) {
      PageAllocator* allocator = (*workers_)[bit].allocator;
      ForEachPage(r->slots, bit,
                  [&](int32_t page) { allocator->Unprotect(page); });
      if (r->resident_children == 0) Enqueue(node, *r);
    }
  }
}

RadixNode* RadixTree::LockPrefix(RadixNode* node, int64_t end, int bit) {
  while (node != nullptr && node != &root_ && node->start() >= end) {
    node = node->parent_;
  }
  if (node == nullptr || node == &root_) return nullptr;
  if (end < node->end()) node = Split(node, end - node->start());
  LockPath(node, bit);
  return node;
}

int64_t RadixTree::PagesProtectedByLockPrefix(const RadixNode* node,
                                              int64_t end, int bit) const {
  while (node != nullptr && node != &root_ && node->start() >= end) {
    node = node->parent_;
  }
  const PageAllocator* allocator = (*workers_)[bit].allocator;
  const int32_t page_size = PageSize(bit);
  // Pages of one path are distinct per logical page except the page a split
  // left straddling two adjacent records, so remembering the last page seen
  // (walking upwards, positions decreasing) removes every duplicate.
  int64_t count = 0;
  int32_t last = -1;
  for (; node != nullptr && node != &root_; node = node->parent_) {
    const Residency* r = node->residency(bit);
    // Locks are path-closed: above a locked record everything is locked.
    if (r->lock_ref > 0) break;
    const int64_t take = std::min(end, node->end()) - node->start();
    for (int64_t i = take - 1; i >= 0;) {
      const int32_t page = r->slots[i] / page_size;
      if (page != last && allocator->protect_count(page) == 0) ++count;
      last = page;
      // Jump to the last position of the previous page.
      i -= (r->slots[i] % page_size) + 1;
    }
  }
  return count;
}

void RadixTree::TouchPath(RadixNode* terminal, int bit, int64_t now_ms,
                          int32_t priority, bool count_hit) {
  for (RadixNode* node = terminal; node != nullptr && node != &root_;
       node = node->parent_) {
    Residency* r = node->residency(bit);
    const bool queued = Queued(*node, *r);
    if (queued) Dequeue(node, *r);
    r->stats.last_access_ms = std::max(r->stats.last_access_ms, now_ms);
    if (count_hit) ++r->stats.hit_count;
    r->stats.priority = std::max(r->stats.priority, priority);
    if (queued) Enqueue(node, *r);
  }
}

RadixNode* RadixTree::Split(RadixNode* child, int64_t length) {
  RadixNode* parent = child->parent_;
  auto owned = std::move(parent->children_[child->tokens_[0]]);
  auto upper_owned = std::make_unique<RadixNode>();
  RadixNode* upper = upper_owned.get();
  upper->id_ = (*next_node_id_)++;
  upper->parent_ = parent;
  upper->tree_ = this;
  upper->start_ = child->start_;
  upper->tokens_.assign(child->tokens_.begin(),
                        child->tokens_.begin() + length);
  upper->resident_mask_ = child->resident_mask_;
  upper->residency_.reserve(child->residency_.size());
  for (Residency& r : child->residency_) {
    Residency top;
    top.bit = r.bit;
    top.lock_ref = r.lock_ref;
    top.resident_children = 1;
    top.stats = r.stats;
    top.slots.assign(r.slots.begin(), r.slots.begin() + length);
    r.slots.erase(r.slots.begin(), r.slots.begin() + length);
    r.slots.shrink_to_fit();
    // A page straddling the split point is now held by both halves.
    const int32_t page_size = PageSize(r.bit);
    const int32_t boundary = top.slots.back() / page_size;
    if (boundary == r.slots.front() / page_size) {
      (*workers_)[r.bit].allocator->Ref(boundary, /*protect=*/r.lock_ref > 0);
    }
    upper->residency_.push_back(std::move(top));
  }
  child->tokens_.erase(child->tokens_.begin(), child->tokens_.begin() + length);
  child->tokens_.shrink_to_fit();
  child->start_ += length;
  child->parent_ = upper;
  upper->children_[child->tokens_[0]] = std::move(owned);
  parent->children_[upper->tokens_[0]] = std::move(upper_owned);
  ++num_nodes_;
  return upper;
}

void RadixTree::AddResidency(RadixNode* node, int bit,
                             std::vector<int32_t> slots, int64_t now_ms,
                             int32_t priority) {
  RadixNode* parent = node->parent_;
  if (parent != &root_) {
    Residency* pr = parent->residency(bit);
    if (Queued(*parent, *pr)) Dequeue(parent, *pr);
    ++pr->resident_children;
  }
  Residency r;
  r.bit = bit;
  r.stats.last_access_ms = now_ms;
  r.stats.hit_count = 0;
  r.stats.priority = priority;
  r.slots = std::move(slots);
  PageAllocator* allocator = (*workers_)[bit].allocator;
  ForEachPage(r.slots, bit,
              [&](int32_t page) { allocator->Ref(page, /*protect=*/false); });
  (*workers_)[bit].resident_tokens += static_cast<int64_t>(r.slots.size());
  const size_t index = std::popcount(node->resident_mask_ & BitsBelow(bit));
  node->resident_mask_ |= uint64_t{1} << bit;
  auto it =
      node->residency_.insert(node->residency_.begin() + index, std::move(r));
  Enqueue(node, *it);  // a new record has no resident child and no lock
}

InsertResult RadixTree::Insert(std::span<const int32_t> tokens,
                               std::span<const int32_t> slots, int bit,
                               int64_t now_ms, int32_t priority) {
  InsertResult result;
  RadixNode* node = &root_;
  int64_t pos = 0;
  bool all_resident = true;
  const int64_t n = static_cast<int64_t>(tokens.size());
  while (pos < n) {
    const auto it = node->children_.find(tokens[pos]);
    if (it == node->children_.end()) {
      RadixNode* leaf = NewNode(
          node, pos, std::vector<int32_t>(tokens.begin() + pos, tokens.end()));
      if (all_resident) result.resident_before = pos;
      all_resident = false;
      AddResidency(leaf, bit,
                   std::vector<int32_t>(slots.begin() + pos, slots.end()),
                   now_ms, priority);
      result.inserted_tokens += n - pos;
      result.terminal = leaf;
      pos = n;
      break;
    }
    RadixNode* child = it->second.get();
    const bool resident = child->resident(bit);
    const int64_t common = CommonPrefix(child->tokens_, tokens.subspan(pos));
    if (common < static_cast<int64_t>(child->tokens_.size())) {
      if (resident && pos + common == n) {
        // Everything left is already resident inside this edge.
        result.terminal = child;
        pos = n;
        break;
      }
      child = Split(child, common);
    }
    const int64_t length = static_cast<int64_t>(child->tokens_.size());
    if (!resident) {
      if (all_resident) result.resident_before = pos;
      all_resident = false;
      AddResidency(child, bit,
                   std::vector<int32_t>(slots.begin() + pos,
                                        slots.begin() + pos + length),
                   now_ms, priority);
      result.inserted_tokens += length;
    }
    pos += length;
    node = child;
    result.terminal = child;
  }
  if (all_resident) result.resident_before = n;
  TouchPath(result.terminal, bit, now_ms, priority, /*count_hit=*/false);
  return result;
}

EvictOutcome RadixTree::EvictLeaf(RadixNode* node, int bit) {
  EvictOutcome outcome;
  Residency* r = node->residency(bit);
  Dequeue(node, *r);
  PageAllocator* allocator = (*workers_)[bit].allocator;
  ForEachPage(r->slots, bit, [&](int32_t page) {
    if (allocator->Unref(page, /*protect=*/false)) ++outcome.freed_pages;
  });
  outcome.evicted_tokens = static_cast<int64_t>(r->slots.size());
  (*workers_)[bit].resident_tokens -= outcome.evicted_tokens;
  node->residency_.erase(node->residency_.begin() +
                         (r - node->residency_.data()));
  node->resident_mask_ &= ~(uint64_t{1} << bit);
  RadixNode* parent = node->parent_;
  if (parent != &root_) {
    Residency* pr = parent->residency(bit);
    --pr->resident_children;
    if (Queued(*parent, *pr)) Enqueue(parent, *pr);
  }
  if (node->resident_mask_ == 0) {
    // No worker left: the node has no resident children either (prefix
    // closure), hence no children at all.
    num_tokens_ -= static_cast<int64_t>(node->tokens_.size());
    parent->children_.erase(node->tokens_[0]);
    --num_nodes_;
  }
  return outcome;
}

void RadixTree::RemoveWorker(int bit) {
  // Nodes resident on `bit` in preorder (iterative: paths can be deep), then
  // processed in reverse so children go before their parents.
  std::vector<RadixNode*> order;
  std::vector<RadixNode*> stack = {&root_};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    if (node != &root_) order.push_back(node);
    for (auto& [key, child] : node->children_) {
      if (child->resident(bit)) stack.push_back(child.get());
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    RadixNode* node = *it;
    Residency* r = node->residency(bit);
    (*workers_)[bit].resident_tokens -= static_cast<int64_t>(r->slots.size());
    node->residency_.erase(node->residency_.begin() +
                           (r - node->residency_.data()));
    node->resident_mask_ &= ~(uint64_t{1} << bit);
    RadixNode* parent = node->parent_;
    if (parent != &root_) --parent->residency(bit)->resident_children;
    if (node->resident_mask_ == 0) {
      // No residency left: no children either (prefix closure).
      num_tokens_ -= static_cast<int64_t>(node->tokens_.size());
      parent->children_.erase(node->tokens_[0]);
      --num_nodes_;
    }
  }
}

void RadixTree::ForEachPreorder(
    const std::function<void(const RadixNode&)>& fn) const {
  std::vector<const RadixNode*> stack = {&root_};
  while (!stack.empty()) {
    const RadixNode* node = stack.back();
    stack.pop_back();
    fn(*node);
    std::vector<RadixNode*> children = node->SortedChildren();
    for (auto it = children.rbegin(); it != children.rend(); ++it) {
      stack.push_back(*it);
    }
  }
}

int64_t RadixTree::MetadataBytes() const {
  int64_t bytes = sizeof(RadixTree);
  // Unordered iterative walk: O(nodes), no sorting (Stats calls this).
  std::vector<const RadixNode*> stack = {&root_};
  while (!stack.empty()) {
    const RadixNode& node = *stack.back();
    stack.pop_back();
    for (const auto& [key, child] : node.children_) {
      stack.push_back(child.get());
    }
    bytes += sizeof(RadixNode);
    bytes += static_cast<int64_t>(node.tokens_.capacity()) * sizeof(int32_t);
    bytes +=
        static_cast<int64_t>(node.residency_.capacity()) * sizeof(Residency);
    for (const Residency& r : node.residency_) {
      bytes += static_cast<int64_t>(r.slots.capacity()) * sizeof(int32_t);
    }
    // flat_hash_map: one control byte + one slot (key, unique_ptr) per
    // bucket.
    bytes += static_cast<int64_t>(node.children_.capacity()) *
             (1 + sizeof(std::pair<int32_t, std::unique_ptr<RadixNode>>));
  }
  return bytes;
}

RadixNode* RadixTree::RestoreChild(RadixNode* parent, uint64_t id,
                                   std::vector<int32_t> tokens) {
  auto node = std::make_unique<RadixNode>();
  node->id_ = id;
  node->parent_ = parent;
  node->tree_ = this;
  node->start_ = parent->end();
  node->tokens_ = std::move(tokens);
  RadixNode* raw = node.get();
  parent->children_[raw->tokens_[0]] = std::move(node);
  ++num_nodes_;
  num_tokens_ += static_cast<int64_t>(raw->tokens_.size());
  return raw;
}

void RadixTree::RestoreResidency(RadixNode* node, Residency residency) {
  residency.lock_ref = 0;
  residency.resident_children = 0;
  const int bit = residency.bit;
  const size_t index = std::popcount(node->resident_mask_ & BitsBelow(bit));
  node->resident_mask_ |= uint64_t{1} << bit;
  node->residency_.insert(node->residency_.begin() + index,
                          std::move(residency));
}

void RadixTree::RebuildDerived() {
  std::vector<RadixNode*> order;
  std::vector<RadixNode*> stack = {&root_};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    order.push_back(node);
    for (auto& [key, child] : node->children_) stack.push_back(child.get());
  }
  for (RadixNode* node : order) {
    if (node == &root_) continue;
    for (Residency& r : node->residency_) {
      r.resident_children = 0;
      for (auto& [key, child] : node->children_) {
        if (child->resident(r.bit)) ++r.resident_children;
      }
      PageAllocator* allocator = (*workers_)[r.bit].allocator;
      ForEachPage(r.slots, r.bit,
                  [&](int32_t page) { allocator->Ref(page, false); });
      (*workers_)[r.bit].resident_tokens +=
          static_cast<int64_t>(r.slots.size());
      if (Queued(*node, r)) Enqueue(node, r);
    }
  }
}

absl::Status RadixTree::CheckInvariants(
    uint64_t model_workers,
    const absl::flat_hash_map<std::pair<uint64_t, int>, int32_t>& lock_refs)
    const {
  if (!root_.tokens_.empty() || !root_.residency_.empty() ||
      root_.parent_ != nullptr) {
    return absl::InternalError("root must be empty and permanent");
  }
  int64_t nodes = 0;
  int64_t tokens = 0;
  absl::Status status;
  std::vector<const RadixNode*> stack = {&root_};
  while (!stack.empty() && status.ok()) {
    const RadixNode* node = stack.back();
    stack.pop_back();
    const uint64_t parent_mask =
        node == &root_ ? model_workers : node->resident_mask_;
    for (const auto& [key, child_ptr] : node->children_) {
      const RadixNode* child = child_ptr.get();
      stack.push_back(child);
      ++nodes;
      tokens += static_cast<int64_t>(child->tokens_.size());
      const std::string where = absl::StrCat("node ", child->id_, " (tree ",
                                             model_, "/", cache_salt_, ")");
      if (child->tokens_.empty()) {
        return absl::InternalError(where + ": zero-length edge");
      }
      if (child->tokens_[0] != key) {
        return absl::InternalError(where + ": child key != first token");
      }
      if (child->parent_ != node || child->tree_ != this) {
        return absl::InternalError(where + ": bad parent/tree pointer");
      }
      if (child->start_ != node->end()) {
        return absl::InternalError(where + ": start != parent end");
      }
      if (child->resident_mask_ == 0) {
        return absl::InternalError(where + ": node without residency");
      }
      if ((child->resident_mask_ & ~parent_mask) != 0) {
        return absl::InternalError(where + ": residency not prefix-closed");
      }
      uint64_t mask = 0;
      int last_bit = -1;
      for (const Residency& r : child->residency_) {
        if (r.bit <= last_bit) {
          return absl::InternalError(where + ": residency not sorted");
        }
        last_bit = r.bit;
        mask |= uint64_t{1} << r.bit;
        const WorkerContext& ctx = (*workers_)[r.bit];
        if (ctx.allocator == nullptr) {
          return absl::InternalError(where + ": residency of unknown worker");
        }
        if (r.slots.size() != child->tokens_.size()) {
          return absl::InternalError(where + ": slots/tokens size mismatch");
        }
        const int32_t page_size = ctx.allocator->page_size();
        for (size_t i = 0; i < r.slots.size(); ++i) {
          const int64_t slot = r.slots[i];
          if (slot < 0 || slot >= ctx.allocator->capacity_slots()) {
            return absl::InternalError(where + ": slot out of range");
          }
          if (slot % page_size !=
              (child->start_ + static_cast<int64_t>(i)) % page_size) {
            return absl::InternalError(where + ": slot not page-consistent");
          }
        }
        if (r.lock_ref < 0) {
          return absl::InternalError(where + ": negative lock_ref");
        }
        const auto it = lock_refs.find({child->id_, r.bit});
        const int32_t expected = it == lock_refs.end() ? 0 : it->second;
        if (r.lock_ref != expected) {
          return absl::InternalError(absl::StrCat(where, ": lock_ref ",
                                                  r.lock_ref, " but ", expected,
                                                  " leases hold it"));
        }
        int32_t resident_children = 0;
        for (const auto& [k, grandchild] : child->children_) {
          if (grandchild->resident(r.bit)) ++resident_children;
        }
        if (resident_children != r.resident_children) {
          return absl::InternalError(where + ": resident_children mismatch");
        }
        const bool queued =
            ctx.queue->Contains(MakeEvictionKey(policy_, r.stats, child->id_));
        if (queued != Queued(*child, r)) {
          return absl::InternalError(
              absl::StrCat(where, ": eviction queue membership ", queued,
                           " != evictable leaf ", Queued(*child, r)));
        }
      }
      if (mask != child->resident_mask_) {
        return absl::InternalError(where + ": mask != records");
      }
    }
  }
  if (tokens != num_tokens_) {
    return absl::InternalError(absl::StrCat("tree ", model_, "/", cache_salt_,
                                            ": token count ", num_tokens_,
                                            " != ", tokens));
  }
  if (nodes != num_nodes_) {
    return absl::InternalError(absl::StrCat("tree ", model_, "/", cache_salt_,
                                            ": node count ", num_nodes_,
                                            " != ", nodes));
  }
  return status;
}

}  // namespace radixkv::cache_service

#include "router/approx_prefix_tree.h"

#include <algorithm>
#include <utility>

namespace radixkv::router {

ApproxPrefixTree::ApproxPrefixTree(int64_t capacity_tokens)
    : capacity_tokens_(std::max<int64_t>(1, capacity_tokens)),
      root_(std::make_unique<Node>()) {}

ApproxPrefixTree::~ApproxPrefixTree() = default;

int64_t ApproxPrefixTree::Match(absl::Span<const int32_t> tokens) {
  ++clock_;
  Node* node = root_.get();
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    size_t i = 0;
    while (i < child->edge.size() && pos + i < tokens.size() &&
           child->edge[i] == tokens[pos + i]) {
      ++i;
    }
    child->last_access = clock_;
    pos += i;
    if (i < child->edge.size()) break;
    node = child;
  }
  for (Node* n = node; n != nullptr; n = n->parent) n->last_access = clock_;
  return static_cast<int64_t>(pos);
}

ApproxPrefixTree::Node* ApproxPrefixTree::Split(Node* node, size_t at) {
  Node* parent = node->parent;
  std::unique_ptr<Node> owned = std::move(parent->children[node->edge[0]]);
  auto upper = std::make_unique<Node>();
  upper->edge.assign(node->edge.begin(), node->edge.begin() + at);
  upper->parent = parent;
  upper->last_access = node->last_access;
  node->edge.erase(node->edge.begin(), node->edge.begin() + at);
  node->parent = upper.get();
  Node* upper_raw = upper.get();
  upper->children[node->edge[0]] = std::move(owned);
  parent->children[upper_raw->edge[0]] = std::move(upper);
  ++num_nodes_;
  return upper_raw;
}

void ApproxPrefixTree::Insert(absl::Span<const int32_t> tokens) {
  ++clock_;
  Node* node = root_.get();
  node->last_access = clock_;
  size_t pos = 0;
  while (pos < tokens.size()) {
    auto it = node->children.find(tokens[pos]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge.assign(tokens.begin() + pos, tokens.end());
      leaf->parent = node;
      leaf->last_access = clock_;
      size_tokens_ += static_cast<int64_t>(leaf->edge.size());
      ++num_nodes_;
      node->children[tokens[pos]] = std::move(leaf);
      break;
    }
    Node* child = it->second.get();
    size_t i = 0;
    while (i < child->edge.size() && pos + i < tokens.size() &&
           child->edge[i] == tokens[pos + i]) {
      ++i;
    }
    if (i < child->edge.size()) child = Split(child, i);
    child->last_access = clock_;
    pos += i;
    node = child;
  }
  if (size_tokens_ > capacity_tokens_) {
    EvictLeastRecentlyUsed(capacity_tokens_ * 9 / 10);
  }
}

void ApproxPrefixTree::EvictLeastRecentlyUsed(int64_t target_tokens) {
  while (size_tokens_ > target_tokens) {
    // Collect the leaves, oldest first; evicting one may expose its parent.
    std::vector<Node*> leaves;
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (n != root_.get() && n->children.empty()) leaves.push_back(n);
      for (auto& [_, child] : n->children) stack.push_back(child.get());
    }
    if (leaves.empty()) return;
    std::sort(leaves.begin(), leaves.end(), [](const Node* a, const Node* b) {
      return a->last_access < b->last_access;
    });
    for (Node* leaf : leaves) {
      if (size_tokens_ <= target_tokens) return;
      size_tokens_ -= static_cast<int64_t>(leaf->edge.size());
      --num_nodes_;
      leaf->parent->children.erase(leaf->edge[0]);
    }
  }
}

}  // namespace radixkv::router

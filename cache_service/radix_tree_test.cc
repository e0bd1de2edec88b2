#include "cache_service/radix_tree.h"

#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

class RadixTreeTest : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 3;
  RadixTreeTest() {
    for (int b = 0; b < kWorkers; ++b) {
      allocators_.push_back(std::make_unique<PageAllocator>(
          PageAllocator::Create(4096, 1).value()));
      queues_.push_back(std::make_unique<EvictionQueue>());
      contexts_[b] = {allocators_[b].get(), queues_[b].get(), 0};
    }
    tree_ = std::make_unique<RadixTree>("m", "", EvictionPolicy{}, &contexts_,
                                        &next_node_id_);
  }
  // What a lease does: allocate slots, insert, drop its own references.
  InsertResult Insert(int bit, const std::vector<int32_t>& tokens,
                      int64_t now = 0) {
    const std::vector<int32_t> slots =
        allocators_[bit]->Allocate(static_cast<int32_t>(tokens.size()));
    const InsertResult r = tree_->Insert(tokens, slots, bit, now, 0);
    for (int32_t s : slots) allocators_[bit]->Unref(s, /*protect=*/true);
    return r;
  }
  std::array<int64_t, kMaxResidentWorkers> MatchAll(
      const std::vector<int32_t>& tokens) {
    std::array<int64_t, kMaxResidentWorkers> out;
    tree_->MatchAll(tokens, (1u << kWorkers) - 1, &out);
    return out;
  }
  void ExpectInvariants() {
    const absl::Status s = tree_->CheckInvariants((1u << kWorkers) - 1, locks_);
    EXPECT_TRUE(s.ok()) << s;
  }

  WorkerContexts contexts_;
  uint64_t next_node_id_ = 1;
  std::vector<std::unique_ptr<PageAllocator>> allocators_;
  std::vector<std::unique_ptr<EvictionQueue>> queues_;
  std::unique_ptr<RadixTree> tree_;
  absl::flat_hash_map<std::pair<uint64_t, int>, int32_t> locks_;
};

TEST_F(RadixTreeTest, SplitsAtTokenGranularity) {
  const InsertResult first = Insert(0, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(first.inserted_tokens, 8);
  EXPECT_EQ(first.resident_before, 0);
  const InsertResult second = Insert(0, {1, 2, 3, 9});
  EXPECT_EQ(second.inserted_tokens, 1);
  EXPECT_EQ(second.resident_before, 3);
  EXPECT_EQ(tree_->num_nodes(), 3);
  const RadixNode* top = tree_->root()->children().at(1).get();
  EXPECT_EQ(top->tokens(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(top->children().size(), 2u);
  EXPECT_EQ(top->children().at(4)->tokens(),
            (std::vector<int32_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(top->children().at(4)->start(), 3);
  const PathMatch m =
      tree_->MatchWorker(std::vector<int32_t>{1, 2, 3, 4, 5, 0}, 0);
  EXPECT_EQ(m.matched_tokens, 5);
  ASSERT_EQ(m.path.size(), 2u);
  EXPECT_EQ(RadixTree::PathSlots(m, 0, 5),
            (std::vector<int32_t>{0, 1, 2, 3, 4}));
  // Duplicates insert nothing; an insert ending inside an edge does not split.
  EXPECT_EQ(Insert(0, {1, 2, 3, 4}).inserted_tokens, 0);
  EXPECT_EQ(tree_->num_nodes(), 3);
  ExpectInvariants();
  EXPECT_EQ(contexts_[0].resident_tokens, 9);
}

TEST_F(RadixTreeTest, OneWalkAnswersEveryWorker) {
  Insert(0, {1, 2, 3, 4, 5, 6, 7, 8});
  Insert(1, {1, 2, 3, 4});
  Insert(2, {7, 7});
  EXPECT_EQ(tree_->num_nodes(), 3);  // [1..4]{0,1} [5..8]{0} [7,7]{2}
  const auto out = MatchAll({1, 2, 3, 4, 5, 6, 0});
  EXPECT_EQ(out[0], 6);
  EXPECT_EQ(out[1], 4);
  EXPECT_EQ(out[2], 0);
  EXPECT_EQ(MatchAll({7, 7, 7})[2], 2);
  ExpectInvariants();
}

TEST_F(RadixTreeTest, MatchAllAgreesWithPerWorkerMatchAndNaive) {
  std::mt19937 rng(1234);
  std::vector<std::vector<int32_t>> stored[kWorkers];
  auto random_tokens = [&](int max_len) {
    std::vector<int32_t> v(1 + rng() % max_len);
    for (int32_t& t : v) t = static_cast<int32_t>(rng() % 3);
    return v;
  };
  for (int round = 0; round < 300; ++round) {
    const int bit = static_cast<int>(rng() % kWorkers);
    stored[bit].push_back(random_tokens(12));
    Insert(bit, stored[bit].back());
    const std::vector<int32_t> query = random_tokens(14);
    const auto all = MatchAll(query);
    for (int b = 0; b < kWorkers; ++b) {
      int64_t naive = 0;
      for (const auto& s : stored[b]) {
        int64_t i = 0;
        while (i < static_cast<int64_t>(std::min(s.size(), query.size())) &&
               s[i] == query[i]) {
          ++i;
        }
        naive = std::max(naive, i);
      }
      ASSERT_EQ(all[b], naive) << "round " << round << " worker " << b;
      ASSERT_EQ(tree_->MatchWorker(query, b).matched_tokens, naive);
    }
  }
  ExpectInvariants();
}

TEST_F(RadixTreeTest, LockedPathsAreNotEvictableAndTreeShrinksToRoot) {
  Insert(0, {1, 2, 3, 4}, /*now=*/10);
  Insert(0, {1, 2, 5, 6}, /*now=*/20);
  EXPECT_EQ(queues_[0]->size(), 2u);
  RadixNode* leaf =
      tree_->MatchWorker(std::vector<int32_t>{1, 2, 5, 6}, 0).path.back();
  tree_->LockPath(leaf, 0);
  locks_[{leaf->id(), 0}] = 1;
  locks_[{leaf->parent()->id(), 0}] = 1;
  ExpectInvariants();
  EXPECT_EQ(queues_[0]->size(), 1u);  // only [3,4]
  EXPECT_EQ(allocators_[0]->protected_slots(), 4);
  EvictOutcome out = tree_->EvictLeaf(queues_[0]->Front().second, 0);
  EXPECT_EQ(out.evicted_tokens, 2);
  EXPECT_EQ(out.freed_pages, 2);
  EXPECT_TRUE(queues_[0]->empty());
  tree_->UnlockPath(leaf, 0);
  locks_.clear();
  ExpectInvariants();
  EXPECT_EQ(queues_[0]->size(), 1u);  // [5,6]
  tree_->EvictLeaf(queues_[0]->Front().second, 0);
  EXPECT_EQ(queues_[0]->size(), 1u);  // the parent [1,2] became a leaf
  tree_->EvictLeaf(queues_[0]->Front().second, 0);
  EXPECT_TRUE(tree_->empty());
  EXPECT_EQ(tree_->num_nodes(), 0);
  EXPECT_EQ(allocators_[0]->free_slots(), 4096);
  ExpectInvariants();
}

// Worker 0's leaves in eviction order (evicting them all).
std::vector<std::vector<int32_t>> EvictAll(RadixTree* tree,
                                           EvictionQueue* queue) {
  std::vector<std::vector<int32_t>> order;
  while (!queue->empty()) {
    RadixNode* node = queue->Front().second;
    order.push_back(node->tokens());
    tree->EvictLeaf(node, 0);
  }
  return order;
}

TEST_F(RadixTreeTest, HitsCountMatchesNotInsertsAndReuseLruKeepsPrefixes) {
  for (const EvictionPolicyKind kind :
       {EvictionPolicyKind::kLru, EvictionPolicyKind::kReuseLru}) {
    SCOPED_TRACE(EvictionPolicyName(kind));
    tree_ = std::make_unique<RadixTree>(
        "m", "", EvictionPolicy{kind, /*reuse_bonus_ms=*/100}, &contexts_,
        &next_node_id_);
    // Request A: prefix [1,2,3] + tail [4]. Request B matches the prefix
    // (an Acquire's touch) and adds tail [5]. Then an unrelated [9,9].
    Insert(0, {1, 2, 3, 4}, /*now=*/10);
    const PathMatch m = tree_->MatchWorker(std::vector<int32_t>{1, 2, 3, 5}, 0);
    ASSERT_EQ(m.matched_tokens, 3);
    RadixNode* prefix = tree_->LockPrefix(m.path.back(), 3, 0);
    tree_->TouchPath(prefix, 0, /*now_ms=*/20, 0, /*count_hit=*/true);
    tree_->UnlockPath(prefix, 0);
    Insert(0, {1, 2, 3, 5}, /*now=*/20);
    Insert(0, {9, 9}, /*now=*/30);
    ASSERT_EQ(prefix->tokens(), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(prefix->residency(0)->stats.hit_count, 1);
    for (const auto& [token, child] : prefix->children()) {
      EXPECT_EQ(child->residency(0)->stats.hit_count, 0) << token;
    }
    ExpectInvariants();
    using V = std::vector<int32_t>;
    if (kind == EvictionPolicyKind::kLru) {
      // The prefix, last used at 20, goes before [9,9] (30).
      EXPECT_EQ(EvictAll(tree_.get(), queues_[0].get()),
                (std::vector<V>{{4}, {5}, {1, 2, 3}, {9, 9}}));
    } else {
      // Reused, it counts as used at 120: the unused [9,9] goes first.
      EXPECT_EQ(EvictAll(tree_.get(), queues_[0].get()),
                (std::vector<V>{{4}, {5}, {9, 9}, {1, 2, 3}}));
    }
    EXPECT_TRUE(tree_->empty());
  }
}

TEST_F(RadixTreeTest, RemoveWorkerKeepsOtherWorkers) {
  Insert(0, {1, 2, 3, 4, 5, 6, 7, 8});
  Insert(1, {1, 2, 3, 4});
  tree_->RemoveWorker(0);
  EXPECT_EQ(tree_->num_nodes(), 1);
  EXPECT_EQ(contexts_[0].resident_tokens, 0);
  const auto out = MatchAll({1, 2, 3, 4, 5});
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], 4);
  tree_->RemoveWorker(1);
  EXPECT_TRUE(tree_->empty());
}

// A lease locks only its prefix: LockPrefix splits the edge at the end of
// the prefix; PagesProtectedByLockPrefix predicts, without changing the
// tree, how many evictable pages the lock takes away.
TEST_F(RadixTreeTest, LockPrefixSplitsAndLocksOnlyThePrefix) {
  Insert(0, {1, 2, 3, 4, 5, 6, 7, 8});  // slots 0..7
  PageAllocator& alloc = *allocators_[0];
  ASSERT_EQ(alloc.num_evictable_pages(), 8);
  const PathMatch m = tree_->MatchWorker(std::vector<int32_t>{1, 2, 3, 9}, 0);
  ASSERT_EQ(m.matched_tokens, 3);
  RadixNode* edge = m.path.back();
  EXPECT_EQ(tree_->PagesProtectedByLockPrefix(edge, 3, 0), 3);
  EXPECT_EQ(tree_->num_nodes(), 1);  // read-only
  EXPECT_EQ(next_node_id_, 2u);

  RadixNode* upper = tree_->LockPrefix(edge, 3, 0);
  ASSERT_NE(upper, nullptr);
  EXPECT_EQ(upper->tokens(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(upper->residency(0)->lock_ref, 1);
  EXPECT_EQ(edge->tokens(), (std::vector<int32_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(edge->parent(), upper);
  EXPECT_EQ(edge->residency(0)->lock_ref, 0);
  EXPECT_EQ(alloc.num_protected_pages(), 3);  // exactly the prediction
  EXPECT_EQ(alloc.num_evictable_pages(), 5);
  EXPECT_EQ(queues_[0]->size(), 1u);  // the rest of the edge is evictable
  locks_[{upper->id(), 0}] = 1;
  ExpectInvariants();

  // Above a locked node nothing more gets protected.
  EXPECT_EQ(tree_->PagesProtectedByLockPrefix(edge, 5, 0), 2);
  EXPECT_EQ(tree_->PagesProtectedByLockPrefix(edge, 2, 0), 0);
  // A prefix ending at a node boundary is found by walking up, no split.
  EXPECT_EQ(tree_->LockPrefix(edge, 3, 0), upper);
  EXPECT_EQ(upper->residency(0)->lock_ref, 2);
  EXPECT_EQ(tree_->num_nodes(), 2);
  EXPECT_EQ(tree_->LockPrefix(edge, 0, 0), nullptr);
  locks_[{upper->id(), 0}] = 2;
  ExpectInvariants();
  tree_->UnlockPath(upper, 0);
  tree_->UnlockPath(upper, 0);
  locks_.clear();
  ExpectInvariants();
  EXPECT_EQ(alloc.num_protected_pages(), 0);
  EXPECT_EQ(alloc.num_evictable_pages(), 8);
}

}  // namespace
}  // namespace radixkv::cache_service

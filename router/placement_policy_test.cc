#include "router/placement_policy.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

WorkerCandidate Worker(const std::string& id, int64_t matched, int64_t load,
                       int64_t epoch = 1) {
  WorkerCandidate c;
  c.worker_id = id;
  c.address = id + ":1";
  c.epoch = epoch;
  c.matched_tokens = matched;
  c.load_tokens = load;
  return c;
}

std::vector<int32_t> Prompt(int n, int32_t start = 0) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), start);
  return p;
}

std::unique_ptr<PlacementPolicy> Make(const std::string& name,
                                      CacheAwareOptions options = {}) {
  auto p = CreatePlacementPolicy(name, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TEST(PlacementPolicyTest, UnknownNameAndEmptyCandidatesAreErrors) {
  EXPECT_EQ(CreatePlacementPolicy("random", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const std::string& name : PlacementPolicyNames()) {
    auto policy = Make(name);
    EXPECT_EQ(policy->name(), name);
    std::vector<int32_t> tokens = Prompt(4);
    PlacementInput in;
    in.tokens = tokens;
    EXPECT_EQ(policy->Choose(in).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(PlacementPolicyTest, CacheAwarePrefersTheWorkerHoldingThePrefix) {
  auto policy = Make("cache_aware");
  std::vector<int32_t> tokens = Prompt(100);
  PlacementInput in;
  in.tokens = tokens;
  in.candidates = {Worker("a", 0, 0), Worker("b", 80, 30)};
  auto d = policy->Choose(in);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index, 1);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kPrefixHit);
  EXPECT_EQ(d->predicted_hit_tokens, 80);
  EXPECT_DOUBLE_EQ(d->score, 20.0 + 0.25 * 30.0);  // load_weight 0.25
}

TEST(PlacementPolicyTest, CacheAwareTradesPrefixForLoad) {
  auto policy = Make("cache_aware");
  std::vector<int32_t> tokens = Prompt(100);
  PlacementInput in;
  in.tokens = tokens;
  // b saves 80 prefill tokens but carries 390 more tokens of load, 97.5
  // at the default load_weight 0.25 (below the imbalance guard's 1024).
  in.candidates = {Worker("a", 0, 10), Worker("b", 80, 400)};
  auto d = policy->Choose(in);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index, 0);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kCostTradeoff);
  EXPECT_EQ(d->predicted_hit_tokens, 0);
}

TEST(PlacementPolicyTest, LoadGuardOverridesAHotPrefix) {
  CacheAwareOptions options;
  options.load_weight = 0.0;  // score by prefix only...
  options.balance_abs_tokens = 50;
  options.balance_rel_ratio = 2.0;
  auto policy = Make("cache_aware", options);
  std::vector<int32_t> tokens = Prompt(100);
  PlacementInput in;
  in.tokens = tokens;
  in.candidates = {Worker("a", 99, 40), Worker("b", 0, 0)};
  auto d = policy->Choose(in);  // 40 - 0 <= 50: no guard
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index, 0);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kPrefixHit);
  EXPECT_EQ(d->predicted_hit_tokens, 99);
  in.candidates = {Worker("a", 99, 151), Worker("b", 0, 100)};
  d = policy->Choose(in);  // 51 > 50 but 151 <= 2 * 100: no guard
  EXPECT_EQ(d->index, 0);
  in.candidates = {Worker("a", 99, 201), Worker("b", 0, 100)};
  d = policy->Choose(in);  // ...both thresholds passed: the guard spills
  EXPECT_EQ(d->index, 1);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kLoadGuard);
  EXPECT_EQ(d->predicted_hit_tokens, 0);
}

TEST(PlacementPolicyTest, PredictedHitLeavesOneTokenToCompute) {
  auto policy = Make("cache_aware");
  std::vector<int32_t> tokens = Prompt(10);
  PlacementInput in;
  in.tokens = tokens;
  in.candidates = {Worker("a", 10, 0)};
  auto d = policy->Choose(in);
  EXPECT_EQ(d->predicted_hit_tokens, 9);
  in.prefix_cache_disabled = true;
  d = policy->Choose(in);
  EXPECT_EQ(d->predicted_hit_tokens, 0);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kNoPrefix);
}

TEST(PlacementPolicyTest, NoPrefixSpreadsEqualWorkersFairly) {
  CacheAwareOptions options;
  options.miss_affinity_tokens = 0;  // pure load, rotating ties
  auto policy = Make("cache_aware", options);
  std::vector<int32_t> tokens = Prompt(10);
  PlacementInput in;
  in.tokens = tokens;
  in.candidates = {Worker("a", 0, 0), Worker("b", 0, 0), Worker("c", 0, 0)};
  std::vector<int> count(3, 0);
  for (int i = 0; i < 30; ++i) {
    auto d = policy->Choose(in);
    EXPECT_EQ(d->kind, PlacementDecisionKind::kNoPrefix);
    ++count[d->index];
  }
  EXPECT_EQ(count, std::vector<int>({10, 10, 10}));
}

TEST(PlacementPolicyTest, MissAffinitySendsAPromptFamilyHomeWithinSlack) {
  auto policy = Make("cache_aware");  // 32 tokens, slack 64
  std::vector<int> homes(3, 0);
  std::vector<int> count(3, 0);
  for (int family = 0; family < 60; ++family) {
    std::vector<int32_t> tokens = Prompt(40, family * 1000);
    PlacementInput in;
    in.tokens = tokens;
    in.candidates = {Worker("a", 0, 0), Worker("b", 0, 0), Worker("c", 0, 0)};
    auto first = policy->Choose(in);
    ++count[first->index];
    // Same first 32 tokens, different tail: same home, whatever the rotation.
    tokens[39] = -5;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(policy->Choose(in)->index, first->index);
    }
    // The home is overloaded beyond the slack: least loaded instead.
    in.candidates[first->index].load_tokens = 300;
    auto spilled = policy->Choose(in);
    EXPECT_NE(spilled->index, first->index);
    EXPECT_EQ(spilled->kind, PlacementDecisionKind::kNoPrefix);
  }
  for (int c : count) EXPECT_GE(c, 8);  // 60 families spread over 3 workers
}

WorkerCandidate WithMemory(WorkerCandidate c, int64_t capacity, int64_t free,
                           int64_t evictable) {
  c.capacity_slots = capacity;
  c.free_slots = free;
  c.evictable_slots = evictable;
  c.protected_slots = capacity - free - evictable;
  return c;
}

TEST(PlacementPolicyTest, MemoryAwareMissAvoidsAPoolFullOfHotData) {
  const CacheAwareOptions options;  // memory_weight 1, load_weight 0.25
  std::vector<int32_t> tokens = Prompt(417);
  PlacementInput in;
  in.tokens = tokens;
  // Equal load, no match; both pools nearly full (free 64 of 3072) of
  // evictable data, but on a 2,900 of it was written recently (hot).
  in.candidates = {WithMemory(Worker("a", 0, 100), 3072, 64, 3008),
                   WithMemory(Worker("b", 0, 100), 3072, 64, 3008)};
  const std::vector<int64_t> hits = {0, 0};
  for (uint64_t rotation : {0, 1}) {
    const PlacementDecision d =
        ChooseByPrefixAndLoad(in, hits, options, rotation, {2900, 0});
    EXPECT_EQ(d.index, 1) << rotation;
    EXPECT_TRUE(d.memory_placed);
    EXPECT_EQ(d.kind, PlacementDecisionKind::kNoPrefix);
    EXPECT_DOUBLE_EQ(d.score, 417.0 + 0.25 * 100.0);
    // Mirrored: the hot one is b.
    EXPECT_EQ(
        ChooseByPrefixAndLoad(in, hits, options, rotation, {0, 2900}).index, 0);
  }
  // Protected slots are no room either: a's pool is held by running leases.
  in.candidates[0] = WithMemory(Worker("a", 0, 100), 3072, 64, 8);
  EXPECT_EQ(ChooseByPrefixAndLoad(in, hits, options, 0, {0, 2000}).index, 1);
  // Room (2,900 tokens) outweighs a load difference of 500 tokens...
  in.candidates = {WithMemory(Worker("a", 0, 100), 3072, 64, 3008),
                   WithMemory(Worker("b", 0, 600), 3072, 64, 3008)};
  EXPECT_EQ(ChooseByPrefixAndLoad(in, hits, options, 0, {2900, 0}).index, 1);
  // ... but b is not eligible when its load exceeds the least loaded's by
  // more than balance_abs_tokens (1,024): the rendezvous home within its
  // 64-token slack, i.e. a (b, loaded, is never within it).
  in.candidates[1].load_tokens = 3100;
  const PlacementDecision loaded =
      ChooseByPrefixAndLoad(in, hits, options, 0, {2900, 0});
  EXPECT_EQ(loaded.index, 0);
  EXPECT_FALSE(loaded.memory_placed);
  // Both pools have room for the prompt: memory does not discriminate, the
  // rendezvous home applies (the same for both hot vectors).
  in.candidates[1].load_tokens = 100;
  const PlacementDecision both =
      ChooseByPrefixAndLoad(in, hits, options, 0, {0, 0});
  EXPECT_FALSE(both.memory_placed);
  EXPECT_EQ(ChooseByPrefixAndLoad(in, hits, options, 1, {100, 0}).index,
            both.index);
  // memory_weight 0: the rendezvous home, the same for both hot vectors.
  CacheAwareOptions no_memory;
  no_memory.memory_weight = 0;
  in.candidates[1].load_tokens = 100;
  EXPECT_EQ(ChooseByPrefixAndLoad(in, hits, no_memory, 0, {2900, 0}).index,
            ChooseByPrefixAndLoad(in, hits, no_memory, 0, {0, 2900}).index);
}

TEST(PlacementPolicyTest, CacheAwareHomesNewPrefixesByRoomAndHitsStayPut) {
  CacheAwareOptions options;
  options.load_weight = 0.0;  // hits win on prefix alone; the guard remains
  auto policy = Make("cache_aware", options);
  // Pools of 1,024 slots, empty. Miss 1 (a new 600-token prefix) fits both:
  // its rendezvous home. The router counts the 600 + 16 tokens it will write
  // there as hot, so miss 2 (another new prefix) fits only the other worker
  // (room 408 + 616 - 616 vs 1,024) and goes there, whatever the rotation.
  std::vector<int32_t> first = Prompt(600, 0);
  std::vector<int32_t> second = Prompt(600, 10000);
  PlacementInput in;
  in.max_new_tokens = 16;
  in.tokens = first;
  in.candidates = {WithMemory(Worker("a", 0, 0), 1024, 1024, 0),
                   WithMemory(Worker("b", 0, 0), 1024, 1024, 0)};
  auto d1 = policy->Choose(in);
  EXPECT_FALSE(d1->memory_placed);
  const int home1 = d1->index;
  const int other = 1 - home1;
  in.candidates[home1].free_slots = 1024 - 616;
  in.candidates[home1].evictable_slots = 616;
  in.tokens = second;
  auto d2 = policy->Choose(in);
  EXPECT_EQ(d2->index, other);
  EXPECT_EQ(d2->kind, PlacementDecisionKind::kNoPrefix);
  EXPECT_TRUE(d2->memory_placed);
  // The second prefix was evicted (no match anywhere) and its worker has no
  // room now while home1 has: the family's miss still returns to where it
  // was homed (no migration).
  in.candidates[other].free_slots = 0;
  in.candidates[other].evictable_slots = 512;
  in.candidates[home1].free_slots = 1024;
  in.candidates[home1].evictable_slots = 0;
  auto again = policy->Choose(in);
  EXPECT_EQ(again->index, other);
  EXPECT_EQ(again->kind, PlacementDecisionKind::kNoPrefix);
  // ... unless it is loaded beyond the 64-token slack.
  in.candidates[other].load_tokens = 200;
  EXPECT_EQ(policy->Choose(in)->index, home1);
  in.candidates[other].load_tokens = 0;
  EXPECT_EQ(policy->Choose(in)->index, other);  // the home was kept
  // A hit goes to the holder although the other worker has more room.
  in.tokens = first;
  in.candidates[home1].matched_tokens = 584;
  in.candidates[home1].free_slots = 0;
  in.candidates[home1].evictable_slots = 1024;
  in.candidates[other].free_slots = 1024;
  in.candidates[other].evictable_slots = 0;
  auto hit = policy->Choose(in);
  EXPECT_EQ(hit->index, home1);
  EXPECT_EQ(hit->kind, PlacementDecisionKind::kPrefixHit);
  EXPECT_EQ(hit->predicted_hit_tokens, 584);
  // ... unless the imbalance guard trips (load 3,000 vs 100: > 1,024 and
  // > 2x).
  in.candidates[home1].load_tokens = 3000;
  in.candidates[other].load_tokens = 100;
  auto guarded = policy->Choose(in);
  EXPECT_EQ(guarded->index, other);
  EXPECT_EQ(guarded->kind, PlacementDecisionKind::kLoadGuard);
}

TEST(PlacementPolicyTest, RoundRobinCyclesAndLeastLoadPicksMinimum) {
  auto rr = Make("round_robin");
  std::vector<int32_t> tokens = Prompt(10);
  PlacementInput in;
  in.tokens = tokens;
  in.candidates = {Worker("a", 9, 0), Worker("b", 0, 500)};
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back(rr->Choose(in)->index);
  EXPECT_EQ(order, std::vector<int>({0, 1, 0, 1}));
  EXPECT_EQ(rr->Choose(in)->kind, PlacementDecisionKind::kRoundRobin);
  auto ll = Make("least_load");
  in.candidates = {Worker("a", 9, 70), Worker("b", 0, 20), Worker("c", 0, 50)};
  auto d = ll->Choose(in);
  EXPECT_EQ(d->index, 1);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kLeastLoad);
  EXPECT_EQ(d->predicted_hit_tokens, 0);
}

TEST(PlacementPolicyTest, ApproxTreeLearnsOnlyFromWhatItRouted) {
  auto policy = Make("approx_tree");
  std::vector<int32_t> first = Prompt(50);
  PlacementInput in;
  in.tokens = first;
  // The exact residency says b holds everything; approx_tree must not see it.
  in.candidates = {Worker("a", 0, 0), Worker("b", 50, 0)};
  auto d = policy->Choose(in);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, PlacementDecisionKind::kNoPrefix);
  EXPECT_EQ(d->predicted_hit_tokens, 0);
  policy->OnDispatched("a", 1, first);
  std::vector<int32_t> second = first;
  second.insert(second.end(), {500, 501, 502});
  in.tokens = second;
  d = policy->Choose(in);
  EXPECT_EQ(d->index, 0);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kPrefixHit);
  EXPECT_EQ(d->predicted_hit_tokens, 50);
  // Worker a restarted (new epoch): its approximate tree is forgotten.
  in.candidates = {Worker("a", 0, 0, /*epoch=*/2), Worker("b", 0, 0)};
  d = policy->Choose(in);
  EXPECT_EQ(d->predicted_hit_tokens, 0);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kNoPrefix);
}

TEST(PlacementPolicyTest, CacheAwareFollowsPrefixesInFlightUntilFinished) {
  CacheAwareOptions options;
  options.finished_affinity_grace = absl::Milliseconds(50);
  auto policy = Make("cache_aware", options);
  std::vector<int32_t> first = Prompt(60);
  std::vector<int32_t> second = Prompt(60);
  second[50] = 999;  // shares 50 tokens with `first`
  PlacementInput in;
  in.tokens = second;
  in.candidates = {Worker("a", 0, 0), Worker("b", 0, 0)};
  policy->OnDispatched("b", 1, first);
  auto d = policy->Choose(in);
  EXPECT_EQ(d->index, 1);
  EXPECT_EQ(d->kind, PlacementDecisionKind::kPrefixHit);
  EXPECT_EQ(d->predicted_hit_tokens, 50);
  // The exact residency wins when longer.
  in.candidates = {Worker("a", 55, 0), Worker("b", 0, 0)};
  d = policy->Choose(in);
  EXPECT_EQ(d->index, 0);
  EXPECT_EQ(d->predicted_hit_tokens, 55);
  // Finished: it still attracts during the grace period (the worker's
  // Commit may land just after the last chunk), then only Match speaks.
  policy->OnFinished("b", 1, first);
  in.candidates = {Worker("a", 0, 0), Worker("b", 0, 0)};
  EXPECT_EQ(policy->Choose(in)->predicted_hit_tokens, 50);
  absl::SleepFor(absl::Milliseconds(60));
  in.candidates = {Worker("a", 0, 0), Worker("b", 0, 0)};
  EXPECT_EQ(policy->Choose(in)->predicted_hit_tokens, 0);
  // A restarted worker (new epoch) has nothing in flight.
  policy->OnDispatched("b", 1, first);
  in.candidates = {Worker("a", 0, 0), Worker("b", 0, 0, /*epoch=*/2)};
  EXPECT_EQ(policy->Choose(in)->predicted_hit_tokens, 0);
}

TEST(PlacementPolicyTest, DecisionNamesAreStable) {
  EXPECT_EQ(PlacementDecisionName(PlacementDecisionKind::kPrefixHit),
            "prefix_hit");
  EXPECT_EQ(PlacementDecisionName(PlacementDecisionKind::kLoadGuard),
            "load_guard");
  EXPECT_EQ(PlacementDecisionName(PlacementDecisionKind::kCostTradeoff),
            "cost_tradeoff");
}

}  // namespace
}  // namespace radixkv::router

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
  EXPECT_DOUBLE_EQ(d->score, 20.0 + 30.0);
}

TEST(PlacementPolicyTest, CacheAwareTradesPrefixForLoad) {
  auto policy = Make("cache_aware");
  std::vector<int32_t> tokens = Prompt(100);
  PlacementInput in;
  in.tokens = tokens;
  // b saves 80 prefill tokens but carries 90 more tokens of load.
  in.candidates = {Worker("a", 0, 10), Worker("b", 80, 100)};
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

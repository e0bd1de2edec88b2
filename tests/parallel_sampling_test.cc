// Parallel sampling end to end: GenerateRequest.n through the router to a
// CPU worker (embedded model) and the real cache service (its Fork,
// copy-on-write Grow and fork-family Commit checks), on loopback:
//   - n = 4 greedy: 4 streams with distinct sample_index, each equal to the
//     n = 1 greedy output, on one worker; every lease given back;
//   - n = 4 seeded, temperature > 0: reproducible, samples differ, sample 0
//     equals n = 1 with the same seed;
//   - logprobs: one entry per token, the sampled token first under greedy;
//   - n out of range: INVALID_ARGUMENT.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/router_e2e_client.h"

namespace radixkv::tests {
namespace {

struct Samples {
  grpc::Status status;
  std::map<int32_t, std::vector<int32_t>> tokens;  // by sample_index
  std::map<int32_t, std::vector<v1::TokenLogprobs>> logprobs;
  std::map<int32_t, int> finished;  // finished chunks per sample
  std::set<std::string> workers;
};

Samples GenerateAll(v1::Router::Stub* router,
                    const v1::GenerateRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  auto reader = router->Generate(&ctx, request);
  Samples out;
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    auto& tokens = out.tokens[chunk.sample_index()];
    tokens.insert(tokens.end(), chunk.token_ids().begin(),
                  chunk.token_ids().end());
    auto& lp = out.logprobs[chunk.sample_index()];
    lp.insert(lp.end(), chunk.logprobs().begin(), chunk.logprobs().end());
    if (chunk.finished()) ++out.finished[chunk.sample_index()];
    out.workers.insert(chunk.worker_id());
  }
  out.status = reader->Finish();
  return out;
}

v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int n,
                            int max_new_tokens) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  r.set_n(n);
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

class ParallelSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    router::LocalClusterOptions options = TestClusterOptions("parallel");
    options.use_redis = false;
    auto cluster = router::LocalCluster::Start(std::move(options));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // No lease is left once every stream ended (the service counts them).
  static void ExpectNoLeases() {
    for (int i = 0; i < 50; ++i) {
      if (CacheStats(cluster_->cache_service_address()).active_leases() == 0) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << "leases left behind";
  }

  static router::LocalCluster* cluster_;
};

router::LocalCluster* ParallelSamplingTest::cluster_ = nullptr;

TEST_F(ParallelSamplingTest, GreedySamplesEqualTheSingleGreedyOutput) {
  ASSERT_NE(cluster_, nullptr);
  auto router = RouterStub(cluster_->router_address());
  // 37 tokens: the fork point (36) ends inside a 16-token page, so every
  // sample's first Grow copies the shared partial page.
  const std::vector<int32_t> prompt =
      Concat({1}, LicenseTokens("Apache-2.0", 0, 36));
  Samples single = GenerateAll(router.get(), Request(prompt, 1, 20));
  ASSERT_TRUE(single.status.ok()) << single.status.error_message();
  ASSERT_EQ(single.tokens[0].size(), 20u);
  Samples four = GenerateAll(router.get(), Request(prompt, 4, 20));
  ASSERT_TRUE(four.status.ok()) << four.status.error_message();
  ASSERT_EQ(four.tokens.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(four.tokens[i], single.tokens[0]) << "sample " << i;
    EXPECT_EQ(four.finished[i], 1) << "sample " << i;
  }
  EXPECT_EQ(four.workers.size(), 1u);  // placed whole on one worker
  ExpectNoLeases();
}

TEST_F(ParallelSamplingTest, SeededSamplesAreReproducible) {
  ASSERT_NE(cluster_, nullptr);
  auto router = RouterStub(cluster_->router_address());
  const std::vector<int32_t> prompt =
      Concat({1}, LicenseTokens("GPL-3", 50, 60));
  v1::GenerateRequest r = Request(prompt, 4, 16);
  // The embedded demo model is sharply peaked: a high temperature makes the
  // samples' draws differ.
  r.mutable_sampling()->set_temperature(50.0f);
  r.mutable_sampling()->set_seed(1234);
  Samples a = GenerateAll(router.get(), r);
  Samples b = GenerateAll(router.get(), r);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  ASSERT_EQ(a.tokens.size(), 4u);
  EXPECT_EQ(a.tokens, b.tokens);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [i, t] : a.tokens) distinct.insert(t);
  EXPECT_GT(distinct.size(), 1u) << "the samples' streams are not independent";
  r.set_n(1);
  Samples one = GenerateAll(router.get(), r);
  ASSERT_TRUE(one.status.ok());
  EXPECT_EQ(one.tokens[0], a.tokens[0]);
  ExpectNoLeases();
}

TEST_F(ParallelSamplingTest, LogprobsComeWithEveryToken) {
  ASSERT_NE(cluster_, nullptr);
  auto router = RouterStub(cluster_->router_address());
  v1::GenerateRequest r =
      Request(Concat({1}, LicenseTokens("MPL-2.0", 10, 30)), 2, 8);
  r.mutable_sampling()->set_logprobs(5);
  Samples s = GenerateAll(router.get(), r);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_EQ(s.tokens.size(), 2u);
  for (const auto& [i, tokens] : s.tokens) {
    const auto& lps = s.logprobs[i];
    ASSERT_EQ(lps.size(), tokens.size());
    for (size_t k = 0; k < tokens.size(); ++k) {
      EXPECT_EQ(lps[k].sampled().token_id(), tokens[k]);
      EXPECT_LE(lps[k].sampled().logprob(), 0.0);
      ASSERT_EQ(lps[k].top_size(), 5);
      // Greedy: the sampled token is the most likely one.
      EXPECT_EQ(lps[k].top(0).token_id(), tokens[k]);
      EXPECT_DOUBLE_EQ(lps[k].top(0).logprob(), lps[k].sampled().logprob());
    }
  }
}

TEST_F(ParallelSamplingTest, OutOfRangeNIsInvalidArgument) {
  ASSERT_NE(cluster_, nullptr);
  auto router = RouterStub(cluster_->router_address());
  Samples s = GenerateAll(router.get(), Request({1, 2, 3}, 65, 4));
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.status.error_message().find("n must be in [1, 64]"),
            std::string::npos)
      << s.status.error_message();
}

}  // namespace
}  // namespace radixkv::tests

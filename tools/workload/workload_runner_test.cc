#include "tools/workload/workload_runner.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "radixkv/v1/router.grpc.pb.h"

namespace radixkv::router {
namespace {

TEST(WorkloadRunnerTest, PercentilesInterpolateLinearly) {
  std::vector<double> v;
  for (int i = 100; i >= 0; --i) v.push_back(i);  // 0..100, unsorted
  Percentiles p = ComputePercentiles(v);
  EXPECT_DOUBLE_EQ(p.p50, 50);
  EXPECT_DOUBLE_EQ(p.p90, 90);
  EXPECT_DOUBLE_EQ(p.p99, 99);
  p = ComputePercentiles({4, 2});
  EXPECT_DOUBLE_EQ(p.p50, 3);
  EXPECT_DOUBLE_EQ(ComputePercentiles({}).p99, 0);
}

TEST(WorkloadRunnerTest, ParsesHistogramsAndInterpolatesQuantiles) {
  const std::string text =
      "# TYPE radixkv_router_routing_latency_seconds histogram\n"
      "radixkv_router_routing_latency_seconds_bucket{policy=\"cache_aware\","
      "le=\"0.001\"} 50\n"
      "radixkv_router_routing_latency_seconds_bucket{policy=\"cache_aware\","
      "le=\"0.002\"} 90\n"
      "radixkv_router_routing_latency_seconds_bucket{policy=\"cache_aware\","
      "le=\"+Inf\"} 100\n"
      "radixkv_router_routing_latency_seconds_bucket{policy=\"round_robin\","
      "le=\"0.001\"} 7\n";
  auto b = ParseRoutingLatencyBuckets(text, "cache_aware");
  ASSERT_EQ(b.size(), 3u);
  EXPECT_DOUBLE_EQ(b[0.001], 50);
  EXPECT_TRUE(std::isinf(b.rbegin()->first));
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 0.25), 0.0005);
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 0.70), 0.0015);
  EXPECT_DOUBLE_EQ(HistogramQuantile(b, 0.99), 0.002);  // +Inf bucket
  EXPECT_EQ(ParseRoutingLatencyBuckets(text, "round_robin").size(), 1u);
  EXPECT_DOUBLE_EQ(HistogramQuantile({}, 0.5), -1);
}

TEST(WorkloadRunnerTest, MergedRunsGiveTheQuantileOfAllDecisions) {
  // Run 1: 99 fast decisions (<= 1 ms) and 1 slow (<= 5 ms); its p99 lies in
  // the slow bucket. Run 2: 100 fast ones. Together 199 of 200 are fast.
  std::map<double, double> run1 = {{0.001, 99}, {0.005, 100}};
  const std::map<double, double> run2 = {{0.001, 100}, {0.005, 100}};
  std::map<double, double> all;
  MergeRoutingLatencyBuckets(run1, &all);
  MergeRoutingLatencyBuckets(run2, &all);
  EXPECT_DOUBLE_EQ(all[0.001], 199);
  EXPECT_DOUBLE_EQ(all[0.005], 200);
  EXPECT_DOUBLE_EQ(HistogramQuantile(run1, 0.99), 0.001);
  EXPECT_GT(HistogramQuantile(run1, 0.995), 0.001);
  EXPECT_DOUBLE_EQ(HistogramQuantile(all, 0.99), 0.001 * 198 / 199);
}

TEST(WorkloadRunnerTest, RunConfigsParse) {
  auto c = ParseRunConfigs("cache_aware,cache_off,approx_tree");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 3u);
  EXPECT_FALSE((*c)[1].prefix_cache);
  EXPECT_EQ((*c)[1].policy, "cache_aware");
  EXPECT_EQ((*c)[2].policy, "approx_tree");
  EXPECT_EQ(ParseRunConfigs("fastest").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadRunnerTest, SummarizeAggregatesOkRequestsAndCountsErrors) {
  RunResult r;
  r.duration_s = 2.0;
  RequestRecord a;
  a.ttft_s = 0.1;
  a.duration_s = 0.5;
  a.prompt_tokens = 100;
  a.cached_tokens = 60;
  a.completion_tokens = 5;  // TPOT = 0.4 s / 4 = 100 ms
  a.worker_id = "w0";
  RequestRecord b = a;
  b.worker_id = "w1";
  b.cached_tokens = 0;
  RequestRecord bad;
  bad.status = "UNAVAILABLE";
  r.records = {a, b, bad};
  Summarize(&r);
  EXPECT_EQ(r.ok, 2);
  EXPECT_EQ(r.errors, 1);
  EXPECT_EQ(r.errors_by_status["UNAVAILABLE"], 1);
  EXPECT_EQ(r.prompt_tokens, 200);
  EXPECT_EQ(r.cached_tokens, 60);
  EXPECT_EQ(r.prefill_tokens_computed, 140);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.3);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s, 5.0);
  EXPECT_NEAR(r.tpot_ms.p50, 100.0, 1e-9);
  EXPECT_NEAR(r.ttft_ms.p99, 100.0, 1e-9);
  EXPECT_EQ(r.requests_by_worker["w0"], 1);
  const std::string table = FormatComparison({r});
  EXPECT_NE(table.find("30.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("2 / 1 (UNAVAILABLE:1)"), std::string::npos) << table;
  EXPECT_NE(FormatCsv({r}).find(",140,0.3000,"), std::string::npos);
  EXPECT_NE(FormatJson({r}).find("\"prefill_tokens_computed\": 140"),
            std::string::npos);
}

// A router that answers every prompt with [len(prompt), 7, 7] and reports
// the first half of the prompt as cached.
class FakeRouter final : public radixkv::v1::Router::Service {
 public:
  grpc::Status Generate(
      grpc::ServerContext* ctx, const radixkv::v1::GenerateRequest* req,
      grpc::ServerWriter<radixkv::v1::GenerateResponse>* writer) override {
    {
      absl::MutexLock l(&mu_);
      prompts_.emplace_back(req->token_ids().ids().begin(),
                            req->token_ids().ids().end());
      auto md = ctx->client_metadata().find("radixkv-placement-policy");
      if (md != ctx->client_metadata().end()) {
        policies_.emplace_back(md->second.data(), md->second.size());
      }
      disable_.push_back(req->disable_prefix_cache());
      // Hold requests until `hold_until_in_flight` have been open at once (or
      // 10 s), so the test sees how many streams the runner opens.
      ++in_flight_;
      peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](FakeRouter* self) {
                                 return self->peak_in_flight_ >=
                                        self->hold_until_in_flight_;
                               },
                               this),
                           absl::Seconds(10));
      --in_flight_;
    }
    const int n = req->token_ids().ids_size();
    radixkv::v1::GenerateResponse r;
    r.add_token_ids(n);
    r.set_worker_id(n % 2 ? "w1" : "w0");
    writer->Write(r);
    r.clear_token_ids();
    r.add_token_ids(7);
    r.add_token_ids(7);
    r.set_finished(true);
    r.mutable_usage()->set_prompt_tokens(n);
    r.mutable_usage()->set_cached_tokens(n / 2);
    r.mutable_usage()->set_completion_tokens(3);
    writer->Write(r);
    return grpc::Status::OK;
  }
  absl::Mutex mu_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::string> policies_;
  std::vector<bool> disable_;
  int hold_until_in_flight_ = 0;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
};

// Serves `fake` on a free loopback port and points `options` at it (no
// progress line).
std::unique_ptr<grpc::Server> ServeFakeRouter(FakeRouter* fake,
                                              RunnerOptions* options) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  options->router_address = absl::StrCat("127.0.0.1:", port);
  options->progress = false;
  return server;
}

TEST(WorkloadRunnerTest, RunsSessionsAndCarriesConversationHistory) {
  FakeRouter fake;
  RunnerOptions options;
  auto server = ServeFakeRouter(&fake, &options);
  options.concurrency = 2;
  WorkloadRunner runner(options);
  Workload w;
  w.name = "multi-turn";
  WorkloadSession s;
  s.name = "conv";
  s.context = {1, 2};
  s.user_turns = {{3}, {4, 5}};
  s.carry_history = true;
  s.max_new_tokens = 3;
  w.sessions = {s};
  RunConfig config;
  config.label = "cache_off";
  config.policy = "approx_tree";
  config.prefix_cache = false;
  auto result = runner.Run(w, config);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(fake.prompts_.size(), 2u);
  EXPECT_EQ(fake.prompts_[0], std::vector<int32_t>({1, 2, 3}));
  // Turn 2 = turn 1 prompt + its answer [3, 7, 7] + the new message.
  EXPECT_EQ(fake.prompts_[1], std::vector<int32_t>({1, 2, 3, 3, 7, 7, 4, 5}));
  EXPECT_EQ(fake.policies_,
            std::vector<std::string>({"approx_tree", "approx_tree"}));
  EXPECT_EQ(fake.disable_, std::vector<bool>({true, true}));
  EXPECT_EQ(result->ok, 2);
  EXPECT_EQ(result->prompt_tokens, 11);
  EXPECT_EQ(result->cached_tokens, 1 + 4);
  EXPECT_EQ(result->output_tokens, 6);
  EXPECT_EQ(result->requests_by_worker["w1"], 1);
  EXPECT_EQ(result->requests_by_worker["w0"], 1);
  server->Shutdown();
}

TEST(WorkloadRunnerTest, WorkloadConcurrencyOverridesTheRunnerDefault) {
  FakeRouter fake;
  fake.hold_until_in_flight_ = 3;
  RunnerOptions options;
  auto server = ServeFakeRouter(&fake, &options);
  options.concurrency = 1;
  WorkloadRunner runner(options);
  Workload w;
  w.name = "multi-turn";
  w.concurrency = 3;  // e.g. one stream per conversation
  for (int i = 0; i < 4; ++i) {
    WorkloadSession s;
    s.name = absl::StrCat("conv", i);
    s.context = {1, 2};
    s.user_turns = {{3 + i}};
    w.sessions.push_back(s);
  }
  RunConfig config;
  config.label = "cache_aware";
  config.policy = "cache_aware";
  auto result = runner.Run(w, config);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ok, 4);
  absl::MutexLock l(&fake.mu_);
  EXPECT_EQ(fake.peak_in_flight_, 3);
  server->Shutdown();
}

}  // namespace
}  // namespace radixkv::router

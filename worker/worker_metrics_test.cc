#include "worker/worker_metrics.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "process/metrics_scrape.h"
#include "prometheus/registry.h"

namespace radixkv::worker {
namespace {

using ::radixkv::process::ScrapeRegistry;

TEST(WorkerMetricsTest, RecordsStepsTokensLatenciesAndOutcomes) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics.ObserveStep(0.5, 4, 100, 3);
  metrics.ObserveStep(0.25, 2, 0, 2);
  metrics.ObserveForward(0.375);
  metrics.ObserveForward(0.125);
  metrics.ObserveIteration(0.5);
  metrics.ObserveIteration(0.25);
  metrics.AddPrefillTokensReused(64);
  metrics.ObserveTimeToFirstToken(0.125);
  metrics.ObserveTimePerOutputToken(0.01);
  metrics.ObserveTimePerOutputToken(0.03);
  metrics.SetQueueDepth(7, 5);
  metrics.AddPreemption();
  metrics.AddRequestFinished("eos");
  metrics.AddRequestFinished("eos");
  metrics.AddRequestFinished("abort");

  std::map<std::string, double> v = ScrapeRegistry(registry);
  EXPECT_EQ(v["radixkv_worker_step_seconds_count"], 2);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_step_seconds_sum"], 0.75);
  EXPECT_EQ(v["radixkv_worker_forward_seconds_count"], 2);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_forward_seconds_sum"], 0.5);
  EXPECT_EQ(v["radixkv_worker_iteration_seconds_count"], 2);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_iteration_seconds_sum"], 0.75);
  EXPECT_EQ(v["radixkv_worker_batch_size_count"], 2);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_batch_size_sum"], 6);
  EXPECT_EQ(v["radixkv_worker_prefill_tokens_computed_total"], 100);
  EXPECT_EQ(v["radixkv_worker_prefill_tokens_reused_total"], 64);
  EXPECT_EQ(v["radixkv_worker_decode_tokens_total"], 5);
  // Last step: 2 tokens in 0.25 s.
  EXPECT_DOUBLE_EQ(v["radixkv_worker_decode_tokens_per_second"], 8);
  EXPECT_EQ(v["radixkv_worker_time_to_first_token_seconds_count"], 1);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_time_to_first_token_seconds_sum"], 0.125);
  EXPECT_EQ(v["radixkv_worker_time_per_output_token_seconds_count"], 2);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_time_per_output_token_seconds_sum"], 0.04);
  EXPECT_EQ(v["radixkv_worker_waiting_requests"], 7);
  EXPECT_EQ(v["radixkv_worker_running_requests"], 5);
  EXPECT_EQ(v["radixkv_worker_preemptions_total"], 1);
  EXPECT_EQ(v["radixkv_worker_requests_finished_total{outcome=eos}"], 2);
  EXPECT_EQ(v["radixkv_worker_requests_finished_total{outcome=abort}"], 1);
}

TEST(WorkerMetricsTest, InfoCarriesTheConfigurationAndBuildInfoIsOne) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics.SetInfo("demo", "cpu", "bf16", 16, 4096);
  std::map<std::string, double> v = ScrapeRegistry(registry);
  // Labels come in label-name order.
  EXPECT_EQ(v["radixkv_worker_info{capacity_slots=4096}{device=cpu}{kv_dtype="
              "bf16}{model=demo}{page_size=16}"],
            1);
  EXPECT_EQ(v["radixkv_build_info{component=worker}{version=radixkv.v1}"], 1);

  // A second call replaces the series instead of adding one.
  metrics.SetInfo("demo", "gpu", "f16", 32, 8192);
  v = ScrapeRegistry(registry);
  EXPECT_EQ(v.count("radixkv_worker_info{capacity_slots=4096}{device=cpu}{kv_"
                    "dtype=bf16}{model=demo}{page_size=16}"),
            0u);
  EXPECT_EQ(v["radixkv_worker_info{capacity_slots=8192}{device=gpu}{kv_dtype="
              "f16}{model=demo}{page_size=32}"],
            1);
}

}  // namespace
}  // namespace radixkv::worker

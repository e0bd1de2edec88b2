#include "worker/worker_metrics.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace radixkv::worker {
namespace {

// name{outcome} -> value of counters and gauges; histograms give _count and
// _sum.
std::map<std::string, double> Scrape(const prometheus::Registry& registry) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::string name = family.name;
      for (const auto& label : metric.label) {
        name += "{" + label.value + "}";
      }
      switch (family.type) {
        case prometheus::MetricType::Counter:
          out[name] = metric.counter.value;
          break;
        case prometheus::MetricType::Gauge:
          out[name] = metric.gauge.value;
          break;
        case prometheus::MetricType::Histogram:
          out[name + "_count"] =
              static_cast<double>(metric.histogram.sample_count);
          out[name + "_sum"] = metric.histogram.sample_sum;
          break;
        default:
          break;
      }
    }
  }
  return out;
}

TEST(WorkerMetricsTest, RecordsStepsTokensLatenciesAndOutcomes) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics.ObserveStep(0.5, 4, 100, 3);
  metrics.ObserveStep(0.25, 2, 0, 2);
  metrics.AddPrefillTokensReused(64);
  metrics.ObserveTimeToFirstToken(0.125);
  metrics.ObserveTimePerOutputToken(0.01);
  metrics.ObserveTimePerOutputToken(0.03);
  metrics.SetQueueDepth(7, 5);
  metrics.AddPreemption();
  metrics.AddRequestFinished("eos");
  metrics.AddRequestFinished("eos");
  metrics.AddRequestFinished("abort");

  std::map<std::string, double> v = Scrape(registry);
  EXPECT_EQ(v["radixkv_worker_step_seconds_count"], 2);
  EXPECT_DOUBLE_EQ(v["radixkv_worker_step_seconds_sum"], 0.75);
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
  EXPECT_EQ(v["radixkv_worker_requests_finished_total{eos}"], 2);
  EXPECT_EQ(v["radixkv_worker_requests_finished_total{abort}"], 1);
}

TEST(WorkerMetricsTest, InfoCarriesTheConfigurationAndBuildInfoIsOne) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics.SetInfo("demo", "cpu", "bf16", 16, 4096);
  std::map<std::string, double> v = Scrape(registry);
  // Scrape() joins label values in label-name order: capacity_slots, device,
  // kv_dtype, model, page_size.
  EXPECT_EQ(v["radixkv_worker_info{4096}{cpu}{bf16}{demo}{16}"], 1);
  EXPECT_EQ(v["radixkv_build_info{worker}{radixkv.v1}"], 1);

  // A second call replaces the series instead of adding one.
  metrics.SetInfo("demo", "gpu", "f16", 32, 8192);
  v = Scrape(registry);
  EXPECT_EQ(v.count("radixkv_worker_info{4096}{cpu}{bf16}{demo}{16}"), 0u);
  EXPECT_EQ(v["radixkv_worker_info{8192}{gpu}{f16}{demo}{32}"], 1);
}

}  // namespace
}  // namespace radixkv::worker

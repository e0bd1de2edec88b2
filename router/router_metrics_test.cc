#include "router/router_metrics.h"

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "process/metrics_scrape.h"
#include "prometheus/registry.h"

namespace radixkv::router {
namespace {

using ::radixkv::process::ScrapeRegistry;

TEST(RouterMetricsTest, RecordsRequestDurationByPolicyAndOutcome) {
  prometheus::Registry registry;
  RouterMetrics metrics(registry);
  metrics.ObserveRequestDuration("grpc", "prefix_aware", "ok", 0.5);
  metrics.ObserveRequestDuration("grpc", "prefix_aware", "ok", 1.25);
  metrics.ObserveRequestDuration("grpc", "round_robin", "no_worker", 0.002);

  std::map<std::string, double> v = ScrapeRegistry(registry);
  const std::string ok =
      "radixkv_router_request_duration_seconds{api=grpc}{outcome=ok}{policy="
      "prefix_aware}";
  EXPECT_EQ(v[ok + "_count"], 2);
  EXPECT_DOUBLE_EQ(v[ok + "_sum"], 1.75);
  const std::string no_worker =
      "radixkv_router_request_duration_seconds{api=grpc}{outcome=no_worker}"
      "{policy=round_robin}";
  EXPECT_EQ(v[no_worker + "_count"], 1);
  EXPECT_DOUBLE_EQ(v[no_worker + "_sum"], 0.002);
}

TEST(RouterMetricsTest, RecordsTimeToFirstTokenByPolicy) {
  prometheus::Registry registry;
  RouterMetrics metrics(registry);
  metrics.ObserveTimeToFirstToken("grpc", "prefix_aware", 0.125);
  metrics.ObserveTimeToFirstToken("grpc", "prefix_aware", 0.375);

  std::map<std::string, double> v = ScrapeRegistry(registry);
  const std::string ttft =
      "radixkv_router_time_to_first_token_seconds{api=grpc}{policy=prefix_"
      "aware}";
  EXPECT_EQ(v[ttft + "_count"], 2);
  EXPECT_DOUBLE_EQ(v[ttft + "_sum"], 0.5);
  EXPECT_EQ(
      v.count("radixkv_router_time_to_first_token_seconds{api=grpc}{policy="
              "round_robin}_count"),
      0u);
}

TEST(RouterMetricsTest, ExportsBuildInfo) {
  prometheus::Registry registry;
  RouterMetrics metrics(registry);
  std::map<std::string, double> v = ScrapeRegistry(registry);
  EXPECT_EQ(v["radixkv_build_info{component=router}{version=radixkv.v1}"], 1);
}

}  // namespace
}  // namespace radixkv::router

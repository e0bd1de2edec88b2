// Test support: reads a prometheus-cpp registry back as plain values, so
// metric tests can assert what a component recorded.
#ifndef RADIXKV_PROCESS_METRICS_SCRAPE_H_
#define RADIXKV_PROCESS_METRICS_SCRAPE_H_

#include <map>
#include <string>

#include "prometheus/registry.h"

namespace radixkv::process {

// Returns "name{label=value}..." -> value for every counter and gauge series
// of `registry`; a histogram series gives "<series>_count" (samples) and
// "<series>_sum" (sum of observed values, in the metric's unit).
inline std::map<std::string, double> ScrapeRegistry(
    const prometheus::Registry& registry) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::string name = family.name;
      for (const auto& label : metric.label) {
        name += "{" + label.name + "=" + label.value + "}";
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

}  // namespace radixkv::process

#endif  // RADIXKV_PROCESS_METRICS_SCRAPE_H_

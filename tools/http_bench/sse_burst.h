// SseBurst: many concurrent streamed /v1/completions requests over HTTP/1.1
// (one connection each) from one thread on libevent's HTTP client, with each
// stream's outcome: HTTP status, time to its first text event, its end, and
// the number of text events. The HTTP twin of tests/generate_burst.h, for
// tools/http_bench/http_api_benchmark.cc.
#ifndef RADIXKV_TOOLS_HTTP_BENCH_SSE_BURST_H_
#define RADIXKV_TOOLS_HTTP_BENCH_SSE_BURST_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace radixkv::tools {

struct SseOutcome {
  int http_status = 0;  // 0: the connection failed
  bool done = false;    // "data: [DONE]" arrived
  bool error_event = false;
  int text_events = 0;
  absl::Duration first_text = absl::InfiniteDuration();
  absl::Duration latency;
};

// Sends every body (a JSON /v1/completions request with "stream": true) at
// once to http://host:port/v1/completions with `authorization` (may be
// empty) and waits up to `timeout` for all to end. Outcomes in body order.
std::vector<SseOutcome> RunSseBurst(const std::string& host, int port,
                                    const std::vector<std::string>& bodies,
                                    const std::string& authorization,
                                    absl::Duration timeout);

}  // namespace radixkv::tools

#endif  // RADIXKV_TOOLS_HTTP_BENCH_SSE_BURST_H_

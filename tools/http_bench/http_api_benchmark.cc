// The cost of the OpenAI HTTP path over gRPC Router.Generate, and how many
// SSE streams one router holds: a local cluster (two CPU workers, the
// embedded model; the router's per-worker bound off so that every stream is
// admitted), the same token-id prompts streamed through both front ends at
// 1, 64 and 512 concurrent streams (TTFT and time per output token, p50 and
// p99, and the HTTP - gRPC difference), then --held_streams concurrent SSE
// streams at once (errors, the router's threads and memory while they are
// open). Prints tables for docs/perf.md "Router and the main job".
//
//   bazel run -c opt //tools/http_bench:http_api_benchmark
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/generate_burst.h"
#include "tools/http_bench/sse_burst.h"

ABSL_FLAG(int, prompt_tokens, 32, "Prompt length, tokens.");
ABSL_FLAG(int, max_new_tokens, 32, "Tokens generated per stream.");
ABSL_FLAG(std::string, concurrency, "1,64,512", "Concurrent streams per run.");
ABSL_FLAG(int, held_streams, 2000, "Concurrent SSE streams of the hold run.");

namespace {

namespace v1 = radixkv::v1;

std::vector<int32_t> Prompt(int i) {
  std::vector<int32_t> ids = {1};
  for (int k = 1; k < absl::GetFlag(FLAGS_prompt_tokens); ++k) {
    ids.push_back(3 + (i * 31 + k * 7) % 500);
  }
  return ids;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// TTFT and time per output token (after the first), ms, of finished streams.
struct Latency {
  std::vector<double> ttft, tpot;
  int errors = 0;
  std::string first_error;
  void Add(bool ok, absl::Duration first, absl::Duration total, int tokens,
           const std::string& what) {
    if (!ok || tokens < 2) {
      if (errors++ == 0) first_error = what;
      return;
    }
    ttft.push_back(absl::ToDoubleMilliseconds(first));
    tpot.push_back(absl::ToDoubleMilliseconds(total - first) / (tokens - 1));
  }
  void Merge(const Latency& o) {
    ttft.insert(ttft.end(), o.ttft.begin(), o.ttft.end());
    tpot.insert(tpot.end(), o.tpot.begin(), o.tpot.end());
    if (errors == 0) first_error = o.first_error;
    errors += o.errors;
  }
};

Latency RunGrpc(const std::string& router, int n, const std::string& tag) {
  std::vector<std::unique_ptr<v1::Router::Stub>> stubs;
  std::vector<radixkv::tests::StartGenerate> starts;
  for (int c = 0; c < 8; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("radixkv-channel-index", c);
    stubs.push_back(v1::Router::NewStub(grpc::CreateCustomChannel(
        router, grpc::InsecureChannelCredentials(), args)));
    starts.push_back(radixkv::tests::ToRouter(stubs.back().get()));
  }
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < n; ++i) {
    v1::GenerateRequest r;
    r.set_request_id(absl::StrCat("bench-", tag, "-", i));
    const std::vector<int32_t> ids = Prompt(i);
    r.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
    r.mutable_sampling()->set_max_new_tokens(
        absl::GetFlag(FLAGS_max_new_tokens));
    r.mutable_sampling()->set_ignore_eos(true);
    r.set_return_text(true);
    requests.push_back(std::move(r));
  }
  radixkv::tests::GenerateBurst burst(starts, std::move(requests),
                                      absl::Seconds(300));
  burst.WaitAll(absl::Seconds(330));
  Latency l;
  for (const auto& o : burst.outcomes()) {
    l.Add(o.code == grpc::StatusCode::OK, o.first_token, o.latency, o.tokens,
          absl::StrCat("grpc ", o.code, ": ", o.message.substr(0, 120)));
  }
  return l;
}

std::vector<std::string> HttpBodies(int n, int max_tokens) {
  std::vector<std::string> bodies;
  for (int i = 0; i < n; ++i) {
    bodies.push_back(absl::StrCat(
        R"({"model": "radixkv-demo-llama", "stream": true, "temperature": 0,)",
        R"( "ignore_eos": true, "max_tokens": )", max_tokens,
        R"(, "prompt": [)", absl::StrJoin(Prompt(i), ","), "]}"));
  }
  return bodies;
}

Latency RunHttp(const std::string& http, int n) {
  const std::vector<std::string> hp = absl::StrSplit(http, ':');
  int port = 0;
  (void)absl::SimpleAtoi(hp[1], &port);
  Latency l;
  for (const auto& o : radixkv::tools::RunSseBurst(
           hp[0], port, HttpBodies(n, absl::GetFlag(FLAGS_max_new_tokens)), "",
           absl::Seconds(300))) {
    // One text event per token here (ignore_eos, byte pieces aside).
    l.Add(o.http_status == 200 && o.done && !o.error_event, o.first_text,
          o.latency, o.text_events,
          absl::StrCat("http ", o.http_status, o.done ? " done" : "",
                       o.error_event ? " error event" : "", ", ", o.text_events,
                       " text events"));
  }
  return l;
}

// "Threads:" and "VmRSS:" of /proc/<pid>/status.
std::string ProcessSize(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line, out;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "Threads:") ||
        absl::StartsWith(line, "VmRSS:")) {
      absl::StrAppend(&out, out.empty() ? "" : ", ",
                      absl::StripAsciiWhitespace(line));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  radixkv::router::LocalClusterOptions options;
  options.bin_dir = ".";
  // The processes find the tokenizer plug-in through this (their own
  // runfiles trees are not built when they are data of this binary).
  setenv("RADIXKV_SENTENCEPIECE_PLUGIN",
         absl::StrCat(get_current_dir_name(),
                      "/model/tokenizer/libradixkv_sentencepiece.so")
             .c_str(),
         /*overwrite=*/0);  // `bazel run`: the runfiles tree
  options.model_dir = "models/radixkv-demo-llama";
  options.run_dir = absl::StrCat("/tmp/radixkv-http-bench-", getpid());
  options.router_args = {"--max_in_flight_per_worker=0",
                         "--max_in_flight_requests=100000"};
  options.worker_args = {"--max_waiting_requests=100000"};
  auto cluster = radixkv::router::LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const std::string router = (*cluster)->router_address();
  const std::string http = (*cluster)->router_http_address();
  RunGrpc(router, 16, "warmup");
  RunHttp(http, 16);
  std::printf("\n%d prompt + %d new tokens per stream, token-id prompts\n\n",
              absl::GetFlag(FLAGS_prompt_tokens),
              absl::GetFlag(FLAGS_max_new_tokens));
  std::printf(
      "| streams | api | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | "
      "TPOT p99 ms | errors |\n| --- | --- | --- | --- | --- | --- | "
      "--- |\n");
  for (absl::string_view c :
       absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n)) continue;
    // Repeated so that every row has at least 64 streams.
    Latency g, h;
    for (int rep = 0; rep * n < 64 || rep == 0; ++rep) {
      g.Merge(RunGrpc(router, n, absl::StrCat("c", n, "-", rep)));
      h.Merge(RunHttp(http, n));
    }
    for (const auto& [api, l] : {std::pair{"grpc", g}, std::pair{"http", h}}) {
      std::printf("| %d | %s | %.1f | %.1f | %.2f | %.2f | %d |\n", n, api,
                  Quantile(l.ttft, 0.5), Quantile(l.ttft, 0.99),
                  Quantile(l.tpot, 0.5), Quantile(l.tpot, 0.99), l.errors);
    }
    for (const Latency* l : {&g, &h}) {
      if (l->errors > 0)
        std::printf("first error: %s\n", l->first_error.c_str());
    }
    std::printf("| %d | http - grpc | %+.1f | %+.1f | %+.2f | %+.2f | |\n", n,
                Quantile(h.ttft, 0.5) - Quantile(g.ttft, 0.5),
                Quantile(h.ttft, 0.99) - Quantile(g.ttft, 0.99),
                Quantile(h.tpot, 0.5) - Quantile(g.tpot, 0.5),
                Quantile(h.tpot, 0.99) - Quantile(g.tpot, 0.99));
  }
  // Held streams: all open at once, most waiting in the workers' queues.
  const int held = absl::GetFlag(FLAGS_held_streams);
  std::string during;
  std::thread probe([&] {
    absl::SleepFor(absl::Seconds(3));
    during = ProcessSize((*cluster)->router_pid());
  });
  const std::vector<std::string> hp = absl::StrSplit(http, ':');
  int port = 0;
  (void)absl::SimpleAtoi(hp[1], &port);
  const absl::Time t0 = absl::Now();
  int ok = 0;
  for (const auto& o : radixkv::tools::RunSseBurst(
           hp[0], port, HttpBodies(held, 8), "", absl::Seconds(600))) {
    ok += o.http_status == 200 && o.done && !o.error_event;
  }
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - t0);
  probe.join();
  std::printf(
      "\n| held SSE streams | completed without error | wall s | "
      "router 3 s in |\n| --- | --- | --- | --- |\n| %d | %d | %.1f | "
      "%s |\n",
      held, ok, absl::ToDoubleSeconds(absl::Now() - t0), during.c_str());
  return 0;
}

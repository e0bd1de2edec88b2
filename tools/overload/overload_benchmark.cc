// The overload benchmark: a local cluster at default flags (two CPU
// workers, the embedded model), first loaded with exactly its admitted
// capacity (the router's --max_in_flight_per_worker times the workers: the
// saturation run), then hit by a burst of `--burst_factor` times that many
// requests at once. Prints one table against the targets of
// docs/perf.md "Overload and admission":
//   - every request learns its fate within 1 s of its arrival: refused
//     RESOURCE_EXHAUSTED, or admitted (its first token) within 1 s;
//   - no other outcome (no DEADLINE_EXCEEDED, no UNAVAILABLE);
//   - admitted requests' p99 latency within 2x of the saturation run's;
//   - goodput (OK tokens/s) during the burst >= 90% of the saturation run's;
//   - no worker dropped (same epochs before and after).
//
//   bazel run -c opt //tools/overload:overload_benchmark -- --burst_factor=10
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/generate_burst.h"

ABSL_FLAG(int, burst_factor, 10, "Burst size, times the admitted capacity.");
ABSL_FLAG(int, max_in_flight_per_worker, 64,
          "The router's --max_in_flight_per_worker (its default).");
ABSL_FLAG(int, prompt_tokens, 32, "Prompt length of each request, tokens.");
ABSL_FLAG(int, max_new_tokens, 16, "Tokens generated per request.");
ABSL_FLAG(int, channels, 8, "gRPC connections to the router.");

namespace {

namespace v1 = radixkv::v1;
using radixkv::tests::GenerateBurst;

std::vector<v1::GenerateRequest> Requests(int n, const std::string& tag) {
  std::vector<v1::GenerateRequest> out;
  for (int i = 0; i < n; ++i) {
    v1::GenerateRequest r;
    r.set_request_id(absl::StrCat("overload-", tag, "-", i));
    auto* ids = r.mutable_token_ids()->mutable_ids();
    ids->Add(1);
    for (int k = 1; k < absl::GetFlag(FLAGS_prompt_tokens); ++k) {
      ids->Add(3 + (i * 31 + k * 7) % 500);
    }
    r.mutable_sampling()->set_max_new_tokens(
        absl::GetFlag(FLAGS_max_new_tokens));
    r.mutable_sampling()->set_ignore_eos(true);
    out.push_back(std::move(r));
  }
  return out;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

struct RunStats {
  int ok = 0, refused = 0, other = 0;
  std::string other_example;
  double ok_p50 = 0, ok_p99 = 0;
  double refusal_max = 0;      // the slowest refusal
  double first_token_max = 0;  // the slowest admitted request's first token
  double decision_max = 0;     // refusal latency or time to first token
  double goodput = 0;          // OK tokens / s, start to the last OK's end
};

RunStats Run(std::vector<radixkv::tests::StartGenerate> starts, int n,
             const std::string& tag) {
  const absl::Time start = absl::Now();
  std::vector<GenerateBurst::Outcome> outcomes;
  {
    GenerateBurst burst(starts, Requests(n, tag), absl::Seconds(120));
    burst.WaitAll(absl::Seconds(150));
    outcomes = burst.outcomes();
  }
  RunStats s;
  std::vector<double> ok_latency;
  double last_ok = 0;
  int64_t ok_tokens = 0;
  for (const auto& o : outcomes) {
    if (o.code == grpc::StatusCode::OK) {
      ++s.ok;
      ok_latency.push_back(absl::ToDoubleSeconds(o.latency));
      last_ok = std::max(last_ok, absl::ToDoubleSeconds(o.latency));
      ok_tokens += o.tokens;
      s.first_token_max =
          std::max(s.first_token_max, absl::ToDoubleSeconds(o.first_token));
      s.decision_max = std::max(s.decision_max, s.first_token_max);
    } else if (o.code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++s.refused;
      s.refusal_max = std::max(s.refusal_max, absl::ToDoubleSeconds(o.latency));
      s.decision_max = std::max(s.decision_max, s.refusal_max);
    } else {
      ++s.other;
      s.other_example = absl::StrCat(o.code, ": ", o.message.substr(0, 80));
    }
  }
  (void)start;
  s.ok_p50 = Quantile(ok_latency, 0.5);
  s.ok_p99 = Quantile(ok_latency, 0.99);
  s.goodput = last_ok > 0 ? ok_tokens / last_ok : 0;
  return s;
}

std::map<std::string, int64_t> Epochs(const std::string& cache_service) {
  auto stub = v1::CacheService::NewStub(
      grpc::CreateChannel(cache_service, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::StatsResponse stats;
  std::map<std::string, int64_t> out;
  if (stub->Stats(&ctx, {}, &stats).ok()) {
    for (const auto& w : stats.workers()) out[w.worker_id()] = w.epoch();
  }
  return out;
}

const char* Mark(bool ok) { return ok ? "met" : "MISSED"; }

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  radixkv::router::LocalClusterOptions options;
  // `bazel run` starts in the runfiles tree, which holds the binaries and
  // the embedded model at their workspace paths.
  options.bin_dir = ".";
  // The processes find the tokenizer plug-in through this (their own
  // runfiles trees are not built when they are data of this binary).
  setenv("RADIXKV_SENTENCEPIECE_PLUGIN",
         absl::StrCat(get_current_dir_name(),
                      "/model/tokenizer/libradixkv_sentencepiece.so")
             .c_str(),
         /*overwrite=*/0);
  options.model_dir = "models/radixkv-demo-llama";
  options.run_dir = absl::StrCat("/tmp/radixkv-overload-", getpid());
  options.router_args = {
      absl::StrCat("--max_in_flight_per_worker=",
                   absl::GetFlag(FLAGS_max_in_flight_per_worker))};
  auto cluster = radixkv::router::LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const int capacity =
      absl::GetFlag(FLAGS_max_in_flight_per_worker) * (*cluster)->num_workers();
  const int burst = capacity * absl::GetFlag(FLAGS_burst_factor);
  std::vector<std::unique_ptr<v1::Router::Stub>> stubs;
  std::vector<radixkv::tests::StartGenerate> starts;
  for (int c = 0; c < absl::GetFlag(FLAGS_channels); ++c) {
    grpc::ChannelArguments args;
    args.SetInt("radixkv-channel-index", c);  // distinct connections
    stubs.push_back(v1::Router::NewStub(
        grpc::CreateCustomChannel((*cluster)->router_address(),
                                  grpc::InsecureChannelCredentials(), args)));
    starts.push_back(radixkv::tests::ToRouter(stubs.back().get()));
  }
  const auto epochs_before = Epochs((*cluster)->cache_service_address());
  Run(starts, 16, "warmup");
  const RunStats one = Run(starts, 1, "unloaded");
  const RunStats sat = Run(starts, capacity, "saturation");
  const RunStats b = Run(starts, burst, "burst");
  const auto epochs_after = Epochs((*cluster)->cache_service_address());

  std::printf(
      "\nadmitted capacity %d (2 workers x %d), burst %d, %d prompt + "
      "%d new tokens per request\n\n",
      capacity, absl::GetFlag(FLAGS_max_in_flight_per_worker), burst,
      absl::GetFlag(FLAGS_prompt_tokens), absl::GetFlag(FLAGS_max_new_tokens));
  std::printf(
      "| run | requests | OK | RESOURCE_EXHAUSTED | other | OK p50 s "
      "| OK p99 s | max decision s | goodput tok/s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [name, s, n] : {std::tuple{"one request", one, 1},
                                   std::tuple{"saturation", sat, capacity},
                                   std::tuple{"burst", b, burst}}) {
    std::printf("| %s | %d | %d | %d | %d | %.2f | %.2f | %.2f | %.0f |\n",
                name, n, s.ok, s.refused, s.other, s.ok_p50, s.ok_p99,
                s.decision_max, s.goodput);
  }
  if (b.other > 0)
    std::printf("\nother outcome: %s\n", b.other_example.c_str());
  std::printf("\n| target | now | |\n| --- | --- | --- |\n");
  std::printf(
      "| every request refused or admitted within 1 s | %.2f s | %s |\n",
      b.decision_max, Mark(b.decision_max <= 1.0));
  std::printf("| only OK or RESOURCE_EXHAUSTED | %d other | %s |\n", b.other,
              Mark(b.other == 0));
  std::printf("| admitted p99 <= 2x saturation p99 | %.2fx | %s |\n",
              sat.ok_p99 > 0 ? b.ok_p99 / sat.ok_p99 : 0,
              Mark(b.ok_p99 <= 2 * sat.ok_p99));
  std::printf("| goodput >= 90%% of saturation | %.0f%% | %s |\n",
              sat.goodput > 0 ? 100 * b.goodput / sat.goodput : 0,
              Mark(b.goodput >= 0.9 * sat.goodput));
  std::printf("| no worker dropped | %s | %s |\n",
              epochs_before == epochs_after ? "same epochs" : "changed",
              Mark(epochs_before == epochs_after &&
                   epochs_before.size() ==
                       static_cast<size_t>((*cluster)->num_workers())));
  return 0;
}

// Sends one burst of concurrent Generate requests and prints what happened:
// calls by status code, latency percentiles per code, and per worker its
// scheduler steps per second and the most requests waiting while the burst
// ran (sampled with Worker.GetStats). Straight at workers (round-robin):
//   bazel-bin/tests/generate_burst_main
//   --workers=127.0.0.1:50104,127.0.0.1:50105
// or through a router (--router=127.0.0.1:50102; --workers then only
// sampled).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "tests/generate_burst.h"

ABSL_FLAG(std::string, workers, "", "Comma-separated worker host:port.");
ABSL_FLAG(std::string, router, "",
          "Router host:port; empty = straight at the workers.");
ABSL_FLAG(int, requests, 2400, "Concurrent requests.");
ABSL_FLAG(int, prompt_tokens, 32, "Prompt length, tokens (distinct prompts).");
ABSL_FLAG(int, max_new_tokens, 16, "Tokens generated per request.");
ABSL_FLAG(int, deadline_s, 60, "Deadline of each request, seconds.");
ABSL_FLAG(int, channels, 4, "gRPC channels (connections) per target.");

namespace {

using radixkv::tests::GenerateBurst;
namespace v1 = radixkv::v1;

std::shared_ptr<grpc::Channel> Channel(const std::string& address, int i) {
  grpc::ChannelArguments args;
  args.SetInt("radixkv-channel-index", i);  // Distinct connections.
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

std::vector<v1::GenerateRequest> Requests() {
  std::vector<v1::GenerateRequest> requests;
  const int64_t run = absl::ToUnixMillis(absl::Now());
  for (int i = 0; i < absl::GetFlag(FLAGS_requests); ++i) {
    v1::GenerateRequest r;
    r.set_request_id(absl::StrCat("burst-", run, "-", i));
    auto* ids = r.mutable_token_ids()->mutable_ids();
    ids->Add(1);
    for (int k = 1; k < absl::GetFlag(FLAGS_prompt_tokens); ++k) {
      ids->Add(3 + (i * 31 + k * 7) % 500);
    }
    r.mutable_sampling()->set_max_new_tokens(
        absl::GetFlag(FLAGS_max_new_tokens));
    r.mutable_sampling()->set_ignore_eos(true);
    requests.push_back(std::move(r));
  }
  return requests;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// GetStats of each worker every 500 ms until stopped.
class WorkerSampler {
 public:
  explicit WorkerSampler(const std::vector<std::string>& workers)
      : workers_(workers), samples_(workers.size()) {
    thread_ = std::thread([this] { Run(); });
  }
  // Stops sampling and prints one row per worker.
  void StopAndPrint() {
    stop_.Notify();
    thread_.join();
    std::printf("| worker | steps | steps/s | max waiting |\n");
    std::printf("| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < workers_.size(); ++i) {
      const Sample& s = samples_[i];
      const double secs = absl::ToDoubleSeconds(s.last - s.first);
      const int64_t steps = s.steps_last - std::max<int64_t>(0, s.steps_first);
      std::printf("| %s | %lld | %.1f | %d |\n", workers_[i].c_str(),
                  static_cast<long long>(steps), secs > 0 ? steps / secs : 0.0,
                  s.max_waiting);
    }
  }

 private:
  struct Sample {
    int64_t steps_first = -1;
    int64_t steps_last = 0;
    int32_t max_waiting = 0;
    absl::Time first;
    absl::Time last;
  };

  void Run() {
    std::vector<std::unique_ptr<v1::Worker::Stub>> stubs;
    for (const std::string& w : workers_) {
      stubs.push_back(v1::Worker::NewStub(Channel(w, 1000)));
    }
    do {
      for (size_t i = 0; i < stubs.size(); ++i) {
        grpc::ClientContext context;
        context.set_deadline(
            absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
        v1::WorkerStatsResponse stats;
        if (!stubs[i]->GetStats(&context, {}, &stats).ok()) continue;
        Sample& s = samples_[i];
        if (s.steps_first < 0) {
          s.steps_first = stats.steps();
          s.first = absl::Now();
        }
        s.steps_last = stats.steps();
        s.last = absl::Now();
        s.max_waiting =
            std::max(s.max_waiting, stats.load().waiting_requests());
      }
    } while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500)));
  }

  const std::vector<std::string> workers_;
  std::vector<Sample> samples_;
  absl::Notification stop_;
  std::thread thread_;
};

void PrintOutcomes(const std::vector<GenerateBurst::Outcome>& outcomes,
                   double wall_s) {
  std::map<int, std::vector<double>> latency;
  std::map<int, std::string> example;
  for (const auto& o : outcomes) {
    latency[o.code].push_back(absl::ToDoubleSeconds(o.latency));
    if (!example.contains(o.code)) example[o.code] = o.message;
  }
  std::printf("%zu requests, %.1f s\n", outcomes.size(), wall_s);
  std::printf("| code | calls | p50 s | p90 s | p99 s | max s | example |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [code, v] : latency) {
    std::printf("| %d | %zu | %.2f | %.2f | %.2f | %.2f | %s |\n", code,
                v.size(), Quantile(v, 0.5), Quantile(v, 0.9), Quantile(v, 0.99),
                Quantile(v, 1.0), example[code].substr(0, 100).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> workers =
      absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipEmpty());
  const std::string router = absl::GetFlag(FLAGS_router);
  if (workers.empty() && router.empty()) {
    std::fprintf(stderr, "give --workers and/or --router\n");
    return 2;
  }
  std::vector<std::unique_ptr<v1::Worker::Stub>> worker_stubs;
  std::vector<std::unique_ptr<v1::Router::Stub>> router_stubs;
  std::vector<radixkv::tests::StartGenerate> starts;
  for (int c = 0; c < absl::GetFlag(FLAGS_channels); ++c) {
    if (!router.empty()) {
      router_stubs.push_back(v1::Router::NewStub(Channel(router, c)));
      starts.push_back(radixkv::tests::ToRouter(router_stubs.back().get()));
      continue;
    }
    for (const std::string& w : workers) {
      worker_stubs.push_back(v1::Worker::NewStub(Channel(w, c)));
      starts.push_back(radixkv::tests::ToWorker(worker_stubs.back().get()));
    }
  }
  WorkerSampler sampler(workers);
  const absl::Time start = absl::Now();
  std::vector<GenerateBurst::Outcome> outcomes;
  {
    const int deadline_s = absl::GetFlag(FLAGS_deadline_s);
    GenerateBurst burst(starts, Requests(), absl::Seconds(deadline_s));
    burst.WaitAll(absl::Seconds(deadline_s + 30));
    outcomes = burst.outcomes();
  }
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  PrintOutcomes(outcomes, wall_s);
  sampler.StopAndPrint();
  return 0;
}

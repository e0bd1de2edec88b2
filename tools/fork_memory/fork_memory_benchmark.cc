// KV memory, throughput and latency of parallel sampling (docs/perf.md
// "Parallel sampling"): n samples of one long prompt as one request with
// GenerateRequest.n (the worker forks the prompt's lease, PagedAttention
// §4.4) against n separate requests with the prefix cache off and on, on a
// local cluster of the real binaries (cache service, one worker with the
// embedded model, router).
// - The peak slots held are read from CacheService.Stats while the run goes
//   on (polled every --poll_ms), not computed: protected = locked by leases
//   and locked tree paths, used = protected + evictable (capacity - free).
// - Latency is taken at the client from each streamed chunk's arrival, per
//   sample (one request with n streams n samples, told apart by
//   GenerateResponse.sample_index): TTFT = first token - request sent, TPOT
//   = (last token - first token) / (tokens - 1), ms; p50 and p99 (nearest
//   rank) of every sample of every repeat. Output tokens/s = the tokens of
//   all samples / the wall time from sending the first request to the end
//   of the last stream.
// Exits 1 when a call failed or a sample got no tokens.
//
//   bazel run -c opt //tools/fork_memory:fork_memory_benchmark
// From a staged tree (worker/gpu/run_gpu_backend_suite.sh, step fork), e.g.
//   bin/tools/fork_memory/fork_memory_benchmark --bin_dir=bin
//     --worker_args="--device=gpu --kv_dtype=f32"
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "tools/local_cluster/local_cluster.h"

ABSL_FLAG(int, n, 8, "Samples of the prompt.");
ABSL_FLAG(int, prompt_tokens, 1792,
          "Prompt length, tokens (the demo model's context is 2048).");
ABSL_FLAG(int, max_new_tokens, 256, "Tokens generated per sample.");
ABSL_FLAG(int64_t, kv_capacity_tokens, 32768, "The worker's KV pool, slots.");
ABSL_FLAG(int, threads, 2, "The worker's CPU threads.");
ABSL_FLAG(int, poll_ms, 5, "CacheService.Stats polling period, ms.");
ABSL_FLAG(int, repeats, 3,
          "Runs per mode: the table gives the largest peaks, the median "
          "wall time and latency quantiles over every repeat's samples.");
ABSL_FLAG(std::string, model_dir, "models/radixkv-demo-llama",
          "The worker's checkpoint (and the router's tokenizer).");
ABSL_FLAG(std::string, bin_dir, ".",
          "Directory with cache_service/, worker/, router/ binaries; \".\" = "
          "the runfiles tree of bazel run.");
ABSL_FLAG(std::string, worker_args, "",
          "Extra worker flags, separated by spaces, after --threads and "
          "--kv_capacity_tokens (so they win), e.g. \"--device=gpu "
          "--kv_dtype=bf16\".");
ABSL_FLAG(std::string, run_dir, "",
          "The processes' logs; empty = /tmp/fork_memory_benchmark.<pid>.");

namespace {

namespace v1 = radixkv::v1;

v1::GenerateRequest Request(const std::string& id, int n, bool cache) {
  v1::GenerateRequest r;
  r.set_request_id(id);
  auto* ids = r.mutable_token_ids()->mutable_ids();
  ids->Add(1);
  for (int k = 1; k < absl::GetFlag(FLAGS_prompt_tokens); ++k) {
    ids->Add(3 + (k * 7919) % 500);
  }
  r.set_n(n);
  r.set_disable_prefix_cache(!cache);
  r.mutable_sampling()->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  r.mutable_sampling()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(1.0f);
  r.mutable_sampling()->set_seed(7);
  return r;
}

struct Peak {
  int64_t protected_slots = 0;
  int64_t used_slots = 0;
  int64_t capacity = 0;
};

// Flushes the cache service (every mode starts from an empty tree), then
// polls CacheService.Stats every --poll_ms until Stop(), keeping the peaks.
class StatsPoller {
 public:
  explicit StatsPoller(const std::string& cache_service_address)
      : cache_(v1::CacheService::NewStub(grpc::CreateChannel(
            cache_service_address, grpc::InsecureChannelCredentials()))) {
    grpc::ClientContext ctx;
    v1::FlushResponse flushed;
    (void)cache_->Flush(&ctx, v1::FlushRequest(), &flushed);
    thread_ = std::thread([this] { Poll(); });
  }
  // Polls a little longer (the last releases), then the peaks.
  Peak Stop() {
    absl::SleepFor(absl::Milliseconds(3 * absl::GetFlag(FLAGS_poll_ms)));
    done_ = true;
    thread_.join();
    return peak_;
  }

 private:
  void Poll() {
    while (!done_.load()) {
      grpc::ClientContext ctx;
      v1::StatsResponse stats;
      if (cache_->Stats(&ctx, v1::StatsRequest(), &stats).ok()) {
        for (const v1::WorkerCacheStats& w : stats.workers()) {
          peak_.capacity = w.capacity_slots();
          peak_.protected_slots =
              std::max(peak_.protected_slots, w.protected_slots());
          peak_.used_slots =
              std::max(peak_.used_slots, w.capacity_slots() - w.free_slots());
        }
      }
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms)));
    }
  }

  std::unique_ptr<v1::CacheService::Stub> cache_;
  std::atomic<bool> done_{false};
  Peak peak_;
  std::thread thread_;
};

// Arrival times at the client of one sample's first and last streamed token.
struct SampleTimes {
  absl::Time first_token;
  absl::Time last_token;
  int64_t tokens = 0;
};

// One request's stream: samples[GenerateResponse.sample_index], the time
// the request was sent, and the error ("" when the call ended OK).
struct Stream {
  absl::Time sent;
  std::vector<SampleTimes> samples;
  std::string error;
};

Stream RunStream(v1::Router::Stub* router, const v1::GenerateRequest& request) {
  Stream s;
  s.samples.resize(std::max(1, request.n()));
  grpc::ClientContext ctx;
  s.sent = absl::Now();
  auto reader = router->Generate(&ctx, request);
  v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    const absl::Time now = absl::Now();
    if (chunk.token_ids_size() == 0) continue;
    const int i = chunk.sample_index();
    if (i < 0 || i >= static_cast<int>(s.samples.size())) {
      if (s.error.empty()) s.error = absl::StrCat("sample_index ", i);
      continue;
    }
    SampleTimes& t = s.samples[i];
    if (t.tokens == 0) t.first_token = now;
    t.last_token = now;
    t.tokens += chunk.token_ids_size();
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) s.error = st.error_message();
  return s;
}

struct Run {
  std::string mode;
  int requests = 0;
  Peak peak;
  int64_t tokens = 0;
  double seconds = 0;
  // Per sample of every request, ms: TTFT from sending the request to the
  // first token; TPOT = (last token - first token) / (tokens - 1), samples
  // of at least 2 tokens.
  std::vector<double> ttft_ms, tpot_ms;
  std::string error;
};

void AddStream(const Stream& s, Run* run) {
  if (!s.error.empty() && run->error.empty()) run->error = s.error;
  for (const SampleTimes& t : s.samples) {
    run->tokens += t.tokens;
    if (t.tokens == 0) {
      if (run->error.empty()) run->error = "a sample without tokens";
      continue;
    }
    run->ttft_ms.push_back(absl::ToDoubleMilliseconds(t.first_token - s.sent));
    if (t.tokens >= 2) {
      run->tpot_ms.push_back(
          absl::ToDoubleMilliseconds(t.last_token - t.first_token) /
          static_cast<double>(t.tokens - 1));
    }
  }
}

// The requests at once (one client thread each) while the cache service's
// Stats are polled.
Run Measure(const std::string& mode, const radixkv::router::LocalCluster& c,
            std::vector<v1::GenerateRequest> requests) {
  StatsPoller poller(c.cache_service_address());
  Run run;
  run.mode = mode;
  run.requests = static_cast<int>(requests.size());
  auto channel = grpc::CreateChannel(c.router_address(),
                                     grpc::InsecureChannelCredentials());
  std::vector<Stream> streams(requests.size());
  std::vector<std::thread> clients;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] {
      auto router = v1::Router::NewStub(channel);
      streams[i] = RunStream(router.get(), requests[i]);
    });
  }
  for (std::thread& t : clients) t.join();
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  run.peak = poller.Stop();
  for (const Stream& s : streams) AddStream(s, &run);
  return run;
}

// Nearest rank: the smallest value with at least a fraction q at or below
// it (with 24 samples, p99 is the largest).
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// One row per mode from its repeats: the largest peaks, the median wall
// time, the latency samples of every repeat pooled.
Run Summarize(const std::vector<Run>& repeats) {
  Run r = repeats[0];
  r.ttft_ms.clear();
  r.tpot_ms.clear();
  std::vector<double> seconds;
  for (const Run& m : repeats) {
    r.peak.protected_slots =
        std::max(r.peak.protected_slots, m.peak.protected_slots);
    r.peak.used_slots = std::max(r.peak.used_slots, m.peak.used_slots);
    seconds.push_back(m.seconds);
    r.ttft_ms.insert(r.ttft_ms.end(), m.ttft_ms.begin(), m.ttft_ms.end());
    r.tpot_ms.insert(r.tpot_ms.end(), m.tpot_ms.begin(), m.tpot_ms.end());
    if (r.error.empty()) r.error = m.error;
  }
  std::sort(seconds.begin(), seconds.end());
  r.seconds = seconds[seconds.size() / 2];
  return r;
}

void PrintTable(const std::vector<Run>& runs) {
  std::printf("n=%d prompt=%d max_new_tokens=%d page_size=16 capacity=%lld\n",
              absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_prompt_tokens),
              absl::GetFlag(FLAGS_max_new_tokens),
              static_cast<long long>(runs[0].peak.capacity));
  std::printf(
      "| mode | requests | peak protected slots | peak used slots | tokens | "
      "wall s (median) | output tokens/s | samples | TTFT p50 ms | "
      "TTFT p99 ms | TPOT p50 ms | TPOT p99 ms |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    std::printf(
        "| %s | %d | %lld | %lld | %lld | %.2f | %.1f | %zu | %.1f | %.1f | "
        "%.2f | %.2f |%s\n",
        r.mode.c_str(), r.requests,
        static_cast<long long>(r.peak.protected_slots),
        static_cast<long long>(r.peak.used_slots),
        static_cast<long long>(r.tokens), r.seconds,
        r.tokens / std::max(r.seconds, 1e-9), r.ttft_ms.size(),
        Quantile(r.ttft_ms, 0.5), Quantile(r.ttft_ms, 0.99),
        Quantile(r.tpot_ms, 0.5), Quantile(r.tpot_ms, 0.99),
        r.error.empty() ? "" : (" error: " + r.error).c_str());
  }
}

// Under bazel run, the children (worker, router) find their runfiles (the
// sentencepiece plug-in) through this binary's merged runfiles tree; a staged
// tree has none (the plug-in lies next to each binary).
void ExportRunfilesDir() {
  if (std::getenv("RUNFILES_DIR") != nullptr) return;
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return;
  const std::string runfiles = std::string(buf, n) + ".runfiles";
  if (std::filesystem::exists(runfiles)) {
    ::setenv("RUNFILES_DIR", runfiles.c_str(), 1);
  }
}

radixkv::router::LocalClusterOptions ClusterOptions() {
  radixkv::router::LocalClusterOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.model_dir = absl::GetFlag(FLAGS_model_dir);
  options.run_dir = absl::GetFlag(FLAGS_run_dir);
  if (options.run_dir.empty()) {
    options.run_dir = absl::StrCat("/tmp/fork_memory_benchmark.", getpid());
  }
  options.use_redis = false;
  options.num_workers = 1;
  options.worker_args = {
      absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
      absl::StrCat("--kv_capacity_tokens=",
                   absl::GetFlag(FLAGS_kv_capacity_tokens))};
  const std::string extra = absl::GetFlag(FLAGS_worker_args);
  for (absl::string_view arg : absl::StrSplit(extra, ' ', absl::SkipEmpty())) {
    options.worker_args.emplace_back(arg);
  }
  options.start_timeout = absl::Seconds(120);
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ExportRunfilesDir();
  auto cluster = radixkv::router::LocalCluster::Start(ClusterOptions());
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const int n = absl::GetFlag(FLAGS_n);
  // Warm-up (first-touch of the pool and the weights), not reported.
  (void)Measure("warm-up", **cluster, {Request("warm-up", n, false)});
  // Modes interleaved per repeat, so that a load change on the machine
  // spreads over all of them.
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  std::vector<std::vector<Run>> by_mode(3);
  for (int rep = 0; rep < repeats; ++rep) {
    by_mode[0].push_back(
        Measure("fork (one request, n)", **cluster,
                {Request(absl::StrCat("fork-", rep), n, true)}));
    for (bool cache : {false, true}) {
      std::vector<v1::GenerateRequest> separate;
      for (int i = 0; i < n; ++i) {
        v1::GenerateRequest r = Request(
            absl::StrCat("separate-", cache, "-", rep, "-", i), 1, cache);
        r.mutable_sampling()->set_seed(7 + i);
        separate.push_back(std::move(r));
      }
      by_mode[cache ? 2 : 1].push_back(
          Measure(cache ? "n requests, prefix cache on"
                        : "n requests, prefix cache off",
                  **cluster, std::move(separate)));
    }
  }
  std::vector<Run> runs;
  for (const std::vector<Run>& mode : by_mode) runs.push_back(Summarize(mode));
  PrintTable(runs);
  for (const Run& r : runs) {
    if (!r.error.empty()) return 1;
  }
  return 0;
}

// KV memory of parallel sampling (docs/perf.md "Parallel sampling"): n
// samples of one long prompt as one request with GenerateRequest.n (the
// worker forks the prompt's lease, PagedAttention §4.4) against n separate
// requests with the prefix cache off and on, on a local cluster of the real
// binaries (cache service, one CPU worker with the embedded model, router).
// The peak slots held are read from CacheService.Stats while the run goes
// on (polled every --poll_ms), not computed: protected = locked by leases
// and locked tree paths, used = protected + evictable (capacity - free).
//
//   bazel run -c opt //tools/fork_memory:fork_memory_benchmark
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
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
          "Runs per mode: the table gives the largest peaks and the median "
          "wall time.");
ABSL_FLAG(std::string, model_dir, "models/radixkv-demo-llama",
          "The worker's checkpoint (and the router's tokenizer).");

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

struct Run {
  std::string mode;
  int requests = 0;
  Peak peak;
  int64_t tokens = 0;
  double seconds = 0;
  std::string error;
};

Run Measure(const std::string& mode, const radixkv::router::LocalCluster& c,
            std::vector<v1::GenerateRequest> requests) {
  auto cache = v1::CacheService::NewStub(grpc::CreateChannel(
      c.cache_service_address(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    v1::FlushResponse flushed;
    (void)cache->Flush(&ctx, v1::FlushRequest(), &flushed);
  }
  Run run;
  run.mode = mode;
  run.requests = static_cast<int>(requests.size());
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done.load()) {
      grpc::ClientContext ctx;
      v1::StatsResponse stats;
      if (cache->Stats(&ctx, v1::StatsRequest(), &stats).ok()) {
        for (const v1::WorkerCacheStats& w : stats.workers()) {
          run.peak.capacity = w.capacity_slots();
          run.peak.protected_slots =
              std::max(run.peak.protected_slots, w.protected_slots());
          run.peak.used_slots = std::max(run.peak.used_slots,
                                         w.capacity_slots() - w.free_slots());
        }
      }
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms)));
    }
  });
  auto channel = grpc::CreateChannel(c.router_address(),
                                     grpc::InsecureChannelCredentials());
  std::vector<std::thread> clients;
  std::vector<int64_t> tokens(requests.size(), 0);
  std::vector<std::string> errors(requests.size());
  const absl::Time start = absl::Now();
  for (size_t i = 0; i < requests.size(); ++i) {
    clients.emplace_back([&, i] {
      auto router = v1::Router::NewStub(channel);
      grpc::ClientContext ctx;
      auto reader = router->Generate(&ctx, requests[i]);
      v1::GenerateResponse chunk;
      while (reader->Read(&chunk)) tokens[i] += chunk.token_ids_size();
      grpc::Status st = reader->Finish();
      if (!st.ok()) errors[i] = st.error_message();
    });
  }
  for (std::thread& t : clients) t.join();
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::SleepFor(absl::Milliseconds(3 * absl::GetFlag(FLAGS_poll_ms)));
  done = true;
  poller.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    run.tokens += tokens[i];
    if (!errors[i].empty() && run.error.empty()) run.error = errors[i];
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  radixkv::router::LocalClusterOptions options;
  // bazel run: the runfiles tree (//tools/local_cluster's binaries).
  options.bin_dir = ".";
  options.model_dir = absl::GetFlag(FLAGS_model_dir);
  options.run_dir = absl::StrCat("/tmp/fork_memory_benchmark.", getpid());
  options.use_redis = false;
  options.num_workers = 1;
  options.worker_args = {
      absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
      absl::StrCat("--kv_capacity_tokens=",
                   absl::GetFlag(FLAGS_kv_capacity_tokens))};
  options.start_timeout = absl::Seconds(120);
  auto cluster = radixkv::router::LocalCluster::Start(std::move(options));
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const int n = absl::GetFlag(FLAGS_n);
  // Warm-up (first-touch of the pool and the weights), not reported.
  (void)Measure("warm-up", **cluster, {Request("warm-up", n, false)});
  std::vector<Run> runs;
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
  for (std::vector<Run>& mode : by_mode) {
    Run r = mode[0];
    std::vector<double> seconds;
    for (const Run& m : mode) {
      r.peak.protected_slots =
          std::max(r.peak.protected_slots, m.peak.protected_slots);
      r.peak.used_slots = std::max(r.peak.used_slots, m.peak.used_slots);
      seconds.push_back(m.seconds);
      if (r.error.empty()) r.error = m.error;
    }
    std::sort(seconds.begin(), seconds.end());
    r.seconds = seconds[seconds.size() / 2];
    runs.push_back(std::move(r));
  }
  std::printf("n=%d prompt=%d max_new_tokens=%d page_size=16 capacity=%lld\n",
              n, absl::GetFlag(FLAGS_prompt_tokens),
              absl::GetFlag(FLAGS_max_new_tokens),
              static_cast<long long>(runs[0].peak.capacity));
  std::printf(
      "| mode | requests | peak protected slots | peak used slots | tokens | "
      "wall s (median) | tokens/s |\n|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    std::printf("| %s | %d | %lld | %lld | %lld | %.2f | %.1f |%s\n",
                r.mode.c_str(), r.requests,
                static_cast<long long>(r.peak.protected_slots),
                static_cast<long long>(r.peak.used_slots),
                static_cast<long long>(r.tokens), r.seconds,
                r.tokens / std::max(r.seconds, 1e-9),
                r.error.empty() ? "" : (" error: " + r.error).c_str());
  }
  return 0;
}

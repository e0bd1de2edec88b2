// What a Redis snapshot of a full cache service costs the RPC path
// (snapshots must not stall RPCs), at ~1M cached tokens: the state of the
// loadgen's workload (one worker, page_size 16, 1,048,576 slots, 256-token
// prompts = one of 16 shared 192-token prefixes + 64 unique tokens, filled
// until eviction runs).
//   BM_SerializeStall  CacheState::Serialize(): the stall of an inline
//                      snapshot (the service mutex is held throughout).
//   BM_ForkStall       fork() of this process (the child _exit()s at once):
//                      the stall of a background snapshot (forked_snapshot.h).
//                      Counters: resident MB and MB of it in huge pages.
//   BM_PairsWhileAChildLives/0|1  Acquire+Commit pairs with no child / right
//                      after a fork whose child stays alive: the copy-on-write
//                      faults the parent pays while a snapshot runs.
// Run it also with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc >= 2.35:
// malloc's heap in transparent huge pages) for the comparison in
// docs/perf/2026-11-29-snapshot-stall-fork.md: this single-threaded process
// then gets its heap in 2 MiB pages and forks ~3x faster; the service does not
// (its heap is spread over per-thread arenas, AnonHugePages stays 0), so it
// does not set it. Run: bazel run -c opt
// //cache_service:snapshot_stall_benchmark
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "cache_service/cache_state.h"

namespace radixkv::cache_service {
namespace {

constexpr int kPromptTokens = 256;
constexpr int kSharedTokens = 192;
constexpr int kPrefixes = 16;
constexpr int64_t kCapacity = 1 << 20;

class Workload {
 public:
  Workload() : rng_(42) {
    for (int p = 0; p < kPrefixes; ++p) {
      std::vector<int32_t> prefix(kSharedTokens);
      for (int32_t& t : prefix) t = static_cast<int32_t>(rng_() % 32000);
      prefixes_.push_back(std::move(prefix));
    }
    RegisterWorkerRequest r;
    r.worker_id = "w";
    r.address = "w:1";
    r.capacity_slots = kCapacity;
    r.page_size = 16;
    r.model = "m";
    r.epoch = 1;
    r.vocab_size = 32000;
    if (!state_.RegisterWorker(r, now_).ok()) std::abort();
    // Fill until eviction has run for a while (cached tokens ~ capacity).
    for (int i = 0; i < (kCapacity / (kPromptTokens - kSharedTokens)) + 4096;
         ++i) {
      Pair();
    }
  }

  void Pair() {
    AcquireRequest a;
    a.worker_id = "w";
    a.epoch = 1;
    a.tokens = prefixes_[next_++ % prefixes_.size()];
    while (static_cast<int>(a.tokens.size()) < kPromptTokens) {
      a.tokens.push_back(static_cast<int32_t>(rng_() % 32000));
    }
    absl::StatusOr<AcquireResult> lease = state_.Acquire(a, ++now_);
    if (!lease.ok()) std::abort();
    if (!state_.Commit(CommitRequest{lease->lease_id, a.tokens, false}, ++now_)
             .ok()) {
      std::abort();
    }
  }

  CacheState& state() { return state_; }
  int64_t cached_tokens() {
    auto stats = state_.Stats("", now_);
    return stats.ok() ? stats->workers[0].cached_tokens : -1;
  }
  int64_t tree_nodes() {
    auto stats = state_.Stats("", now_);
    return stats.ok() ? stats->tree_nodes : -1;
  }

 private:
  CacheState state_;
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> prefixes_;
  size_t next_ = 0;
  int64_t now_ = 1'000'000;
};

Workload& Shared() {
  static Workload* workload = new Workload();
  return *workload;
}

// kB value of a /proc/self/smaps_rollup field.
double RollupMb(const std::string& field) {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  while (in >> key) {
    double kb = 0;
    if (key == field + ":" && in >> kb) return kb / 1024;
  }
  return -1;
}

void AddStateCounters(benchmark::State& bench) {
  bench.counters["cached_tokens"] =
      static_cast<double>(Shared().cached_tokens());
  bench.counters["tree_nodes"] = static_cast<double>(Shared().tree_nodes());
  bench.counters["rss_MB"] = RollupMb("Rss");
  bench.counters["huge_MB"] = RollupMb("AnonHugePages");
}

void BM_SerializeStall(benchmark::State& bench) {
  Workload& w = Shared();
  size_t bytes = 0;
  for (auto _ : bench) {
    std::string blob = w.state().Serialize();
    bytes = blob.size();
    benchmark::DoNotOptimize(blob);
  }
  bench.counters["snapshot_MB"] = static_cast<double>(bytes) / (1 << 20);
  AddStateCounters(bench);
}
BENCHMARK(BM_SerializeStall)->Unit(benchmark::kMillisecond);

void BM_ForkStall(benchmark::State& bench) {
  Shared();
  for (auto _ : bench) {
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    const auto end = std::chrono::steady_clock::now();
    bench.SetIterationTime(std::chrono::duration<double>(end - start).count());
    if (pid > 0) waitpid(pid, nullptr, 0);
  }
  AddStateCounters(bench);
}
BENCHMARK(BM_ForkStall)->UseManualTime()->Unit(benchmark::kMillisecond);

// 1,000 pairs per iteration; with arg 1 a fresh child (sleeping) holds the
// copy-on-write view during them.
void BM_PairsWhileAChildLives(benchmark::State& bench) {
  Workload& w = Shared();
  for (auto _ : bench) {
    pid_t pid = -1;
    if (bench.range(0) == 1) {
      bench.PauseTiming();
      pid = fork();
      if (pid == 0) {
        pause();
        _exit(0);
      }
      bench.ResumeTiming();
    }
    for (int i = 0; i < 1000; ++i) w.Pair();
    if (pid > 0) {
      bench.PauseTiming();
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      bench.ResumeTiming();
    }
  }
  bench.SetItemsProcessed(bench.iterations() * 1000);
}
BENCHMARK(BM_PairsWhileAChildLives)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace radixkv::cache_service

int main(int argc, char** argv) {
  const char* tunables = getenv("GLIBC_TUNABLES");
  std::printf("GLIBC_TUNABLES=%s\n", tunables != nullptr ? tunables : "");
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Benchmarks of the cache service core (docs/perf.md "cache_service core"):
//   BM_Match4096      Match of a 4,096-token prompt against trees holding
//                     1,048,576 resident tokens over 8 workers (target
//                     <= 5 us); counters: tree metadata bytes per resident
//                     token (target <= 16 B) and per tree token.
//   BM_AcquireCommit  Acquire + Commit pairs per second, one thread, no
//                     Redis (target >= 20,000/s): 512-token prompts sharing a
//                     256-token system prompt, 64 generated tokens each,
//                     steady state with eviction.
//   BM_AcquireCommitMultiTurn  the same for growing conversations (each turn
//                     matches the previous one and appends 64 + 64 tokens).
// Run: bazel run -c opt //cache_service:cache_state_benchmark
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "cache_service/cache_state.h"

namespace radixkv::cache_service {
namespace {

constexpr int64_t kNow = 1'000'000;

std::vector<int32_t> RandomTokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = static_cast<int32_t>(rng() % 32000);
  return v;
}

void Register(CacheState& state, const std::string& id, int64_t capacity,
              int32_t page_size) {
  RegisterWorkerRequest r;
  r.worker_id = id;
  r.address = id + ":1";
  r.capacity_slots = capacity;
  r.page_size = page_size;
  r.model = "m";
  r.epoch = 1;
  r.vocab_size = 32000;
  if (!state.RegisterWorker(r, kNow).ok()) std::abort();
}

void Store(CacheState& state, const std::string& worker,
           const std::vector<int32_t>& tokens) {
  AcquireRequest a;
  a.worker_id = worker;
  a.epoch = 1;
  a.tokens = tokens;
  absl::StatusOr<AcquireResult> lease = state.Acquire(a, kNow);
  if (!lease.ok()) std::abort();
  if (!state.Commit(CommitRequest{lease->lease_id, tokens, false}, kNow).ok()) {
    std::abort();
  }
}

// 8 workers x 42 conversations of 4,096 tokens; every conversation starts
// with the same 1,024-token system prompt (resident once per worker), so
// 8 x (1,024 + 42 x 3,072) = 1,040,384 resident tokens. Conversations 0..7
// are replicated on all 8 workers (hot ones), the other 34 per worker are
// unique. Returns the state and one replicated conversation.
struct MillionTokenState {
  CacheState state;
  std::vector<int32_t> query;
};

MillionTokenState& MillionTokens() {
  static MillionTokenState* built = [] {
    constexpr int kWorkers = 8, kConversations = 42, kLength = 4096;
    auto* out = new MillionTokenState;
    std::mt19937 rng(7);
    for (int w = 0; w < kWorkers; ++w) {
      Register(out->state, "w" + std::to_string(w), 192 * 1024, 16);
    }
    const std::vector<int32_t> system = RandomTokens(rng, 1024);
    std::vector<std::vector<std::vector<int32_t>>> convs(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      for (int c = 0; c < kConversations; ++c) {
        std::vector<int32_t> tokens = system;
        if (c < 8 && w > 0) {
          tokens = convs[w - 1][c];
        } else {
          const std::vector<int32_t> tail = RandomTokens(rng, kLength - 1024);
          tokens.insert(tokens.end(), tail.begin(), tail.end());
        }
        convs[w].push_back(tokens);
        Store(out->state, "w" + std::to_string(w), tokens);
      }
    }
    out->query = convs[3][5];
    return out;
  }();
  return *built;
}

void BM_Match4096(benchmark::State& bench) {
  CacheState& state = MillionTokens().state;
  const StatsResult stats = state.Stats("", kNow).value();
  // The query: a replicated conversation (full hit on 8 workers' worth of
  // shared path, system-prompt-only hit elsewhere).
  MatchRequest request{"m", "", MillionTokens().query};
  int64_t matched = 0;
  for (auto _ : bench) {
    absl::StatusOr<MatchResult> result = state.Match(request, kNow);
    matched += result->workers[0].matched_tokens;
    benchmark::DoNotOptimize(result);
  }
  benchmark::DoNotOptimize(matched);
  bench.counters["resident_tokens"] =
      static_cast<double>(stats.resident_tokens);
  bench.counters["tree_tokens"] = static_cast<double>(stats.tree_tokens);
  bench.counters["tree_nodes"] = static_cast<double>(stats.tree_nodes);
  bench.counters["bytes_per_resident_token"] =
      static_cast<double>(stats.tree_metadata_bytes) / stats.resident_tokens;
  bench.counters["bytes_per_tree_token"] =
      static_cast<double>(stats.tree_metadata_bytes) / stats.tree_tokens;
}
BENCHMARK(BM_Match4096)->Unit(benchmark::kMicrosecond);

// Snapshot cost of the 1M-token state (what the service writes to Redis).
void BM_Serialize1M(benchmark::State& bench) {
  const CacheState& state = MillionTokens().state;
  size_t bytes = 0;
  for (auto _ : bench) {
    std::string snapshot = state.Serialize();
    bytes = snapshot.size();
    benchmark::DoNotOptimize(snapshot);
  }
  bench.counters["snapshot_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Serialize1M)->Unit(benchmark::kMillisecond);

void BM_Restore1M(benchmark::State& bench) {
  const std::string snapshot = MillionTokens().state.Serialize();
  for (auto _ : bench) {
    CacheState restored;
    if (!restored.Restore(snapshot).ok()) std::abort();
    benchmark::DoNotOptimize(restored);
  }
}
BENCHMARK(BM_Restore1M)->Unit(benchmark::kMillisecond);

void BM_AcquireCommit(benchmark::State& bench) {
  const int32_t page_size = static_cast<int32_t>(bench.range(0));
  std::mt19937 rng(11);
  CacheState state;
  Register(state, "w", 1 << 20, page_size);  // ~2,000 requests fit
  const std::vector<int32_t> system = RandomTokens(rng, 256);
  Store(state, "w", system);
  AcquireRequest acquire;
  acquire.worker_id = "w";
  acquire.epoch = 1;
  acquire.reserve_tokens = 64;
  acquire.tokens = system;
  acquire.tokens.resize(512);
  CommitRequest commit;
  int64_t now = kNow;
  for (auto _ : bench) {
    for (size_t i = 256; i < 512; ++i) {
      acquire.tokens[i] = static_cast<int32_t>(rng() % 32000);
    }
    absl::StatusOr<AcquireResult> lease = state.Acquire(acquire, now);
    if (!lease.ok()) {
      bench.SkipWithError(lease.status().ToString().c_str());
      break;
    }
    commit.lease_id = lease->lease_id;
    commit.tokens = acquire.tokens;
    for (int i = 0; i < 64; ++i) {
      commit.tokens.push_back(static_cast<int32_t>(rng() % 32000));
    }
    if (!state.Commit(commit, now).ok()) std::abort();
    ++now;
  }
  bench.SetItemsProcessed(bench.iterations());
  bench.counters["evicted_tokens"] =
      static_cast<double>(state.Stats("w", now)->workers[0].evicted_tokens);
}
BENCHMARK(BM_AcquireCommit)->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond);

void BM_AcquireCommitMultiTurn(benchmark::State& bench) {
  std::mt19937 rng(13);
  CacheState state;
  Register(state, "w", 1 << 20, 16);
  constexpr int kConversations = 64;
  std::vector<std::vector<int32_t>> history(kConversations);
  for (auto& h : history) h = RandomTokens(rng, 128);
  int64_t now = kNow;
  size_t c = 0;
  for (auto _ : bench) {
    std::vector<int32_t>& h = history[c++ % kConversations];
    if (h.size() > 8192) h.resize(128);  // start over
    const std::vector<int32_t> question = RandomTokens(rng, 64);
    h.insert(h.end(), question.begin(), question.end());
    AcquireRequest acquire;
    acquire.worker_id = "w";
    acquire.epoch = 1;
    acquire.reserve_tokens = 64;
    acquire.tokens = h;
    absl::StatusOr<AcquireResult> lease = state.Acquire(acquire, now);
    if (!lease.ok()) {
      bench.SkipWithError(lease.status().ToString().c_str());
      break;
    }
    const std::vector<int32_t> answer = RandomTokens(rng, 64);
    h.insert(h.end(), answer.begin(), answer.end());
    if (!state.Commit(CommitRequest{lease->lease_id, h, false}, now).ok()) {
      std::abort();
    }
    ++now;
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_AcquireCommitMultiTurn)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace radixkv::cache_service

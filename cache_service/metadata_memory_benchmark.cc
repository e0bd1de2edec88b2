// Heap bytes of the cache service's metadata per KV slot (the numbers
// behind --max_total_slots, docs/architecture.md "Memory bound"): for each
// scenario, the heap in use (glibc mallinfo2: arena + mmapped chunks) after
// building it minus before, divided by the pool slots.
//   allocator        Register only: the page allocator (ref count, protect
//                    count and free-list entry per page).
//   long sequences   + the pool filled by committed 1,024-token sequences
//                    (distinct after a shared 64-token prefix): a few long
//                    edges, the common case.
//   one node/token   + the pool filled by every 19-token sequence over a
//                    2-token alphabet (a full binary trie): every node holds
//                    one token, the worst case for tree records.
//   fork leases      bytes per live lease: 1-token Fork children.
// Run: bazel run -c opt //cache_service:metadata_memory_benchmark
#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cache_service/cache_state.h"

namespace radixkv::cache_service {
namespace {

constexpr int64_t kNow = 1'000'000;

int64_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

void MustRegister(CacheState& state, int64_t capacity, int32_t page_size) {
  RegisterWorkerRequest r;
  r.worker_id = "worker-0";
  r.address = "127.0.0.1:50051";
  r.capacity_slots = capacity;
  r.page_size = page_size;
  r.model = "radixkv-demo-llama";
  r.epoch = 1;
  r.vocab_size = 32000;
  if (!state.RegisterWorker(r, kNow).ok()) std::abort();
}

void MustStore(CacheState& state, const std::vector<int32_t>& tokens) {
  AcquireRequest a;
  a.worker_id = "worker-0";
  a.epoch = 1;
  a.tokens = tokens;
  absl::StatusOr<AcquireResult> lease = state.Acquire(a, kNow);
  if (!lease.ok()) std::abort();
  if (!state.Commit(CommitRequest{lease->lease_id, tokens, false}, kNow).ok()) {
    std::abort();
  }
}

void PrintRow(const char* scenario, int32_t page_size, int64_t units,
              const char* unit, int64_t bytes) {
  std::printf("%-16s %9d %12lld %-6s %14lld %10.1f\n", scenario, page_size,
              static_cast<long long>(units), unit,
              static_cast<long long>(bytes),
              static_cast<double>(bytes) / static_cast<double>(units));
}

void Allocator(int32_t page_size) {
  constexpr int64_t kSlots = int64_t{1} << 22;
  const int64_t before = HeapInUse();
  CacheState state;
  MustRegister(state, kSlots, page_size);
  PrintRow("allocator", page_size, kSlots, "slots", HeapInUse() - before);
}

void LongSequences(int32_t page_size) {
  constexpr int64_t kSlots = int64_t{1} << 20;
  std::mt19937 rng(7);
  const int64_t before = HeapInUse();
  CacheState state;
  MustRegister(state, kSlots, page_size);
  std::vector<int32_t> tokens(1024);
  for (int32_t i = 0; i < 64; ++i) tokens[i] = i;
  // 64 + n x 960 tokens resident; leave a page of room for the next lease.
  for (int64_t resident = 64; resident + 960 + page_size <= kSlots;
       resident += 960) {
    for (size_t i = 64; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng() % 32000);
    }
    MustStore(state, tokens);
  }
  PrintRow("long sequences", page_size, kSlots, "slots", HeapInUse() - before);
}

void OneNodePerToken() {
  constexpr int kDepth = 19;  // 2^20 - 2 nodes of one token each
  constexpr int64_t kSlots = int64_t{1} << 20;
  const int64_t before = HeapInUse();
  CacheState state;
  MustRegister(state, kSlots, 1);
  std::vector<int32_t> tokens(kDepth);
  for (int64_t bits = 0; bits < (int64_t{1} << kDepth); ++bits) {
    for (int d = 0; d < kDepth; ++d) tokens[d] = (bits >> (kDepth - 1 - d)) & 1;
    MustStore(state, tokens);
  }
  PrintRow("one node/token", 1, kSlots, "slots", HeapInUse() - before);
}

void ForkLeases() {
  constexpr int32_t kForks = 4096;
  CacheState state;
  MustRegister(state, 1024, 1);
  AcquireRequest a;
  a.worker_id = "worker-0";
  a.epoch = 1;
  a.tokens = {1, 2};
  const uint64_t parent = state.Acquire(a, kNow)->lease_id;
  const int64_t before = HeapInUse();
  for (int32_t i = 0; i < kForks; ++i) {
    if (!state.Fork(ForkRequest{parent, 64, 1}, kNow).ok()) std::abort();
  }
  PrintRow("fork leases", 1, int64_t{kForks} * 64, "leases",
           HeapInUse() - before);
}

}  // namespace
}  // namespace radixkv::cache_service

int main() {
  namespace cs = radixkv::cache_service;
  std::printf("%-16s %9s %12s %-6s %14s %10s\n", "scenario", "page_size",
              "count", "unit", "heap bytes", "bytes/unit");
  for (int32_t page_size : {1, 16}) cs::Allocator(page_size);
  for (int32_t page_size : {1, 16}) cs::LongSequences(page_size);
  cs::OneNodePerToken();
  cs::ForkLeases();
  return 0;
}

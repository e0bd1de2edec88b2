// Test support for the CacheState unit tests: request builders and a
// fixture with checked calls (every call that must succeed is followed by
// CheckInvariants).
#ifndef RADIXKV_CACHE_SERVICE_CACHE_STATE_TESTING_H_
#define RADIXKV_CACHE_SERVICE_CACHE_STATE_TESTING_H_

#include <sys/resource.h>

#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cache_service/cache_state.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service::testing {

inline constexpr int64_t kNow = 1'000'000;

// A worker of model "m" (or `model`) with vocab_size 1000.
inline RegisterWorkerRequest Worker(const std::string& id, int64_t capacity,
                                    int32_t page_size, int64_t epoch = 1,
                                    const std::string& model = "m") {
  RegisterWorkerRequest r;
  r.worker_id = id;
  r.address = id + ":50051";
  r.capacity_slots = capacity;
  r.page_size = page_size;
  r.model = model;
  r.epoch = epoch;
  r.vocab_size = 1000;
  return r;
}

inline AcquireRequest Acq(const std::string& worker,
                          std::vector<int32_t> tokens, int32_t reserve = 0,
                          int64_t epoch = 1) {
  AcquireRequest r;
  r.worker_id = worker;
  r.epoch = epoch;
  r.model = "m";
  r.tokens = std::move(tokens);
  r.reserve_tokens = reserve;
  return r;
}

// [from, to]
inline std::vector<int32_t> Range(int32_t from, int32_t to) {
  std::vector<int32_t> v(to - from + 1);
  std::iota(v.begin(), v.end(), from);
  return v;
}

inline std::vector<int32_t> Concat(std::vector<int32_t> a,
                                   const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Limits this process's address space (RLIMIT_AS) to its current size plus
// `headroom` bytes, so that a larger allocation fails with std::bad_alloc.
// For a death-test child only (irreversible). False if it could not.
inline bool LimitAddressSpace(int64_t headroom) {
  std::ifstream status("/proc/self/status");
  std::string line;
  int64_t vm_kb = -1;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) vm_kb = std::stoll(line.substr(7));
  }
  if (vm_kb < 0) return false;
  struct rlimit limit;
  limit.rlim_cur = limit.rlim_max =
      static_cast<rlim_t>(vm_kb * 1024 + headroom);
  return setrlimit(RLIMIT_AS, &limit) == 0;
}

// A CacheState with default options and checked calls at kNow.
class CacheStateTestBase : public ::testing::Test {
 protected:
  void Register(const RegisterWorkerRequest& r) {
    ASSERT_TRUE(state_.RegisterWorker(r, kNow).ok());
  }
  AcquireResult MustAcquire(const AcquireRequest& r) {
    absl::StatusOr<AcquireResult> result = state_.Acquire(r, kNow);
    EXPECT_TRUE(result.ok()) << result.status();
    ExpectInvariants();
    return result.ok() ? *result : AcquireResult{};
  }
  CommitResult MustCommit(uint64_t lease, std::vector<int32_t> tokens,
                          bool keep = false) {
    absl::StatusOr<CommitResult> result =
        state_.Commit(CommitRequest{lease, std::move(tokens), keep}, kNow);
    EXPECT_TRUE(result.ok()) << result.status();
    ExpectInvariants();
    return result.ok() ? *result : CommitResult{};
  }
  // Acquire + Commit of the whole prompt.
  void Store(const std::string& worker, const std::vector<int32_t>& tokens) {
    const AcquireResult a = MustAcquire(Acq(worker, tokens));
    MustCommit(a.lease_id, tokens);
  }
  WorkerStats StatsOf(const std::string& worker) {
    absl::StatusOr<StatsResult> s = state_.Stats(worker, kNow);
    EXPECT_TRUE(s.ok());
    return s->workers.at(0);
  }
  void ExpectInvariants() {
    const absl::Status s = state_.CheckInvariants();
    EXPECT_TRUE(s.ok()) << s << "\n" << state_.CanonicalDump();
  }
  void ExpectBalanced(const std::string& worker) {
    const WorkerStats s = StatsOf(worker);
    EXPECT_EQ(s.free_slots + s.evictable_slots + s.protected_slots,
              s.capacity_slots);
    ExpectInvariants();
  }

  CacheState state_;
};

}  // namespace radixkv::cache_service::testing

#endif  // RADIXKV_CACHE_SERVICE_CACHE_STATE_TESTING_H_

// Cost of a scheduler step against the number of waiting requests: 8
// running sequences decode (fake executor and cache service: scheduler
// work only) while W requests wait for memory; and the cost of accepting
// 1,000 arrivals into a queue of W. Prints a table (microseconds).
//   bazel run -c opt //worker:scheduler_benchmark
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "worker/scheduler.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/fake_model_executor.h"

namespace radixkv::worker {
namespace {

v1::GenerateRequest Request(const std::string& id, int max_new_tokens) {
  v1::GenerateRequest request;
  request.set_request_id(id);
  for (int i = 0; i < 16; ++i) request.mutable_token_ids()->add_ids(3 + i);
  request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  return request;
}

struct Row {
  int waiting;
  double step_us;
  double arrivals_us;
};

Row Measure(int waiting) {
  testing::FakeKvCacheClient cache(1 << 16, 16);
  testing::FakeModelExecutor executor(1 << 16, 16);
  SchedulerOptions options;
  options.start_thread = false;
  options.heartbeat_interval = absl::Hours(1);
  options.max_waiting_requests = 1 << 20;
  auto scheduler =
      Scheduler::Create(options, &executor, &cache, nullptr, nullptr);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) {
    streams.push_back(
        *(*scheduler)->Submit(Request(absl::StrCat("r", i), 4000)));
  }
  (*scheduler)->Step();
  cache.ExhaustNext("Acquire", 1 << 30);
  for (int i = 0; i < waiting; ++i) {
    streams.push_back(*(*scheduler)->Submit(Request(absl::StrCat("w", i), 4)));
  }
  (*scheduler)->Step();
  constexpr int kSteps = 500;  // Fewer than the running ones generate.
  absl::Time start = absl::Now();
  for (int i = 0; i < kSteps; ++i) (*scheduler)->Step();
  const double step_us =
      absl::ToDoubleMicroseconds(absl::Now() - start) / kSteps;
  start = absl::Now();
  for (int i = 0; i < 1000; ++i) {
    streams.push_back(*(*scheduler)->Submit(Request(absl::StrCat("a", i), 4)));
  }
  (*scheduler)->Step();
  const double arrivals_us = absl::ToDoubleMicroseconds(absl::Now() - start);
  return Row{waiting, step_us, arrivals_us};
}

}  // namespace
}  // namespace radixkv::worker

int main() {
  std::printf(
      "| waiting | step (8 decoding), us | 1,000 arrivals + step, us |\n");
  std::printf("| --- | --- | --- |\n");
  for (int waiting : {0, 100, 1000, 10000, 50000}) {
    const radixkv::worker::Row row = radixkv::worker::Measure(waiting);
    std::printf("| %d | %.1f | %.0f |\n", row.waiting, row.step_us,
                row.arrivals_us);
  }
  return 0;
}

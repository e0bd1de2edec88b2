// The scheduler tests' fixture: a Scheduler stepped by the test (no
// thread) over a FakeKvCacheClient and a FakeModelExecutor (or a subclass),
// request builders and the collection of a stream's events.
#ifndef RADIXKV_WORKER_TESTING_SCHEDULER_FIXTURE_H_
#define RADIXKV_WORKER_TESTING_SCHEDULER_FIXTURE_H_

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/scheduler.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/fake_model_executor.h"

namespace radixkv::worker::testing {

struct Result {
  std::vector<int32_t> tokens;
  absl::Status status;
  bool finished = false;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
};

class SchedulerFixture : public ::testing::Test {
 protected:
  // The scheduler's metrics, when a test sets it before Init (must outlive
  // scheduler_); null = none.
  WorkerMetrics* metrics_ = nullptr;

  // `executor`: a FakeModelExecutor subclass of the same capacity and page
  // size; null = a plain FakeModelExecutor. `heartbeat_interval`: the
  // scheduler's heartbeat thread period (an hour = no heartbeat in a test).
  void Init(int64_t capacity, int32_t page_size, SchedulerOptions options = {},
            bool with_cache = true,
            std::unique_ptr<FakeModelExecutor> executor = nullptr,
            absl::Duration heartbeat_interval = absl::Hours(1)) {
    cache_ = std::make_unique<FakeKvCacheClient>(capacity, page_size);
    executor_ = executor != nullptr
                    ? std::move(executor)
                    : std::make_unique<FakeModelExecutor>(capacity, page_size);
    options.start_thread = false;
    options.heartbeat_interval = heartbeat_interval;
    auto scheduler = Scheduler::Create(options, executor_.get(),
                                       with_cache ? cache_.get() : nullptr,
                                       nullptr, metrics_);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
  }

  std::vector<int32_t> RandomPrompt(int n) {
    std::uniform_int_distribution<int32_t> dist(
        3, FakeModelExecutor::kVocabSize - 1);
    std::vector<int32_t> out(n);
    for (int32_t& t : out) t = dist(rng_);
    return out;
  }

  static v1::GenerateRequest Request(const std::string& id,
                                     const std::vector<int32_t>& prompt,
                                     int max_new_tokens) {
    v1::GenerateRequest request;
    request.set_request_id(id);
    request.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(),
                                                       prompt.end());
    request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    return request;
  }

  std::shared_ptr<RequestStream> Submit(const v1::GenerateRequest& request) {
    auto stream = scheduler_->Submit(request);
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? *stream : nullptr;
  }

  void RunUntilIdle(int max_steps = 20000) {
    for (int i = 0; i < max_steps && !scheduler_->Idle(); ++i) {
      scheduler_->Step();
    }
    ASSERT_TRUE(scheduler_->Idle()) << "scheduler did not finish";
  }

  static Result Collect(RequestStream& stream, Result result = {}) {
    GenerateEvent event;
    while (stream.Pop(&event, absl::ZeroDuration())) {
      EXPECT_FALSE(result.finished) << "event after the final one";
      result.tokens.insert(result.tokens.end(), event.token_ids.begin(),
                           event.token_ids.end());
      result.usage = event.usage;
      if (event.finished) {
        result.finished = true;
        result.reason = event.finish_reason;
        result.status = event.status;
      }
    }
    return result;
  }

  std::mt19937 rng_{12345};
  std::unique_ptr<FakeKvCacheClient> cache_;
  std::unique_ptr<FakeModelExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_TESTING_SCHEDULER_FIXTURE_H_

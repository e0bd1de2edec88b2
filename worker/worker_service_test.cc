#include "worker/worker_service.h"

#include <memory>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/fake_model_executor.h"

namespace radixkv::worker {
namespace {

using testing::FakeKvCacheClient;
using testing::FakeModelExecutor;

// The Worker service on an in-process gRPC server over a scheduler thread,
// the fake executor and the fake cache service.
class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = std::make_unique<FakeKvCacheClient>(1024, 16);
    executor_ = std::make_unique<FakeModelExecutor>(1024, 16);
    SchedulerOptions options;
    options.worker_id = "w-test";
    options.heartbeat_interval = absl::Hours(1);
    auto scheduler = Scheduler::Create(options, executor_.get(), cache_.get(),
                                       nullptr, nullptr);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
    service_ = std::make_unique<WorkerServiceImpl>(scheduler_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::Worker::NewStub(server_->InProcessChannel({}));
  }

  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now());
    scheduler_.reset();
  }

  static v1::GenerateRequest Request(const std::string& id, int n,
                                     int max_new_tokens) {
    v1::GenerateRequest request;
    request.set_request_id(id);
    for (int i = 0; i < n; ++i) request.mutable_token_ids()->add_ids(3 + i);
    request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
    return request;
  }

  // Streams one request to the end; returns its status.
  grpc::Status Run(const v1::GenerateRequest& request,
                   std::vector<v1::GenerateResponse>* out) {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) out->push_back(response);
    return reader->Finish();
  }

  template <typename Pred>
  static bool WaitFor(Pred pred) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!pred()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }

  std::unique_ptr<FakeKvCacheClient> cache_;
  std::unique_ptr<FakeModelExecutor> executor_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

TEST_F(WorkerServiceTest, StreamsOneResponsePerTokenThenFinishes) {
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = Request("r1", 10, 5);
  ASSERT_TRUE(Run(request, &responses).ok());
  ASSERT_EQ(responses.size(), 5u);
  std::vector<int32_t> prompt(request.token_ids().ids().begin(),
                              request.token_ids().ids().end());
  std::vector<int32_t> expected = executor_->Generate(prompt, 5);
  for (size_t i = 0; i < responses.size(); ++i) {
    EXPECT_EQ(responses[i].request_id(), "r1");
    EXPECT_EQ(responses[i].worker_id(), "w-test");
    ASSERT_EQ(responses[i].token_ids_size(), 1);
    EXPECT_EQ(responses[i].token_ids(0), expected[i]);
    EXPECT_EQ(responses[i].usage().completion_tokens(), i + 1);
    EXPECT_EQ(responses[i].finished(), i + 1 == responses.size());
  }
  EXPECT_EQ(responses.back().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(responses.back().usage().prompt_tokens(), 10);

  v1::WorkerStatsResponse stats;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->GetStats(&context, v1::WorkerStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.worker_id(), "w-test");
  EXPECT_EQ(stats.device(), "fake");
  EXPECT_EQ(stats.capacity_slots(), 1024);
  EXPECT_EQ(stats.page_size(), 16);
  EXPECT_EQ(stats.prefill_tokens_computed(), 10);
  EXPECT_EQ(stats.decode_tokens(), 5);
  EXPECT_EQ(stats.requests_finished(), 1);
  EXPECT_EQ(stats.epoch(), cache_->epoch());
}

TEST_F(WorkerServiceTest, ErrorsMapToGrpcCodes) {
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest bad = Request("bad", 4, 0);
  EXPECT_EQ(Run(bad, &responses).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest other_model = Request("m", 4, 2);
  other_model.set_model("not-this-one");
  EXPECT_EQ(Run(other_model, &responses).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  cache_->SetUnavailable(true);
  EXPECT_EQ(Run(Request("u", 4, 2), &responses).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  cache_->SetUnavailable(false);
  EXPECT_TRUE(responses.empty());
  EXPECT_EQ(cache_->active_leases(), 0);
}

// The unknown model is echoed in the status message, which travels in gRPC
// metadata; a 100 kB name reached remote clients as RESOURCE_EXHAUSTED
// "received initial metadata size exceeds limit". Now the echo is bounded.
TEST_F(WorkerServiceTest, HugeUnknownModelIsInvalidWithABoundedMessage) {
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = Request("huge-model", 4, 2);
  request.set_model(std::string(100000, 'm'));
  grpc::Status status = Run(request, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "unknown model of 100000 bytes (this worker serves '" +
                SchedulerOptions().model_name + "')");
  EXPECT_TRUE(responses.empty());
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(WorkerServiceTest, AbortRpcAndClientCancelReleaseLeases) {
  executor_->set_step_delay(absl::Milliseconds(2));
  // Abort RPC.
  {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, Request("long", 8, 1000));
    v1::GenerateResponse first;
    ASSERT_TRUE(reader->Read(&first));
    EXPECT_EQ(cache_->active_leases(), 1);
    grpc::ClientContext abort_context;
    v1::AbortRequest abort;
    abort.set_request_id("long");
    v1::AbortResponse aborted;
    ASSERT_TRUE(stub_->Abort(&abort_context, abort, &aborted).ok());
    EXPECT_TRUE(aborted.aborted());
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(WaitFor([&] { return cache_->active_leases() == 0; }));
  }
  // Client cancellation.
  {
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, Request("gone", 8, 1000));
    v1::GenerateResponse first;
    ASSERT_TRUE(reader->Read(&first));
    context.TryCancel();
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_TRUE(WaitFor([&] { return cache_->active_leases() == 0; }));
    EXPECT_TRUE(
        WaitFor([&] { return scheduler_->Stats().requests_aborted == 2; }));
  }
  // Unknown id.
  grpc::ClientContext abort_context;
  v1::AbortRequest abort;
  abort.set_request_id("never-seen");
  v1::AbortResponse aborted;
  ASSERT_TRUE(stub_->Abort(&abort_context, abort, &aborted).ok());
  EXPECT_FALSE(aborted.aborted());
  EXPECT_EQ(cache_->calls("Release"), 2);
  // Only keep_lease commits of computed prompts; no aborted lease was
  // committed.
  EXPECT_TRUE(cache_->commits().empty());
}

TEST_F(WorkerServiceTest, DuplicateInFlightIdIsAlreadyExists) {
  executor_->set_step_delay(absl::Milliseconds(2));
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, Request("dup", 8, 1000));
  v1::GenerateResponse first;
  ASSERT_TRUE(reader->Read(&first));
  std::vector<v1::GenerateResponse> responses;
  EXPECT_EQ(Run(Request("dup", 8, 2), &responses).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  context.TryCancel();
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  reader->Finish();
  EXPECT_TRUE(WaitFor([&] { return cache_->active_leases() == 0; }));
}

}  // namespace
}  // namespace radixkv::worker

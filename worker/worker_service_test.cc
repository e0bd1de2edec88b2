#include "worker/worker_service.h"

#include <dirent.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/fake_model_executor.h"

namespace radixkv::worker {
namespace {

using testing::FakeKvCacheClient;
using testing::FakeModelExecutor;

// Threads of this process (entries of /proc/self/task).
int CountThreads() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

// One Worker.Generate on gRPC's client callback API (no client thread per
// call, so that a test can hold thousands in flight).
class StreamingCall : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  StreamingCall(v1::Worker::Stub* stub, v1::GenerateRequest request,
                absl::Duration deadline = absl::Seconds(60))
      : request_(std::move(request)) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    stub->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      absl::MutexLock lock(&mu_);
      tokens_ += response_.token_ids_size();
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }

  void Cancel() { context_.TryCancel(); }
  // Tokens received so far.
  int tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  // Waits for the end of the call (at most its deadline plus a grace).
  grpc::Status Await() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(120));
    return done_ ? status_ : grpc::Status(grpc::StatusCode::UNKNOWN, "hung");
  }

 private:
  v1::GenerateRequest request_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;
  absl::Mutex mu_;
  int tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

// The Worker service on an in-process gRPC server over a scheduler thread,
// the fake executor and the fake cache service.
class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(SchedulerOptions()); }

  void TearDown() override { Stop(); }

  void Start(SchedulerOptions options) {
    cache_ = std::make_unique<FakeKvCacheClient>(1024, 16);
    executor_ = std::make_unique<FakeModelExecutor>(1024, 16);
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

  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
    scheduler_.reset();
  }

  void Restart(SchedulerOptions options) {
    Stop();
    Start(std::move(options));
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

// A queued request costs no thread: 2,000 requests waiting for memory add
// fewer threads to the process than a margin independent of their number.
TEST_F(WorkerServiceTest, QueuedRequestsCostNoThread) {
  constexpr int kRequests = 2000;
  constexpr int kThreadMargin = 64;
  SchedulerOptions options;
  options.max_waiting_requests = kRequests;
  Restart(options);
  // gRPC starts its threads lazily: serve one request first.
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Run(Request("warm-up", 4, 1), &responses).ok());
  const int before = CountThreads();
  cache_->ExhaustNext("Acquire", 1 << 30);
  std::vector<std::unique_ptr<StreamingCall>> calls;
  for (int i = 0; i < kRequests; ++i) {
    calls.push_back(std::make_unique<StreamingCall>(
        stub_.get(), Request(absl::StrCat("q", i), 4, 1)));
  }
  ASSERT_TRUE(WaitFor([&] {
    return scheduler_->Stats().load.waiting_requests() == kRequests;
  }));
  const int during = CountThreads();
  std::cout << "threads: " << before << " before, " << during << " with "
            << kRequests << " requests waiting\n";
  EXPECT_LE(during - before, kThreadMargin)
      << before << " threads before, " << during << " with " << kRequests
      << " requests waiting";
  cache_->ExhaustNext("Acquire", 0);
  for (auto& call : calls) {
    EXPECT_TRUE(call->Await().ok());
    EXPECT_EQ(call->tokens(), 1);
  }
  EXPECT_EQ(scheduler_->Stats().requests_finished, kRequests + 1);
  EXPECT_EQ(cache_->active_leases(), 0);
}

// A client that goes away (cancellation or its deadline) aborts its request
// exactly once, queued or running; the running one's lease is released.
TEST_F(WorkerServiceTest, ClientsGoneAbortTheirRequestsOnce) {
  SchedulerOptions options;
  options.max_running_requests = 1;
  Restart(options);
  executor_->set_step_delay(absl::Milliseconds(10));
  StreamingCall running(stub_.get(), Request("running", 8, 1000));
  ASSERT_TRUE(WaitFor([&] { return running.tokens() > 0; }));
  StreamingCall queued(stub_.get(), Request("queued", 8, 4));
  StreamingCall expires(stub_.get(), Request("expires", 8, 4),
                        absl::Seconds(2));
  ASSERT_TRUE(WaitFor(
      [&] { return scheduler_->Stats().load.waiting_requests() == 2; }));
  EXPECT_EQ(expires.Await().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  queued.Cancel();
  EXPECT_EQ(queued.Await().error_code(), grpc::StatusCode::CANCELLED);
  // The client sees CANCELLED before the worker does: wait until the
  // worker has aborted the queued request, or the running one's slot,
  // freed next, could admit it first (a second Acquire and Release).
  ASSERT_TRUE(
      WaitFor([&] { return scheduler_->Stats().requests_aborted == 2; }));
  running.Cancel();
  EXPECT_EQ(running.Await().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(
      WaitFor([&] { return scheduler_->Stats().requests_aborted == 3; }));
  EXPECT_TRUE(WaitFor([&] { return cache_->active_leases() == 0; }));
  EXPECT_EQ(cache_->calls("Release"), 1);
  EXPECT_EQ(cache_->calls("Acquire"), 1);
  EXPECT_EQ(scheduler_->Stats().requests_aborted, 3);
  EXPECT_EQ(scheduler_->Stats().requests_finished, 0);
  EXPECT_TRUE(scheduler_->Idle());
}

// Request bytes that do not parse as the method's message are
// INVALID_ARGUMENT naming the message and its size (gRPC's own parsing
// answered INTERNAL with an empty message).
TEST_F(WorkerServiceTest, UnparseableRequestBytesAreInvalidArgument) {
  grpc::GenericStub generic(server_->InProcessChannel({}));
  const std::string garbage = "\xff\xff\xff\xff\x0f";
  auto garbage_bytes = [&] {
    grpc::Slice slice(garbage);
    return grpc::ByteBuffer(&slice, 1);
  };
  for (const char* name : {"Abort", "GetStats"}) {
    grpc::ClientContext context;
    grpc::ByteBuffer request = garbage_bytes();
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, absl::StrCat("/radixkv.v1.Worker/", name), {},
                      &request, &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    const std::string message =
        std::string(name) == "Abort" ? "AbortRequest" : "WorkerStatsRequest";
    EXPECT_EQ(status.error_message(),
              message + ": unparseable message (5 bytes)");
  }
  // Generate, a server stream: sent as the one message of a stream.
  class RawStream
      : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    RawStream(grpc::GenericStub* stub, grpc::ByteBuffer request)
        : request_(std::move(request)) {
      stub->PrepareBidiStreamingCall(&context_, "/radixkv.v1.Worker/Generate",
                                     {}, this);
      StartWriteLast(&request_, grpc::WriteOptions());
      StartRead(&response_);
      StartCall();
    }
    void OnReadDone(bool ok) override {
      if (!ok) return;
      ++responses;
      StartRead(&response_);
    }
    void OnDone(const grpc::Status& s) override {
      status = s;
      done.Notify();
    }
    grpc::ClientContext context_;
    grpc::ByteBuffer request_;
    grpc::ByteBuffer response_;
    int responses = 0;
    grpc::Status status;
    absl::Notification done;
  };
  RawStream stream(&generic, garbage_bytes());
  stream.done.WaitForNotification();
  EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(stream.status.error_message(),
            "GenerateRequest: unparseable message (5 bytes)");
  EXPECT_EQ(stream.responses, 0);
  // The service still serves.
  std::vector<v1::GenerateResponse> responses;
  EXPECT_TRUE(Run(Request("after-garbage", 4, 2), &responses).ok());
  EXPECT_EQ(responses.size(), 2u);
  EXPECT_EQ(cache_->active_leases(), 0);
}

}  // namespace
}  // namespace radixkv::worker

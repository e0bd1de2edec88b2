// RouterService against in-process fakes of the cache service and workers
// (real gRPC on loopback): placement from Match, load counted at dispatch,
// failover before the first token, UNAVAILABLE after tokens, worker removal,
// Abort and client disconnect, policy override, ListWorkers.
#include "router/router_service.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace radixkv::router {
namespace {

// Expects the Prometheus text exposition `text` to contain `line`.
void ExpectMetricLine(const std::string& text, const std::string& line) {
  EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

using radixkv::v1::GenerateRequest;
using radixkv::v1::GenerateResponse;

std::unique_ptr<grpc::Server> StartServer(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// A worker that streams `num_tokens` tokens (one per chunk), or fails.
class FakeWorker final : public radixkv::v1::Worker::Service {
 public:
  enum class Mode {
    kStream,
    kFailBeforeFirst,
    kFailAfterTwo,
    kBlock,
    kRejectInvalid,
    kRejectNoFit,
    kStall,          // no output until cancelled (or the fake is destroyed)
    kAlreadyExists,  // the request id is still in flight here
    kNotRegistered   // a new process not yet registered with the service
  };
  explicit FakeWorker(std::string id) : id_(std::move(id)) {
    server_ = StartServer(this, &port_);
  }
  ~FakeWorker() override {
    release_.Notify();
    server_->Shutdown(std::chrono::system_clock::now());
  }

  grpc::Status Generate(grpc::ServerContext* ctx, const GenerateRequest* req,
                        grpc::ServerWriter<GenerateResponse>* writer) override {
    Mode mode = mode_.load();
    {
      absl::MutexLock l(&mu_);
      requests_.push_back(*req);
      if (!script_.empty()) {
        mode = script_.front();
        script_.erase(script_.begin());
      }
    }
    if (mode == Mode::kAlreadyExists) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("request_id '", req->request_id(),
                                       "' is already in flight"));
    }
    if (mode == Mode::kNotRegistered) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "worker w: not registered with the cache service");
    }
    if (mode == Mode::kFailBeforeFirst) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake worker down");
    }
    if (mode == Mode::kRejectInvalid) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "top_p must be in (0, 1]");
    }
    if (mode == Mode::kRejectNoFit) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "prompt cannot fit the KV pool");
    }
    if (mode == Mode::kStall) {
      while (!ctx->IsCancelled() &&
             !release_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
      }
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    if (mode == Mode::kBlock) {
      GenerateResponse first;
      first.add_token_ids(7);
      writer->Write(first);
      while (!ctx->IsCancelled() &&
             !release_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
      }
      if (ctx->IsCancelled()) {
        cancelled_++;
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      return grpc::Status::OK;
    }
    for (int i = 0; i < 3; ++i) {
      if (mode == Mode::kFailAfterTwo && i == 2) {
        return grpc::Status(grpc::StatusCode::INTERNAL, "fake crash");
      }
      GenerateResponse chunk;
      chunk.set_request_id(req->request_id());
      chunk.add_token_ids(100 + i);
      chunk.set_worker_id(id_);
      chunk.set_finished(i == 2);
      writer->Write(chunk);
    }
    return grpc::Status::OK;
  }
  grpc::Status Abort(grpc::ServerContext*, const radixkv::v1::AbortRequest* r,
                     radixkv::v1::AbortResponse* out) override {
    absl::MutexLock l(&mu_);
    aborts_.push_back(r->request_id());
    out->set_aborted(true);
    return grpc::Status::OK;
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  const std::string& id() const { return id_; }
  void set_mode(Mode m) { mode_ = m; }
  // The modes of the next calls, in order (then set_mode's).
  void set_script(std::vector<Mode> modes) {
    absl::MutexLock l(&mu_);
    script_ = std::move(modes);
  }
  std::vector<GenerateRequest> requests() {
    absl::MutexLock l(&mu_);
    return requests_;
  }
  std::vector<std::string> aborts() {
    absl::MutexLock l(&mu_);
    return aborts_;
  }
  int cancelled() const { return cancelled_.load(); }

 private:
  std::string id_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<Mode> mode_{Mode::kStream};
  absl::Notification release_;
  absl::Mutex mu_;
  std::vector<GenerateRequest> requests_;
  std::vector<std::string> aborts_;
  std::vector<Mode> script_;
  std::atomic<int> cancelled_{0};
};

// A cache service whose Match/Stats report a configurable worker set.
class FakeCacheService final : public radixkv::v1::CacheService::Service {
 public:
  struct Entry {
    std::string id, address;
    int64_t epoch = 1, matched = 0, outstanding = 0;
    // Empty: the worker serves every model (Stats reports "demo").
    std::string model;
    bool unconfirmed = false;
  };
  FakeCacheService() { server_ = StartServer(this, &port_); }
  ~FakeCacheService() override {
    server_->Shutdown(std::chrono::system_clock::now());
  }
  grpc::Status Match(grpc::ServerContext*, const radixkv::v1::MatchRequest* r,
                     radixkv::v1::MatchResponse* out) override {
    absl::Duration delay;
    {
      absl::MutexLock l(&mu_);
      delay = match_delay_;
    }
    absl::SleepFor(delay);
    absl::MutexLock l(&mu_);
    if (down_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
    ++matches_;
    last_model_ = r->model();
    for (const Entry& e : entries_) {
      if (!e.model.empty() && e.model != r->model()) continue;
      auto* w = out->add_workers();
      w->set_worker_id(e.id);
      w->set_address(e.address);
      w->set_epoch(e.epoch);
      w->set_matched_tokens(std::min<int64_t>(e.matched, r->tokens_size()));
      w->mutable_load()->set_outstanding_tokens(e.outstanding);
      w->set_unconfirmed(e.unconfirmed);
    }
    return grpc::Status::OK;
  }
  grpc::Status Stats(grpc::ServerContext*, const radixkv::v1::StatsRequest*,
                     radixkv::v1::StatsResponse* out) override {
    absl::MutexLock l(&mu_);
    if (down_ || stats_down_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
    }
    ++stats_calls_;
    for (const Entry& e : entries_) {
      auto* w = out->add_workers();
      w->set_worker_id(e.id);
      w->set_address(e.address);
      w->set_epoch(e.epoch);
      w->set_model(e.model.empty() ? "demo" : e.model);
      w->set_cached_tokens(e.matched);
      w->set_capacity_slots(4096);
      w->set_page_size(16);
    }
    return grpc::Status::OK;
  }
  void set_down(bool down) {
    absl::MutexLock l(&mu_);
    down_ = down;
  }
  // Match answers this late (a frozen or overloaded service).
  void set_match_delay(absl::Duration delay) {
    absl::MutexLock l(&mu_);
    match_delay_ = delay;
  }
  // Only Stats fails (Match keeps answering).
  void set_stats_down(bool down) {
    absl::MutexLock l(&mu_);
    stats_down_ = down;
  }
  // Stats calls answered OK so far.
  int stats_calls() {
    absl::MutexLock l(&mu_);
    return stats_calls_;
  }
  void Set(std::vector<Entry> entries) {
    absl::MutexLock l(&mu_);
    entries_ = std::move(entries);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int matches() {
    absl::MutexLock l(&mu_);
    return matches_;
  }
  std::string last_model() {
    absl::MutexLock l(&mu_);
    return last_model_;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::vector<Entry> entries_;
  int matches_ = 0;
  int stats_calls_ = 0;
  bool down_ = false;
  bool stats_down_ = false;
  absl::Duration match_delay_;
  std::string last_model_;
};

std::atomic<int> g_encode_calls{0};

// Token id = byte value, BOS 1.
class CharTokenizer : public model::Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text, bool add_special_tokens) const override {
    ++g_encode_calls;
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(1);
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool) const override {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id));
    return s;
  }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> TokenToId(absl::string_view) const override {
    return std::nullopt;
  }
  std::optional<std::string> IdToToken(int32_t) const override {
    return std::nullopt;
  }
  bool IsSpecial(int32_t id) const override { return id == 1; }
};

// A catalog whose model "demo" (and any name given) uses CharTokenizer.
std::unique_ptr<ModelCatalog> CharCatalog(
    const std::vector<std::string>& models = {"demo"}) {
  auto catalog = std::make_unique<ModelCatalog>(
      std::vector<std::pair<std::string, std::string>>{}, "");
  for (const std::string& name : models) {
    auto entry = std::make_shared<ModelCatalog::Entry>();
    entry->name = name;
    entry->tokenizer = std::make_shared<CharTokenizer>();
    entry->max_position_embeddings = 4096;
    entry->max_prompt_text_bytes = 4096 * 32;
    catalog->Add(std::move(entry));
  }
  return catalog;
}

struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string worker_id;
};

class RouterServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<FakeWorker>("worker-a");
    b_ = std::make_unique<FakeWorker>("worker-b");
    cache_.Set({{"worker-a", a_->address()}, {"worker-b", b_->address()}});
  }

  void StartRouter(RouterOptions options = {}) {
    options.cache_service_address = cache_.address();
    options.retry_backoff = absl::Milliseconds(1);
    metrics_ = std::make_unique<RouterMetrics>(registry_);
    catalog_ = CharCatalog();
    auto service =
        RouterService::Create(options, catalog_.get(), metrics_.get());
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    server_ = StartServer(service_.get(), &port_);
    stub_ = radixkv::v1::Router::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    if (service_) service_->Shutdown();
  }

  static GenerateRequest Tokens(std::vector<int32_t> ids, std::string id = "") {
    GenerateRequest r;
    r.set_request_id(id);
    r.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
    r.mutable_sampling()->set_max_new_tokens(3);
    return r;
  }

  // With worker-a as the only worker, holding every stream open after its
  // first token: starts the router and a Generate of `ids` as request `id`
  // on `ctx`, and returns its reader once that first chunk has arrived
  // (nullptr, with a test failure, if it does not).
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> OpenHeldStream(
      grpc::ClientContext* ctx, std::vector<int32_t> ids,
      const std::string& id) {
    cache_.Set({{"worker-a", a_->address(), 1, 0}});
    a_->set_mode(FakeWorker::Mode::kBlock);
    StartRouter();
    auto reader = stub_->Generate(ctx, Tokens(std::move(ids), id));
    GenerateResponse chunk;
    if (!reader->Read(&chunk)) {
      ADD_FAILURE() << "no first chunk for " << id;
      return nullptr;
    }
    EXPECT_EQ(chunk.token_ids_size(), 1);
    return reader;
  }

  StreamResult Run(const GenerateRequest& req, const std::string& policy = "") {
    grpc::ClientContext ctx;
    if (!policy.empty()) ctx.AddMetadata(kPolicyOverrideMetadataKey, policy);
    auto reader = stub_->Generate(&ctx, req);
    StreamResult out;
    GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      out.tokens.insert(out.tokens.end(), chunk.token_ids().begin(),
                        chunk.token_ids().end());
      out.worker_id = chunk.worker_id();
    }
    out.status = reader->Finish();
    return out;
  }

  std::string MetricsText() {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  }

  FakeCacheService cache_;
  std::unique_ptr<FakeWorker> a_, b_;
  std::unique_ptr<ModelCatalog> catalog_;
  prometheus::Registry registry_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<RouterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<radixkv::v1::Router::Stub> stub_;
};

TEST_F(RouterServiceTest, CacheAwareRoutesToTheWorkerHoldingThePrefix) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 0}, {"worker-b", b_->address(), 1, 90}});
  StartRouter();
  std::vector<int32_t> prompt(100, 5);
  StreamResult r = Run(Tokens(prompt, "req-1"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, std::vector<int32_t>({100, 101, 102}));
  EXPECT_EQ(r.worker_id, "worker-b");
  EXPECT_EQ(a_->requests().size(), 0u);
  ASSERT_EQ(b_->requests().size(), 1u);
  EXPECT_EQ(b_->requests()[0].request_id(), "req-1");
  EXPECT_EQ(b_->requests()[0].token_ids().ids_size(), 100);
  EXPECT_EQ(cache_.last_model(), "demo");  // discovered through Stats
  const std::string text = MetricsText();
  ExpectMetricLine(
      text,
      "radixkv_router_requests_total{api=\"grpc\",decision=\"prefix_hit\","
      "outcome=\"ok\",policy=\"cache_aware\"} 1");
  ExpectMetricLine(text,
                   "radixkv_router_predicted_hit_tokens_total{policy="
                   "\"cache_aware\"} 90");
  ExpectMetricLine(text,
                   "radixkv_router_dispatch_total{worker_id=\"worker-b\"} 1");
  ExpectMetricLine(text,
                   "radixkv_router_routing_latency_seconds_count{policy="
                   "\"cache_aware\"} 1");
  // Three streamed tokens: one end-to-end and exactly one TTFT sample.
  ExpectMetricLine(
      text,
      "radixkv_router_request_duration_seconds_count{api=\"grpc\",outcome="
      "\"ok\",policy=\"cache_aware\"} 1\n");
  ExpectMetricLine(text,
                   "radixkv_router_time_to_first_token_seconds_count{"
                   "api=\"grpc\",policy=\"cache_aware\"} 1\n");
}

// The router discovers the served model in the background from start-up, so
// that no request pays a Stats round trip on its routing path: a first
// request succeeds although Stats fails by then.
TEST_F(RouterServiceTest, DiscoversTheModelBeforeTheFirstRequest) {
  StartRouter();
  // Two answered Stats calls: the first one's result is recorded (the
  // background loop is sequential).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (cache_.stats_calls() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GE(cache_.stats_calls(), 2) << "no background model discovery";
  cache_.set_stats_down(true);
  StreamResult r = Run(Tokens({1, 2, 3}, "req-first"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, std::vector<int32_t>({100, 101, 102}));
  EXPECT_EQ(cache_.last_model(), "demo");
}

TEST_F(RouterServiceTest, TextPromptsAreTokenizedOnceAndForwardedAsIds) {
  StartRouter();
  GenerateRequest req;
  req.set_text("hi");
  req.mutable_sampling()->set_max_new_tokens(3);
  StreamResult r = Run(req);
  ASSERT_TRUE(r.status.ok());
  auto got = a_->requests().empty() ? b_->requests() : a_->requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].prompt_case(), GenerateRequest::kTokenIds);
  EXPECT_EQ(std::vector<int32_t>(got[0].token_ids().ids().begin(),
                                 got[0].token_ids().ids().end()),
            std::vector<int32_t>({1, 'h', 'i'}));
  EXPECT_FALSE(got[0].request_id().empty());
}

TEST_F(RouterServiceTest, EmptyPromptIsInvalid) {
  StartRouter();
  StreamResult r = Run(GenerateRequest());
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 0u);
  const std::string text = MetricsText();
  ExpectMetricLine(
      text,
      "radixkv_router_request_duration_seconds_count{api=\"grpc\",outcome="
      "\"invalid_argument\"");
  EXPECT_EQ(text.find("radixkv_router_time_to_first_token_seconds_count"),
            std::string::npos)
      << text;
}

TEST_F(RouterServiceTest, FailsOverBeforeTheFirstToken) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 50}, {"worker-b", b_->address(), 1, 0}});
  a_->set_mode(FakeWorker::Mode::kFailBeforeFirst);
  StartRouter();
  StreamResult r = Run(Tokens(std::vector<int32_t>(60, 3)));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.worker_id, "worker-b");
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(a_->requests().size(), 1u);
  EXPECT_EQ(b_->requests().size(), 1u);
  EXPECT_NE(MetricsText().find("radixkv_router_retries_total{reason="
                               "\"unavailable\"} 1"),
            std::string::npos);
}

TEST_F(RouterServiceTest, EveryAttemptFailingIsUnavailableWithReasons) {
  a_->set_mode(FakeWorker::Mode::kFailBeforeFirst);
  b_->set_mode(FakeWorker::Mode::kFailBeforeFirst);
  RouterOptions options;
  options.max_attempts = 3;
  StartRouter(options);
  StreamResult r = Run(Tokens({1, 2, 3}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find("before its first token"),
            std::string::npos);
  EXPECT_NE(r.status.error_message().find("fake worker down"),
            std::string::npos);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 3u);
}

TEST_F(RouterServiceTest, FailureAfterTokensIsUnavailableAndNotRetried) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 50}, {"worker-b", b_->address(), 1, 0}});
  a_->set_mode(FakeWorker::Mode::kFailAfterTwo);
  StartRouter();
  StreamResult r = Run(Tokens(std::vector<int32_t>(60, 3), "req-x"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(r.tokens, std::vector<int32_t>({100, 101}));
  EXPECT_NE(r.status.error_message().find("after 2 tokens were streamed"),
            std::string::npos)
      << r.status.error_message();
  EXPECT_NE(r.status.error_message().find("worker-a"), std::string::npos);
  EXPECT_EQ(b_->requests().size(), 0u);
}

// A worker that failed is avoided for the cooldown, but only as the process
// that failed: registered again under a new epoch (restarted), it serves at
// once, even when it restarted faster than the cooldown.
TEST_F(RouterServiceTest, RestartedWorkerIsNotAvoidedForItsOldFailure) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 50}, {"worker-b", b_->address(), 1, 0}});
  a_->set_script({FakeWorker::Mode::kFailBeforeFirst});
  RouterOptions options;
  options.failed_worker_cooldown = absl::Hours(1);
  StartRouter(options);
  ASSERT_TRUE(Run(Tokens(std::vector<int32_t>(60, 3))).status.ok());
  ASSERT_EQ(a_->requests().size(), 1u);  // failed there, served by b
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Run(Tokens({1, 2, 3}), "round_robin").status.ok());
  }
  EXPECT_EQ(a_->requests().size(), 1u) << "epoch 1 is within its cooldown";
  cache_.Set(
      {{"worker-a", a_->address(), 2, 0}, {"worker-b", b_->address(), 1, 0}});
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Run(Tokens({1, 2, 3}), "round_robin").status.ok());
  }
  EXPECT_EQ(a_->requests().size(), 3u) << "epoch 2 is a new process";
}

// After a cache-service restart a worker restored from the journal is not
// placed on while a confirmed worker is live (the process at its address
// may be a new one, not registered yet); alone, it is still used.
TEST_F(RouterServiceTest, UnconfirmedWorkerIsUsedOnlyWithoutAlternative) {
  cache_.Set({{"worker-a", a_->address(), 1, 0, 0, "", true},
              {"worker-b", b_->address(), 1, 0, 0, "", false}});
  StartRouter();
  for (int i = 0; i < 4; ++i) {
    StreamResult r = Run(Tokens({1, 2, 3}), "round_robin");
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.worker_id, "worker-b");
  }
  cache_.Set({{"worker-a", a_->address(), 1, 0, 0, "", true}});
  StreamResult r = Run(Tokens({1, 2, 3}));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.worker_id, "worker-a");
}

// A worker that answers "not registered" (a new process behind a restored
// registration) is not tried again by the same request.
TEST_F(RouterServiceTest, NotRegisteredWorkerIsNotRetriedByTheRequest) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 50}, {"worker-b", b_->address(), 1, 0}});
  a_->set_script({FakeWorker::Mode::kNotRegistered});
  b_->set_mode(FakeWorker::Mode::kFailBeforeFirst);
  RouterOptions options;
  options.max_attempts = 4;
  StartRouter(options);
  StreamResult r = Run(Tokens(std::vector<int32_t>(60, 3)));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(a_->requests().size(), 1u) << "excluded after not registered";
  EXPECT_EQ(b_->requests().size(), 3u);
}

TEST_F(RouterServiceTest, RemovedWorkerDisappearsFromPlacementAtOnce) {
  StartRouter();
  cache_.Set({{"worker-b", b_->address(), 1, 0}});
  for (int i = 0; i < 6; ++i) {
    StreamResult r = Run(Tokens({1, 2, 3}), "round_robin");
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.worker_id, "worker-b");
  }
  EXPECT_EQ(a_->requests().size(), 0u);
}

TEST_F(RouterServiceTest, PolicyOverrideRoundRobinAlternates) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 50}, {"worker-b", b_->address(), 1, 0}});
  StartRouter();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        Run(Tokens(std::vector<int32_t>(60, 1)), "round_robin").status.ok());
  }
  EXPECT_EQ(a_->requests().size(), 2u);
  EXPECT_EQ(b_->requests().size(), 2u);
}

// A misspelt override silently ran the default policy (a policy comparison
// would have measured cache_aware twice).
TEST_F(RouterServiceTest, UnknownPolicyOverrideIsInvalid) {
  StartRouter();
  StreamResult r = Run(Tokens({1, 2, 3}), "round-robin");
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message(),
            "unknown placement policy 'round-robin' in metadata "
            "radixkv-placement-policy (one of " +
                absl::StrJoin(PlacementPolicyNames(), ", ") + ")");
  r = Run(Tokens({1, 2, 3}), std::string(5000, 'p'));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("of 5000 bytes"), std::string::npos);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 0u);
  EXPECT_EQ(cache_.matches(), 0);
  EXPECT_TRUE(Run(Tokens({1, 2, 3}), "round_robin").status.ok());
}

// At the end of the router's drain (main calls Shutdown) the streams still
// running ended with the worker stream's CANCELLED, reported as the
// worker's failure, or with gRPC's bare "Cancelling all calls"; now with a
// clear UNAVAILABLE, and the worker is not marked failed.
TEST_F(RouterServiceTest, ShutdownEndsStreamsWithAClearStatus) {
  grpc::ClientContext ctx;
  auto reader = OpenHeldStream(&ctx, {1, 2}, "cut-by-shutdown");
  ASSERT_NE(reader, nullptr);
  service_->Shutdown();
  GenerateResponse chunk;
  while (reader->Read(&chunk)) {
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(st.error_message(),
            "request cut-by-shutdown: the router is shutting down (its drain "
            "timeout passed) after 1 streamed tokens");
  // No new attempt is dispatched after Shutdown.
  StreamResult r = Run(Tokens({3, 4}, "after-shutdown"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find("shutting down"), std::string::npos)
      << r.status.error_message();
  EXPECT_EQ(a_->requests().size(), 1u);
}

TEST_F(RouterServiceTest, LoadIsCountedAtDispatch) {
  // Both workers hold nothing and report no load (heartbeat): the first
  // request blocks on one worker, so the second must go to the other one.
  a_->set_mode(FakeWorker::Mode::kBlock);
  b_->set_mode(FakeWorker::Mode::kBlock);
  RouterOptions options;
  options.policy = "least_load";
  StartRouter(options);
  grpc::ClientContext c1, c2;
  auto r1 = stub_->Generate(&c1, Tokens({1, 2, 3, 4}, "blk-1"));
  GenerateResponse chunk;
  ASSERT_TRUE(r1->Read(&chunk));
  auto r2 = stub_->Generate(&c2, Tokens({5, 6, 7, 8}, "blk-2"));
  ASSERT_TRUE(r2->Read(&chunk));
  EXPECT_EQ(a_->requests().size(), 1u);
  EXPECT_EQ(b_->requests().size(), 1u);
  radixkv::v1::ListWorkersResponse list;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListWorkers(&ctx, {}, &list).ok());
  }
  ASSERT_EQ(list.workers_size(), 2);
  EXPECT_EQ(list.workers(0).dispatched_requests(), 1);
  EXPECT_EQ(list.workers(1).dispatched_requests(), 1);
  EXPECT_EQ(list.workers(0).model(), "demo");
  c1.TryCancel();
  c2.TryCancel();
  r1->Finish();
  r2->Finish();
}

TEST_F(RouterServiceTest, AbortCancelsTheWorkerStream) {
  grpc::ClientContext ctx;
  auto reader = OpenHeldStream(&ctx, {1, 2}, "to-abort");
  ASSERT_NE(reader, nullptr);
  radixkv::v1::AbortRequest abort;
  abort.set_request_id("to-abort");
  radixkv::v1::AbortResponse resp;
  {
    grpc::ClientContext actx;
    ASSERT_TRUE(stub_->Abort(&actx, abort, &resp).ok());
  }
  EXPECT_TRUE(resp.aborted());
  GenerateResponse chunk;
  while (reader->Read(&chunk)) {
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_NE(st.error_message().find("aborted"), std::string::npos);
  EXPECT_EQ(a_->aborts(), std::vector<std::string>({"to-abort"}));
  for (int i = 0; i < 200 && a_->cancelled() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(a_->cancelled(), 1);
  grpc::ClientContext actx;
  EXPECT_EQ(stub_->Abort(&actx, abort, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(RouterServiceTest, ClientDisconnectCancelsTheWorkerStream) {
  cache_.Set({{"worker-a", a_->address(), 1, 0}});
  a_->set_mode(FakeWorker::Mode::kBlock);
  StartRouter();
  {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, Tokens({1, 2}, "gone"));
    GenerateResponse chunk;
    ASSERT_TRUE(reader->Read(&chunk));
    ctx.TryCancel();
    reader->Finish();
  }
  for (int i = 0; i < 300 && a_->cancelled() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(a_->cancelled(), 1);
}

TEST_F(RouterServiceTest, CacheServiceOutageUsesTheLastKnownWorkers) {
  StartRouter();
  cache_.set_down(true);
  // Nothing known yet: a clear UNAVAILABLE.
  StreamResult r = Run(Tokens({1, 2, 3}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find("unreachable"), std::string::npos)
      << r.status.error_message();
  cache_.set_down(false);
  ASSERT_TRUE(Run(Tokens({1, 2, 3})).status.ok());
  // The cache service restarts: requests keep flowing to known workers.
  cache_.set_down(true);
  for (int i = 0; i < 4; ++i) {
    r = Run(Tokens({4, 5, 6}), "round_robin");
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  }
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 5u);
  radixkv::v1::ListWorkersResponse list;
  grpc::ClientContext ctx;
  EXPECT_EQ(stub_->ListWorkers(&ctx, {}, &list).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(RouterServiceTest, CacheServiceNotAnsweringIsUnavailableAtOnce) {
  RouterOptions options;
  options.cache_service_timeout = absl::Milliseconds(200);
  StartRouter(options);
  ASSERT_TRUE(Run(Tokens({1, 2, 3})).status.ok());
  // Workers are known, but a Match that times out is not followed by a
  // blind placement (the worker's Acquire would wait on the same service)
  // nor by another attempt.
  cache_.set_match_delay(absl::Seconds(1));
  StreamResult r = Run(Tokens({4, 5, 6}, "frozen-1"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(r.status.error_message(),
            absl::StrCat("request frozen-1: cache service unavailable: ",
                         cache_.address(),
                         " did not answer Match within 200ms: Deadline "
                         "Exceeded"));
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 1u);
  EXPECT_NE(MetricsText().find("outcome=\"cache_service_unavailable\""),
            std::string::npos);
  cache_.set_match_delay(absl::ZeroDuration());
  EXPECT_TRUE(Run(Tokens({4, 5, 6})).status.ok());
}

TEST_F(RouterServiceTest, UnknownDefaultPolicyIsRejected) {
  RouterOptions options;
  options.policy = "nearest";
  options.cache_service_address = cache_.address();
  prometheus::Registry registry;
  RouterMetrics metrics(registry);
  EXPECT_EQ(RouterService::Create(options, nullptr, &metrics).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

TEST_F(RouterServiceTest, InvalidArgumentFromAWorkerIsNotRetried) {
  a_->set_mode(FakeWorker::Mode::kRejectInvalid);
  b_->set_mode(FakeWorker::Mode::kRejectInvalid);
  RouterOptions options;
  options.max_attempts = 3;
  StartRouter(options);
  StreamResult r = Run(Tokens({1, 2, 3}));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message(), "top_p must be in (0, 1]");
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 1u);
}

TEST_F(RouterServiceTest, PromptThatFitsNoWorkerIsTriedOncePerWorker) {
  a_->set_mode(FakeWorker::Mode::kRejectNoFit);
  b_->set_mode(FakeWorker::Mode::kRejectNoFit);
  RouterOptions options;
  options.max_attempts = 5;
  StartRouter(options);
  StreamResult r = Run(Tokens({1, 2, 3}, "nofit"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(a_->requests().size(), 1u);
  EXPECT_EQ(b_->requests().size(), 1u);
  EXPECT_EQ(Occurrences(r.status.error_message(), "cannot fit"), 2)
      << r.status.error_message();

  // One worker: one attempt and one plain message.
  cache_.Set({{"worker-a", a_->address()}});
  r = Run(Tokens({1, 2, 3}, "nofit-one"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(a_->requests().size(), 2u);
  EXPECT_EQ(r.status.error_message(),
            absl::StrCat("request nofit-one: worker worker-a (", a_->address(),
                         ") RESOURCE_EXHAUSTED: prompt cannot fit the KV "
                         "pool"));
}

// A model whose workers are all gone (restarting) is UNAVAILABLE, worth a
// retry later; not one attempt per max_attempts.
TEST_F(RouterServiceTest, NoLiveWorkerForTheModelIsNotRetried) {
  RouterOptions options;
  options.max_attempts = 3;
  StartRouter(options);
  GenerateRequest request = Tokens({1, 2, 3});
  request.set_model("demo");
  ASSERT_TRUE(Run(request).status.ok());  // the router has seen "demo"
  cache_.Set({});
  const int matches = cache_.matches();
  StreamResult r = Run(request);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(r.status.error_message(), "no live worker serves model demo");
  EXPECT_EQ(cache_.matches(), matches + 1);
}

// A model no worker ever served is NOT_FOUND naming the served models
// (clients do not retry it, unlike UNAVAILABLE).
TEST_F(RouterServiceTest, UnknownModelIsNotFoundNamingTheServedModels) {
  cache_.Set({{"worker-a", a_->address(), 1, 0, 0, "llama"},
              {"worker-b", b_->address(), 1, 0, 0, "qwen"}});
  StartRouter();
  // Until the cache service answered Stats, "not served" cannot be told
  // from "down".
  // The refresher asks again only after it recorded the first answer.
  while (cache_.stats_calls() < 2) absl::SleepFor(absl::Milliseconds(1));
  GenerateRequest request = Tokens({1, 2, 3});
  request.set_model("other");
  StreamResult r = Run(request);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(r.status.error_message(),
            "model 'other' is not served here (served: llama, qwen)");
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 0u);
  request.set_model("qwen");
  r = Run(request);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.worker_id, "worker-b");
}

TEST_F(RouterServiceTest, ConcurrentAbortsReportOneSuccess) {
  grpc::ClientContext ctx;
  auto reader = OpenHeldStream(&ctx, {1, 2}, "abort-me");
  ASSERT_NE(reader, nullptr);
  std::atomic<int> aborted{0}, ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&] {
      radixkv::v1::AbortRequest abort;
      abort.set_request_id("abort-me");
      radixkv::v1::AbortResponse resp;
      grpc::ClientContext actx;
      grpc::Status st = stub_->Abort(&actx, abort, &resp);
      if (st.ok()) ++ok;
      if (st.ok() && resp.aborted()) ++aborted;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(aborted.load(), 1);
  GenerateResponse chunk;
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(RouterServiceTest, AssignedRequestIdsAreRandomAndReserved) {
  StartRouter();
  ASSERT_TRUE(Run(Tokens({1, 2, 3})).status.ok());
  ASSERT_TRUE(Run(Tokens({1, 2, 3})).status.ok());
  std::vector<std::string> ids;
  for (const auto& req : a_->requests()) ids.push_back(req.request_id());
  for (const auto& req : b_->requests()) ids.push_back(req.request_id());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
  for (const std::string& id : ids) {
    ASSERT_EQ(id.size(), 4u + 32u) << id;
    EXPECT_EQ(id.substr(0, 4), kAssignedRequestIdPrefix);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 4), std::string::npos)
        << id;
  }
  // A client may not use the reserved namespace (to collide with or abort
  // another client's request).
  StreamResult r = Run(Tokens({1, 2, 3}, ids[0]));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("reserved"), std::string::npos);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 2u);
  ASSERT_TRUE(Run(Tokens({1, 2, 3}, "rt-client-id")).status.ok());
}

TEST_F(RouterServiceTest, OversizedTextIsRejectedBeforeTokenizing) {
  RouterOptions options;
  options.max_prompt_text_bytes = 100;
  StartRouter(options);
  const int encodes = g_encode_calls.load();
  GenerateRequest request;
  request.set_text(std::string(101, 'x'));
  request.mutable_sampling()->set_max_new_tokens(3);
  StreamResult r = Run(request);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("exceeds the limit of 100 bytes"),
            std::string::npos)
      << r.status.error_message();
  EXPECT_EQ(g_encode_calls.load(), encodes);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 0u);
  request.set_text(std::string(100, 'x'));
  EXPECT_TRUE(Run(request).status.ok());
  EXPECT_EQ(g_encode_calls.load(), encodes + 1);
  // The default bound is derived from a model context.
  EXPECT_EQ(RouterOptions().max_prompt_text_bytes, 131072 * 32);
}

// The request_id travels as gRPC metadata to the cache service; a byte that
// is not valid in metadata (here UTF-8 "\xc3\xbc") made gRPC abort the
// router ("API misuse ... INVALID_METADATA"). Bad ids and model names are
// INVALID_ARGUMENT before anything is sent, with bounded messages.
TEST_F(RouterServiceTest, MalformedRequestIdAndModelAreInvalidNotFatal) {
  StartRouter();
  for (const std::string& id : {std::string("\xc3\xbc"), std::string("a\nb"),
                                std::string("a b"), std::string(129, 'a')}) {
    StreamResult r = Run(Tokens({1, 2, 3}, id));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id;
    EXPECT_EQ(r.status.error_message(),
              "request_id must be 1..128 bytes of [A-Za-z0-9._:-]");
  }
  GenerateRequest huge_model = Tokens({1, 2, 3});
  huge_model.set_model(std::string(100000, 'm'));
  StreamResult r = Run(huge_model);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message(), "model has 100000 bytes; at most 256");
  EXPECT_EQ(cache_.matches(), 0);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 0u);
  // Abort of a malformed id is answered without echoing it.
  radixkv::v1::AbortRequest abort;
  abort.set_request_id(std::string(100000, 'x'));
  radixkv::v1::AbortResponse resp;
  grpc::ClientContext actx;
  grpc::Status st = stub_->Abort(&actx, abort, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(),
            "request_id must be 1..128 bytes of [A-Za-z0-9._:-]");
  // The router still serves, the longest valid id included.
  EXPECT_TRUE(Run(Tokens({1, 2, 3}, std::string(128, 'a'))).status.ok());
}

// Requests that break a model-independent rule of the contract are refused
// before placement: no Match, no dispatch, counted as invalid_argument (not
// as a dispatch to a worker that would refuse them).
TEST_F(RouterServiceTest, MalformedSamplingIsRefusedBeforePlacement) {
  StartRouter();
  const std::vector<
      std::pair<std::function<void(GenerateRequest*)>, std::string>>
      cases = {
          {[](GenerateRequest* r) {
             r->mutable_sampling()->set_max_new_tokens(0);
           },
           "max_new_tokens must be in [1, 65536], got 0"},
          {[](GenerateRequest* r) {
             r->mutable_sampling()->set_max_new_tokens(70000);
           },
           "max_new_tokens must be in [1, 65536], got 70000"},
          {[](GenerateRequest* r) {
             r->mutable_sampling()->set_temperature(-0.5f);
           },
           "temperature must be in [0, 100], got -0.5"},
          {[](GenerateRequest* r) { r->mutable_sampling()->set_top_p(2); },
           "top_p must be in (0, 1] (0 = unset = 1), got 2"},
          {[](GenerateRequest* r) { r->mutable_sampling()->add_stop(""); },
           "empty stop string"},
          {[](GenerateRequest* r) { r->set_priority(5000); },
           "priority must be in [-1000, 1000], got 5000"},
          {[](GenerateRequest* r) { r->mutable_token_ids()->add_ids(-1); },
           "prompt token id -1 is negative"},
          {[](GenerateRequest* r) { r->clear_prompt(); },
           "no prompt: set text or token_ids"},
      };
  for (const auto& [breaks, message] : cases) {
    GenerateRequest request = Tokens({1, 2, 3});
    breaks(&request);
    StreamResult r = Run(request);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << message;
    EXPECT_EQ(r.status.error_message(), message);
  }
  EXPECT_EQ(cache_.matches(), 0);
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 0u);
  EXPECT_TRUE(Run(Tokens({1, 2, 3})).status.ok());
  EXPECT_EQ(cache_.matches(), 1);
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

// During a cache service outage a request was placed on the workers of the
// last successful Match whatever their model: a request for m1 went to m2's
// worker (another vocabulary). The last known workers are now kept per model.
TEST_F(RouterServiceTest, CacheServiceOutageFallbackIsPerModel) {
  cache_.Set({{"worker-a", a_->address(), 1, 0, 0, "m1"},
              {"worker-b", b_->address(), 1, 0, 0, "m2"}});
  StartRouter();
  GenerateRequest m1 = Tokens({1, 2, 3});
  m1.set_model("m1");
  GenerateRequest m2 = Tokens({1, 2, 3});
  m2.set_model("m2");
  ASSERT_EQ(Run(m1).worker_id, "worker-a");
  ASSERT_EQ(Run(m2).worker_id, "worker-b");
  cache_.set_down(true);
  for (int i = 0; i < 2; ++i) {
    StreamResult r = Run(m1);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.worker_id, "worker-a");
    r = Run(m2);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.worker_id, "worker-b");
  }
  EXPECT_EQ(a_->requests().size(), 3u);
  EXPECT_EQ(b_->requests().size(), 3u);
  // A model never matched before has no known worker.
  GenerateRequest m3 = Tokens({1, 2, 3});
  m3.set_model("m3");
  StreamResult r = Run(m3);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find("no worker known"), std::string::npos)
      << r.status.error_message();
  EXPECT_EQ(a_->requests().size() + b_->requests().size(), 6u);
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

// A client's deadline passing while the worker computed the prompt was
// taken for the worker's failure whenever the router's worker stream saw
// DEADLINE_EXCEEDED before the router saw its own call cancelled: the
// worker was marked failed (avoided by every request for
// failed_worker_cooldown) and the request was dispatched again after its
// deadline. Now it ends DEADLINE_EXCEEDED with no retry and no blame.
TEST_F(RouterServiceTest, ClientDeadlineIsNotAWorkerFailure) {
  cache_.Set(
      {{"worker-a", a_->address(), 1, 50}, {"worker-b", b_->address(), 1, 0}});
  a_->set_mode(FakeWorker::Mode::kStall);
  RouterOptions options;
  options.failed_worker_cooldown = absl::Seconds(60);
  StartRouter(options);
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(100)));
    auto reader = stub_->Generate(
        &ctx, Tokens(std::vector<int32_t>(60, 3), absl::StrCat("dl-", i)));
    GenerateResponse chunk;
    while (reader->Read(&chunk)) {
    }
    EXPECT_EQ(reader->Finish().error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
    // The router's handler ends too (it may outlive the client's view).
    const absl::Time until = absl::Now() + absl::Seconds(20);
    while (MetricsText().find("radixkv_router_in_flight_requests 0") ==
               std::string::npos &&
           absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  // (A request may expire before it reaches worker-a.)
  EXPECT_LE(a_->requests().size(), 5u);
  EXPECT_EQ(b_->requests().size(), 0u);
  const std::string text = MetricsText();
  EXPECT_EQ(text.find("radixkv_router_retries_total{"), std::string::npos)
      << text;
  // worker-a (holding the prefix) was not marked failed.
  a_->set_mode(FakeWorker::Mode::kStream);
  StreamResult r = Run(Tokens(std::vector<int32_t>(60, 3)));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.worker_id, "worker-a");
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

// radixkv_router_retries_total ("failovers before the first token") also
// counted the last failed attempt, which no retry followed: 3 for 2
// retries, and 1 for a request tried once.
TEST_F(RouterServiceTest, RetriesCountOnlyAttemptsThatFollowed) {
  a_->set_mode(FakeWorker::Mode::kFailBeforeFirst);
  b_->set_mode(FakeWorker::Mode::kFailBeforeFirst);
  RouterOptions options;
  options.max_attempts = 3;
  StartRouter(options);
  StreamResult r = Run(Tokens({1, 2, 3}));
  ASSERT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_EQ(a_->requests().size() + b_->requests().size(), 3u);
  std::string text = MetricsText();
  ExpectMetricLine(text,
                   "radixkv_router_retries_total{reason=\"unavailable\"} 2");
  // One worker that cannot fit the prompt: one attempt, no retry.
  a_->set_mode(FakeWorker::Mode::kRejectNoFit);
  cache_.Set({{"worker-a", a_->address()}});
  r = Run(Tokens({1, 2, 3}));
  ASSERT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  text = MetricsText();
  EXPECT_EQ(
      text.find("radixkv_router_retries_total{reason=\"resource_exhausted\"}"),
      std::string::npos)
      << text;
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

// A retry on a worker this request already tried (the only live one) can
// find the earlier attempt still registered there under the same
// request_id: its stream failed on the router's side (a closed connection)
// and the worker has not yet noticed. That ALREADY_EXISTS was returned to
// the client as if its request id were a duplicate; it is now one more
// failed attempt.
TEST_F(RouterServiceTest, OwnEarlierAttemptStillOnTheWorkerIsRetried) {
  cache_.Set({{"worker-a", a_->address()}});
  a_->set_script(
      {FakeWorker::Mode::kFailBeforeFirst, FakeWorker::Mode::kAlreadyExists});
  RouterOptions options;
  options.max_attempts = 3;
  StartRouter(options);
  StreamResult r = Run(Tokens({1, 2, 3}, "same-id"));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, std::vector<int32_t>({100, 101, 102}));
  ASSERT_EQ(a_->requests().size(), 3u);
  for (const GenerateRequest& req : a_->requests()) {
    EXPECT_EQ(req.request_id(), "same-id");
  }
  // A worker the request had not tried: a genuine duplicate, not retried.
  a_->set_script({FakeWorker::Mode::kAlreadyExists});
  r = Run(Tokens({1, 2, 3}, "dup-id"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(a_->requests().size(), 4u);
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

// Every request is counted once in requests_total and observed once in
// request_duration_seconds with the same outcome; an unknown policy
// override was counted but not observed.
TEST_F(RouterServiceTest, EveryOutcomeIsCountedAndTimedOnce) {
  StartRouter();
  EXPECT_EQ(Run(Tokens({1, 2, 3}), "no-such-policy").status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Run(Tokens({}), "").status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Run(Tokens({1, 2, 3})).status.ok());
  const std::string text = MetricsText();
  ExpectMetricLine(
      text,
      "radixkv_router_requests_total{api=\"grpc\",decision=\"none\","
      "outcome=\"invalid_argument\",policy=\"cache_aware\"} 2");
  ExpectMetricLine(
      text,
      "radixkv_router_request_duration_seconds_count{"
      "api=\"grpc\",outcome=\"invalid_argument\",policy=\"cache_aware\"} 2");
  ExpectMetricLine(text,
                   "radixkv_router_request_duration_seconds_count{"
                   "api=\"grpc\",outcome=\"ok\",policy=\"cache_aware\"} 1");
}

}  // namespace
}  // namespace radixkv::router

namespace radixkv::router {
namespace {

// A worker on the callback API that sends one token and holds every stream
// open until it is cancelled: holds no thread per stream, so the test can
// count the router's threads.
class HoldingCallbackWorker final
    : public radixkv::v1::Worker::CallbackService {
 public:
  HoldingCallbackWorker() { server_ = StartServer(this, &port_); }
  ~HoldingCallbackWorker() override {
    server_->Shutdown(std::chrono::system_clock::now());
  }
  grpc::ServerWriteReactor<GenerateResponse>* Generate(
      grpc::CallbackServerContext*, const GenerateRequest*) override {
    class Held : public grpc::ServerWriteReactor<GenerateResponse> {
     public:
      Held() {
        first_.add_token_ids(7);
        StartWrite(&first_);
      }
      void OnWriteDone(bool) override {}
      void OnCancel() override { Finish(grpc::Status::CANCELLED); }
      void OnDone() override { delete this; }

     private:
      GenerateResponse first_;
    };
    return new Held;
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

int ThreadsOfThisProcess() {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// A held stream through the router: opened, first chunk read.
struct HeldStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader;
};

std::unique_ptr<HeldStream> Hold(radixkv::v1::Router::Stub* stub,
                                 const std::string& id) {
  auto h = std::make_unique<HeldStream>();
  GenerateRequest r;
  r.set_request_id(id);
  r.mutable_token_ids()->add_ids(1);
  r.mutable_sampling()->set_max_new_tokens(3);
  h->reader = stub->Generate(&h->ctx, r);
  GenerateResponse chunk;
  if (!h->reader->Read(&chunk)) return nullptr;
  return h;
}

class RouterAdmissionTest : public ::testing::Test {
 protected:
  void Start(RouterOptions options, int workers) {
    std::vector<FakeCacheService::Entry> entries;
    for (int i = 0; i < workers; ++i) {
      workers_.push_back(std::make_unique<HoldingCallbackWorker>());
      entries.push_back(
          {absl::StrCat("worker-", i), workers_.back()->address(), 1, 0});
    }
    cache_.Set(entries);
    options.cache_service_address = cache_.address();
    metrics_ = std::make_unique<RouterMetrics>(registry_);
    auto service = RouterService::Create(options, nullptr, metrics_.get());
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    server_ = StartServer(service_.get(), &port_);
    stub_ = radixkv::v1::Router::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    held_.clear();
    if (service_) service_->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  grpc::Status OneMore(const std::string& id) {
    grpc::ClientContext ctx;
    GenerateRequest r;
    r.set_request_id(id);
    r.mutable_token_ids()->add_ids(1);
    r.mutable_sampling()->set_max_new_tokens(3);
    auto reader = stub_->Generate(&ctx, r);
    GenerateResponse chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }

  FakeCacheService cache_;
  std::vector<std::unique_ptr<HoldingCallbackWorker>> workers_;
  prometheus::Registry registry_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<RouterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<radixkv::v1::Router::Stub> stub_;
  std::vector<std::unique_ptr<HeldStream>> held_;
};

// The total bound is exact and names itself; a freed place is reused.
TEST_F(RouterAdmissionTest, TotalInFlightBoundRefusesAtOnce) {
  RouterOptions options;
  options.max_in_flight_requests = 3;
  options.max_in_flight_per_worker = 0;
  Start(options, 1);
  for (int i = 0; i < 3; ++i) {
    held_.push_back(Hold(stub_.get(), absl::StrCat("held-", i)));
    ASSERT_NE(held_.back(), nullptr);
  }
  const grpc::Status st = OneMore("one-more");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.error_message(),
            "request one-more: the router has 3 requests in flight, the "
            "limit --max_in_flight_requests=3");
  held_[0]->ctx.TryCancel();
  held_[0]->reader->Finish();
  // The cancelled request leaves the registry once its worker stream ended.
  for (int i = 0; i < 1000; ++i) {
    held_.back() = Hold(stub_.get(), absl::StrCat("again-", i));
    if (held_.back() != nullptr) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_NE(held_.back(), nullptr);
  ExpectMetricLine(prometheus::TextSerializer().Serialize(registry_.Collect()),
                   "outcome=\"overloaded\"");
}

// Workers at their per-worker bound are skipped; when all are, the request
// is refused at once naming the bound, instead of queueing on a worker.
TEST_F(RouterAdmissionTest, PerWorkerBoundSpreadsThenRefuses) {
  RouterOptions options;
  options.max_in_flight_per_worker = 2;
  options.policy = "round_robin";
  Start(options, 2);
  for (int i = 0; i < 4; ++i) {
    held_.push_back(Hold(stub_.get(), absl::StrCat("held-", i)));
    ASSERT_NE(held_.back(), nullptr) << i;
  }
  const grpc::Status st = OneMore("fifth");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find(
                "has 2 requests of this router in flight, the limit "
                "--max_in_flight_per_worker=2"),
            std::string::npos)
      << st.error_message();
}

// 300 streams held open through the router cost no thread each (the
// synchronous server took one per stream, polling it every 20 ms).
TEST_F(RouterAdmissionTest, HeldStreamsCostNoThreadEach) {
  RouterOptions options;
  options.max_in_flight_per_worker = 0;
  Start(options, 2);
  held_.push_back(Hold(stub_.get(), "warm-up"));
  ASSERT_NE(held_.back(), nullptr);
  const int before = ThreadsOfThisProcess();
  for (int i = 0; i < 300; ++i) {
    held_.push_back(Hold(stub_.get(), absl::StrCat("held-", i)));
    ASSERT_NE(held_.back(), nullptr) << i;
  }
  const int after = ThreadsOfThisProcess();
  std::printf("threads: %d before, %d with 300 more held streams\n", before,
              after);
  EXPECT_LT(after - before, 30);
}

}  // namespace
}  // namespace radixkv::router

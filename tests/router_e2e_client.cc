#include "tests/router_e2e_client.h"

#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/load_tokenizer.h"
#include "router/router_service.h"
#include "tools/workload/workload_runner.h"

namespace radixkv::tests {
std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/radixkv/", path);
}

namespace {

const model::Tokenizer& ModelTokenizer() {
  static const model::Tokenizer* tokenizer = [] {
    auto t = model::LoadTokenizer(Runfile("models/radixkv-demo-llama"));
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      std::abort();
    }
    return t->tokenizer.release();
  }();
  return *tokenizer;
}

}  // namespace

router::LocalClusterOptions TestClusterOptions(const std::string& name) {
  router::LocalClusterOptions o;
  o.model_dir = Runfile("models/radixkv-demo-llama");
  const char* tmp = std::getenv("TEST_TMPDIR");
  o.run_dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  o.worker_args = {"--threads=1"};
  o.start_timeout = absl::Seconds(60);
  return o;
}

std::vector<int32_t> Encode(const std::string& text) {
  auto ids = ModelTokenizer().Encode(text, /*add_special_tokens=*/true);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::vector<int32_t> LicenseTokens(const std::string& license, int offset,
                                   int n) {
  std::ifstream in("/usr/share/common-licenses/" + license);
  std::stringstream ss;
  ss << in.rdbuf();
  auto ids = ModelTokenizer().Encode(ss.str(), /*add_special_tokens=*/false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  EXPECT_GE(static_cast<int>(ids->size()), offset + n) << license;
  return std::vector<int32_t>(ids->begin() + offset, ids->begin() + offset + n);
}

namespace {

Completion Run(radixkv::v1::Router::Stub* router,
               radixkv::v1::GenerateRequest req,
               const GenerateOptions& options) {
  req.set_request_id(options.request_id);
  req.set_model(options.model);
  req.mutable_sampling()->set_max_new_tokens(options.max_new_tokens);
  req.mutable_sampling()->set_ignore_eos(true);
  req.set_disable_prefix_cache(options.disable_prefix_cache);
  req.set_return_text(options.return_text);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.deadline));
  if (!options.policy.empty()) {
    ctx.AddMetadata(router::kPolicyOverrideMetadataKey, options.policy);
  }
  Completion out;
  auto reader = router->Generate(&ctx, req);
  radixkv::v1::GenerateResponse chunk;
  while (reader->Read(&chunk)) {
    out.tokens.insert(out.tokens.end(), chunk.token_ids().begin(),
                      chunk.token_ids().end());
    if (!chunk.worker_id().empty()) out.worker_id = chunk.worker_id();
    if (chunk.has_usage()) out.usage = chunk.usage();
    if (options.return_text) out.text_deltas.push_back(chunk.text());
  }
  out.status = reader->Finish();
  return out;
}

}  // namespace

Completion Generate(radixkv::v1::Router::Stub* router,
                    const std::vector<int32_t>& prompt,
                    const GenerateOptions& options) {
  radixkv::v1::GenerateRequest req;
  req.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(), prompt.end());
  return Run(router, std::move(req), options);
}

Completion GenerateText(radixkv::v1::Router::Stub* router,
                        const std::string& text,
                        const GenerateOptions& options) {
  radixkv::v1::GenerateRequest req;
  req.set_text(text);
  return Run(router, std::move(req), options);
}

std::unique_ptr<radixkv::v1::Router::Stub> RouterStub(
    const std::string& address) {
  return radixkv::v1::Router::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<radixkv::v1::CacheService::Stub> CacheServiceStub(
    const std::string& address) {
  return radixkv::v1::CacheService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<radixkv::v1::Worker::Stub> WorkerStub(
    const std::string& address) {
  return radixkv::v1::Worker::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

std::vector<int32_t> Concat(std::vector<int32_t> a,
                            const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

namespace {

// Whether every thread of `pid` is stopped (state 'T' or 't').
bool AllThreadsStopped(pid_t pid) {
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  std::error_code ec;
  int threads = 0;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // the thread exited
    // "tid (comm) S ...": the state follows the last ')'.
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= line.size()) return false;
    const char state = line[paren + 2];
    if (state != 'T' && state != 't') return false;
    ++threads;
  }
  return !ec && threads > 0;
}

}  // namespace

bool FreezeProcess(pid_t pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!AllThreadsStopped(pid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

ResumeOnExit::~ResumeOnExit() { ::kill(pid_, SIGCONT); }

radixkv::v1::StatsResponse CacheStats(const std::string& cache_address) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  radixkv::v1::StatsResponse stats;
  grpc::Status st = CacheServiceStub(cache_address)->Stats(&ctx, {}, &stats);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return stats;
}

radixkv::v1::WorkerStatsResponse WorkerStats(
    const std::string& worker_address) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  radixkv::v1::WorkerStatsResponse stats;
  grpc::Status st = WorkerStub(worker_address)->GetStats(&ctx, {}, &stats);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return stats;
}

double MetricValue(const std::string& metrics_address,
                   const std::string& prefix) {
  auto text = router::HttpGet(metrics_address, "/metrics");
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (absl::SimpleAtod(line.substr(space + 1), &v)) return v;
  }
  return 0;
}

}  // namespace radixkv::tests

// Router overhead per request on loopback: the routing decision including
// the CacheService.Match RPC, measured without model compute. Starts the
// real cache_service binary (in memory), registers two in-process fake
// workers that answer Generate at once, fills the global tree with cached
// prefixes, serves an in-process RouterService (cache_aware) and sends
// requests sharing those prefixes. Prints a table of
//   - CacheService.Match alone (client -> cache service),
//   - client send -> fake worker receives the request (router overhead:
//     client->router hop, Match, placement, router->worker hop),
//   - the full Generate round trip,
// as p50/p90/p99 in milliseconds, sequentially and with concurrent clients.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/registry.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "router/router_metrics.h"
#include "router/router_service.h"
#include "tools/local_cluster/local_cluster.h"
#include "tools/workload/workload_runner.h"

ABSL_FLAG(int, requests, 2000, "Requests per measured configuration.");
ABSL_FLAG(int, prefixes, 32, "Cached prefixes (alternating workers).");
ABSL_FLAG(int, prefix_tokens, 1024, "Tokens per cached prefix.");
ABSL_FLAG(int, suffix_tokens, 64, "Fresh tokens after the prefix.");
ABSL_FLAG(std::string, cache_service_binary, "",
          "Path of cache_service; empty = bazel-bin next to this binary.");

namespace {

using radixkv::router::ComputePercentiles;
using radixkv::router::Percentiles;

class FakeWorker final : public radixkv::v1::Worker::Service {
 public:
  grpc::Status Generate(
      grpc::ServerContext*, const radixkv::v1::GenerateRequest* req,
      grpc::ServerWriter<radixkv::v1::GenerateResponse>* writer) override {
    const absl::Time now = absl::Now();
    {
      absl::MutexLock l(&mu_);
      received_[req->request_id()] = now;
    }
    radixkv::v1::GenerateResponse r;
    r.add_token_ids(7);
    r.set_finished(true);
    writer->Write(r);
    return grpc::Status::OK;
  }
  bool Take(const std::string& id, absl::Time* t) {
    absl::MutexLock l(&mu_);
    auto it = received_.find(id);
    if (it == received_.end()) return false;
    *t = it->second;
    received_.erase(it);
    return true;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::Time> received_;
};

std::unique_ptr<grpc::Server> Serve(grpc::Service* s, int* port) {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  b.RegisterService(s);
  return b.BuildAndStart();
}

void PrintRow(const char* name, std::vector<double> ms) {
  Percentiles p = ComputePercentiles(std::move(ms));
  std::printf("| %-56s | %6.3f | %6.3f | %6.3f |\n", name, p.p50, p.p90, p.p99);
}

namespace v1 = radixkv::v1;

// --cache_service_binary, or the cache service of this binary's bazel-bin
// (bazel-bin/tools/router_bench/router_overhead_benchmark -> bazel-bin).
std::string CacheServiceBinary() {
  std::string binary = absl::GetFlag(FLAGS_cache_service_binary);
  if (!binary.empty()) return binary;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::filesystem::path self(std::string(buf, n > 0 ? n : 0));
  return (self.parent_path().parent_path().parent_path() /
          "cache_service/cache_service")
      .string();
}

// Registers the two fake workers (serving on `ports`) with the cache service.
bool RegisterWorkers(v1::CacheService::Stub& cs, const int (&ports)[2]) {
  for (int w = 0; w < 2; ++w) {
    v1::RegisterRequest reg;
    reg.set_worker_id(absl::StrCat("bench-worker-", w));
    reg.set_address(absl::StrCat("127.0.0.1:", ports[w]));
    reg.set_capacity_slots(1 << 20);
    reg.set_page_size(16);
    reg.set_model("bench");
    reg.set_epoch(1);
    reg.set_vocab_size(32000);
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    grpc::Status st = cs.Register(&ctx, reg, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "Register: %s\n", st.error_message().c_str());
      return false;
    }
  }
  return true;
}

// --prefixes random prefixes of --prefix_tokens, cached alternately on the
// two workers; empty on error.
std::vector<std::vector<int32_t>> CachePrefixes(v1::CacheService::Stub& cs) {
  std::mt19937 rng(42);
  const int num_prefixes = absl::GetFlag(FLAGS_prefixes);
  const int prefix_tokens = absl::GetFlag(FLAGS_prefix_tokens);
  std::vector<std::vector<int32_t>> prefixes(num_prefixes);
  for (int p = 0; p < num_prefixes; ++p) {
    for (int i = 0; i < prefix_tokens; ++i) {
      prefixes[p].push_back(static_cast<int32_t>(rng() % 32000));
    }
    v1::AcquireRequest acq;
    acq.set_worker_id(absl::StrCat("bench-worker-", p % 2));
    acq.set_epoch(1);
    acq.set_model("bench");
    acq.mutable_tokens()->Assign(prefixes[p].begin(), prefixes[p].end());
    v1::AcquireResponse lease;
    {
      grpc::ClientContext ctx;
      grpc::Status st = cs.Acquire(&ctx, acq, &lease);
      if (!st.ok()) {
        std::fprintf(stderr, "Acquire: %s\n", st.error_message().c_str());
        return {};
      }
    }
    v1::CommitRequest commit;
    commit.set_lease_id(lease.lease_id());
    commit.mutable_tokens()->Assign(prefixes[p].begin(), prefixes[p].end());
    v1::CommitResponse committed;
    grpc::ClientContext ctx;
    if (!cs.Commit(&ctx, commit, &committed).ok()) return {};
  }
  return prefixes;
}

// A cached prefix plus --suffix_tokens fresh tokens; `*k` = the prefix's
// index.
std::vector<int32_t> PromptFor(
    const std::vector<std::vector<int32_t>>& prefixes, std::mt19937& r,
    int* k) {
  *k = static_cast<int>(r() % prefixes.size());
  std::vector<int32_t> p = prefixes[*k];
  for (int i = 0; i < absl::GetFlag(FLAGS_suffix_tokens); ++i) {
    p.push_back(static_cast<int32_t>(r() % 32000));
  }
  return p;
}

void MeasureMatch(v1::CacheService::Stub& cs,
                  const std::vector<std::vector<int32_t>>& prefixes) {
  std::vector<double> ms;
  std::mt19937 r(1);
  for (int i = 0; i < absl::GetFlag(FLAGS_requests); ++i) {
    v1::MatchRequest m;
    m.set_model("bench");
    int k = 0;
    std::vector<int32_t> p = PromptFor(prefixes, r, &k);
    m.mutable_tokens()->Assign(p.begin(), p.end());
    v1::MatchResponse resp;
    grpc::ClientContext ctx;
    const absl::Time t0 = absl::Now();
    cs.Match(&ctx, m, &resp);
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  PrintRow("CacheService.Match alone", ms);
}

// --requests Generate calls through the router from `concurrency` clients:
// the time until the fake worker holding the prompt's prefix receives it
// (router overhead) and the full round trip. Counts requests placed on the
// other worker in `*wrong_worker`.
void MeasureRouter(v1::Router::Stub& router, FakeWorker (&workers)[2],
                   const std::vector<std::vector<int32_t>>& prefixes,
                   int concurrency, std::atomic<int>* wrong_worker) {
  const int requests = absl::GetFlag(FLAGS_requests);
  std::vector<double> dispatch_ms, total_ms;
  absl::Mutex mu;
  std::atomic<int> next{0};
  auto client = [&](int c) {
    std::mt19937 r(100 + c);
    std::vector<double> d, t;
    while (next++ < requests) {
      int k = 0;
      std::vector<int32_t> p = PromptFor(prefixes, r, &k);
      v1::GenerateRequest req;
      const std::string id =
          absl::StrCat("b", concurrency, "-", c, "-", next.load(), "-", r());
      req.set_request_id(id);
      req.mutable_token_ids()->mutable_ids()->Assign(p.begin(), p.end());
      req.mutable_sampling()->set_max_new_tokens(1);
      grpc::ClientContext ctx;
      const absl::Time t0 = absl::Now();
      auto reader = router.Generate(&ctx, req);
      v1::GenerateResponse chunk;
      while (reader->Read(&chunk)) {
      }
      reader->Finish();
      const absl::Time t1 = absl::Now();
      absl::Time received;
      if (workers[k % 2].Take(id, &received)) {
        d.push_back(absl::ToDoubleMilliseconds(received - t0));
      } else {
        ++*wrong_worker;
        for (auto& w : workers) {
          if (w.Take(id, &received)) {
            d.push_back(absl::ToDoubleMilliseconds(received - t0));
          }
        }
      }
      t.push_back(absl::ToDoubleMilliseconds(t1 - t0));
    }
    absl::MutexLock l(&mu);
    dispatch_ms.insert(dispatch_ms.end(), d.begin(), d.end());
    total_ms.insert(total_ms.end(), t.begin(), t.end());
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) threads.emplace_back(client, c);
  for (auto& t : threads) t.join();
  PrintRow(absl::StrCat("send -> worker receives (router overhead), ",
                        concurrency, " client(s)")
               .c_str(),
           dispatch_ms);
  PrintRow(absl::StrCat("full Generate round trip, ", concurrency, " client(s)")
               .c_str(),
           total_ms);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int cache_port = radixkv::router::PickFreePort();
  auto cache = radixkv::router::ChildProcess::Start(
      "cache_service",
      {CacheServiceBinary(), "--bind_address=127.0.0.1",
       absl::StrCat("--grpc_port=", cache_port), "--metrics_port=0",
       "--heartbeat_timeout_ms=600000", "--lease_ttl_ms=600000"},
      "/tmp/router_overhead_benchmark_cache_service.log");
  if (!cache.ok()) {
    std::fprintf(stderr, "%s\n", cache.status().ToString().c_str());
    return 1;
  }
  const std::string cache_address = absl::StrCat("127.0.0.1:", cache_port);
  for (int i = 0; i < 200 && !radixkv::router::HealthServing(
                                 cache_address, absl::Milliseconds(200));
       ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto cs = v1::CacheService::NewStub(
      grpc::CreateChannel(cache_address, grpc::InsecureChannelCredentials()));

  FakeWorker workers[2];
  int worker_ports[2];
  std::unique_ptr<grpc::Server> worker_servers[2];
  for (int w = 0; w < 2; ++w) {
    worker_servers[w] = Serve(&workers[w], &worker_ports[w]);
  }
  if (!RegisterWorkers(*cs, worker_ports)) return 1;
  const std::vector<std::vector<int32_t>> prefixes = CachePrefixes(*cs);
  if (prefixes.empty()) return 1;

  prometheus::Registry registry;
  radixkv::router::RouterMetrics metrics(registry);
  radixkv::router::RouterOptions options;
  options.cache_service_address = cache_address;
  options.model = "bench";
  auto service =
      radixkv::router::RouterService::Create(options, nullptr, &metrics);
  if (!service.ok()) return 1;
  int router_port = 0;
  auto router_server = Serve(service->get(), &router_port);
  auto router = v1::Router::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_port),
                          grpc::InsecureChannelCredentials()));

  std::printf(
      "router overhead on loopback: %d cached prefixes x %d tokens over 2 "
      "workers, prompts = prefix + %d fresh tokens, %d requests per row\n\n",
      absl::GetFlag(FLAGS_prefixes), absl::GetFlag(FLAGS_prefix_tokens),
      absl::GetFlag(FLAGS_suffix_tokens), absl::GetFlag(FLAGS_requests));
  std::printf("| %-56s | p50 ms | p90 ms | p99 ms |\n", "measurement");
  std::printf("| %s | ------ | ------ | ------ |\n",
              std::string(56, '-').c_str());
  MeasureMatch(*cs, prefixes);
  std::atomic<int> wrong_worker{0};
  for (int concurrency : {1, 4}) {
    MeasureRouter(*router, workers, prefixes, concurrency, &wrong_worker);
  }
  std::printf("\nrequests not placed on the worker holding their prefix: %d\n",
              wrong_worker.load());
  router_server->Shutdown(std::chrono::system_clock::now());
  (*service)->Shutdown();
  for (auto& s : worker_servers) s->Shutdown(std::chrono::system_clock::now());
  (*cache)->Stop(absl::Seconds(5));
  return 0;
}

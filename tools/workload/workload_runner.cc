#include "tools/workload/workload_runner.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "router/router_service.h"

namespace radixkv::router {
namespace {

std::string SanitizeId(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
          c == ':' || c == '-')) {
      c = '_';
    }
  }
  return out;
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace

absl::StatusOr<std::vector<RunConfig>> ParseRunConfigs(const std::string& csv) {
  std::vector<RunConfig> out;
  for (absl::string_view name : absl::StrSplit(csv, ',', absl::SkipEmpty())) {
    RunConfig c;
    if (name == "cache_off") {
      c.label = "cache_off";
      c.policy = "cache_aware";
      c.prefix_cache = false;
    } else if (name == "cache_aware" || name == "round_robin" ||
               name == "least_load" || name == "approx_tree") {
      c.label = std::string(name);
      c.policy = std::string(name);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown run configuration \"", name,
          "\" (expected cache_aware, cache_off, round_robin, least_load, "
          "approx_tree)"));
    }
    out.push_back(c);
  }
  if (out.empty()) return absl::InvalidArgumentError("no run configuration");
  return out;
}

Percentiles ComputePercentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

void Summarize(RunResult* r) {
  r->ok = r->errors = 0;
  r->errors_by_status.clear();
  r->requests_by_worker.clear();
  r->prompt_tokens = r->cached_tokens = r->output_tokens = 0;
  std::vector<double> ttft, tpot;
  for (const RequestRecord& rec : r->records) {
    if (rec.status != "OK") {
      ++r->errors;
      ++r->errors_by_status[rec.status];
      continue;
    }
    ++r->ok;
    r->prompt_tokens += rec.prompt_tokens;
    r->cached_tokens += rec.cached_tokens;
    r->output_tokens += rec.completion_tokens;
    ++r->requests_by_worker[rec.worker_id];
    ttft.push_back(rec.ttft_s * 1e3);
    if (rec.completion_tokens > 1) {
      tpot.push_back((rec.duration_s - rec.ttft_s) * 1e3 /
                     static_cast<double>(rec.completion_tokens - 1));
    }
  }
  r->prefill_tokens_computed = r->prompt_tokens - r->cached_tokens;
  r->hit_rate = r->prompt_tokens > 0 ? static_cast<double>(r->cached_tokens) /
                                           static_cast<double>(r->prompt_tokens)
                                     : 0.0;
  r->ttft_ms = ComputePercentiles(ttft);
  r->tpot_ms = ComputePercentiles(tpot);
  if (r->duration_s > 0) {
    r->requests_per_s = static_cast<double>(r->ok) / r->duration_s;
    r->output_tokens_per_s =
        static_cast<double>(r->output_tokens) / r->duration_s;
  }
}

namespace {

// Sends `request` (a whole HTTP/1.0 request) and returns the body of the
// response the server writes before closing.
absl::StatusOr<std::string> HttpExchange(const std::string& address,
                                         const std::string& request) {
  std::vector<std::string> hp = absl::StrSplit(address, ':');
  if (hp.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", address));
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(hp[0].c_str(), hp[1].c_str(), &hints, &res) != 0 ||
      res == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address));
  }
  int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const bool connected = ::connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  ::freeaddrinfo(res);
  if (!connected) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  }
  const std::string& req = request;
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return absl::UnavailableError("write failed");
  }
  std::string response;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) {
    return absl::UnavailableError("malformed HTTP response");
  }
  return response.substr(body + 4);
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& address,
                                    const std::string& path) {
  return HttpExchange(
      address,
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n"));
}

absl::StatusOr<std::string> HttpPostJson(const std::string& address,
                                         const std::string& path,
                                         const std::string& body) {
  return HttpExchange(
      address,
      absl::StrCat("POST ", path, " HTTP/1.0\r\nHost: ", address,
                   "\r\nContent-Type: application/json\r\nContent-Length: ",
                   body.size(), "\r\n\r\n", body));
}

std::map<double, double> ParseRoutingLatencyBuckets(const std::string& text,
                                                    const std::string& policy) {
  std::map<double, double> out;
  const std::string prefix = "radixkv_router_routing_latency_seconds_bucket{";
  const std::string policy_label = absl::StrCat("policy=\"", policy, "\"");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    if (line.find(policy_label) == absl::string_view::npos) continue;
    const size_t le = line.find("le=\"");
    const size_t close = line.find('}');
    if (le == absl::string_view::npos || close == absl::string_view::npos) {
      continue;
    }
    const size_t le_end = line.find('"', le + 4);
    absl::string_view le_text = line.substr(le + 4, le_end - le - 4);
    double bound, count;
    if (le_text == "+Inf") {
      bound = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(le_text, &bound)) {
      continue;
    }
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(close + 1)),
                          &count)) {
      continue;
    }
    out[bound] = count;
  }
  return out;
}

double HistogramQuantile(const std::map<double, double>& cumulative, double q) {
  if (cumulative.empty()) return -1;
  const double total = cumulative.rbegin()->second;
  if (total <= 0) return -1;
  const double target = q * total;
  double prev_le = 0, prev_count = 0;
  for (const auto& [le, count] : cumulative) {
    if (count >= target) {
      if (std::isinf(le)) return prev_le;
      if (count == prev_count) return le;
      return prev_le +
             (le - prev_le) * (target - prev_count) / (count - prev_count);
    }
    prev_le = le;
    prev_count = count;
  }
  return prev_le;
}

void MergeRoutingLatencyBuckets(const std::map<double, double>& add,
                                std::map<double, double>* sum) {
  for (const auto& [le, count] : add) (*sum)[le] += count;
}

WorkloadRunner::WorkloadRunner(RunnerOptions options)
    : options_(std::move(options)) {}

namespace {

// Streams one Generate call through the router under `policy` and fills
// `rec` (output tokens, TTFT, duration, usage, serving worker, final status).
// Returns whether the call ended OK.
bool StreamRequest(radixkv::v1::Router::Stub& router,
                   const radixkv::v1::GenerateRequest& req,
                   const std::string& policy, absl::Duration timeout,
                   RequestRecord* rec) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kPolicyOverrideMetadataKey, policy);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const absl::Time sent = absl::Now();
  auto reader = router.Generate(&ctx, req);
  radixkv::v1::GenerateResponse chunk;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first && chunk.token_ids_size() > 0) {
      rec->ttft_s = absl::ToDoubleSeconds(absl::Now() - sent);
      first = false;
    }
    rec->output.insert(rec->output.end(), chunk.token_ids().begin(),
                       chunk.token_ids().end());
    if (!chunk.worker_id().empty()) rec->worker_id = chunk.worker_id();
    if (chunk.has_usage()) {
      if (chunk.usage().prompt_tokens() > 0) {
        rec->prompt_tokens = chunk.usage().prompt_tokens();
      }
      rec->cached_tokens = chunk.usage().cached_tokens();
    }
  }
  grpc::Status st = reader->Finish();
  rec->duration_s = absl::ToDoubleSeconds(absl::Now() - sent);
  rec->completion_tokens = static_cast<int64_t>(rec->output.size());
  if (!st.ok()) {
    rec->status = CodeName(st.error_code());
    rec->error_message = st.error_message();
  }
  return st.ok();
}

}  // namespace

absl::StatusOr<RunResult> WorkloadRunner::Run(const Workload& workload,
                                              const RunConfig& config) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(
      options_.router_address, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(
          absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
    return absl::UnavailableError(
        absl::StrCat("router ", options_.router_address, " unreachable"));
  }
  auto router = radixkv::v1::Router::NewStub(channel);
  if (!options_.cache_service_address.empty()) {
    auto cache = radixkv::v1::CacheService::NewStub(grpc::CreateChannel(
        options_.cache_service_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    radixkv::v1::FlushResponse ignored;
    cache->Flush(&ctx, {}, &ignored);
  }
  std::map<double, double> before;
  if (!options_.router_metrics_address.empty()) {
    auto text = HttpGet(options_.router_metrics_address, "/metrics");
    if (text.ok()) before = ParseRoutingLatencyBuckets(*text, config.policy);
  }

  RunResult result;
  result.workload = workload.name;
  result.description = workload.description;
  result.config = config;
  std::mutex mu;
  std::atomic<size_t> next_session{0};
  std::atomic<int64_t> done_requests{0};
  const int64_t total_requests = workload.num_requests();
  const absl::Time start = absl::Now();
  const absl::Time stop_issuing = start + options_.max_run_duration;
  const std::string run_tag =
      SanitizeId(absl::StrCat(workload.name, "-", config.label, "-",
                              absl::ToUnixMicros(start) % 100000000));

  auto client = [&]() {
    while (true) {
      const size_t i = next_session++;
      if (i >= workload.sessions.size() || absl::Now() > stop_issuing) return;
      const WorkloadSession& session = workload.sessions[i];
      std::vector<int32_t> history = session.context;
      for (size_t t = 0; t < session.user_turns.size(); ++t) {
        std::vector<int32_t> prompt =
            session.carry_history ? history : session.context;
        prompt.insert(prompt.end(), session.user_turns[t].begin(),
                      session.user_turns[t].end());
        radixkv::v1::GenerateRequest req;
        req.set_request_id(
            SanitizeId(absl::StrCat(run_tag, "-", session.name, "-t", t)));
        req.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(),
                                                       prompt.end());
        req.mutable_sampling()->set_max_new_tokens(session.max_new_tokens);
        req.mutable_sampling()->set_ignore_eos(true);
        req.set_disable_prefix_cache(!config.prefix_cache);
        RequestRecord rec;
        rec.session = session.name;
        rec.turn = static_cast<int>(t);
        rec.prompt_tokens = static_cast<int64_t>(prompt.size());
        const bool ok = StreamRequest(*router, req, config.policy,
                                      options_.request_timeout, &rec);
        if (session.carry_history) {
          history = prompt;
          history.insert(history.end(), rec.output.begin(), rec.output.end());
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          result.records.push_back(std::move(rec));
        }
        ++done_requests;
        if (!ok) break;  // a conversation cannot continue without its answer
      }
    }
  };

  absl::Notification finished;
  std::thread progress;
  if (options_.progress && ::isatty(STDERR_FILENO)) {
    progress = std::thread([&] {
      while (
          !finished.WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
        std::fprintf(stderr, "\r  %-14s %-12s %4lld/%lld requests  %5.1fs ",
                     workload.name.c_str(), config.label.c_str(),
                     static_cast<long long>(done_requests.load()),
                     static_cast<long long>(total_requests),
                     absl::ToDoubleSeconds(absl::Now() - start));
      }
      std::fprintf(stderr, "\r%80s\r", "");
    });
  }
  std::vector<std::thread> threads;
  const int n =
      std::max(1, std::min<int>(workload.concurrency > 0 ? workload.concurrency
                                                         : options_.concurrency,
                                static_cast<int>(workload.sessions.size())));
  for (int i = 0; i < n; ++i) threads.emplace_back(client);
  for (auto& t : threads) t.join();
  result.duration_s = absl::ToDoubleSeconds(absl::Now() - start);
  finished.Notify();
  if (progress.joinable()) progress.join();

  if (!options_.router_metrics_address.empty()) {
    auto text = HttpGet(options_.router_metrics_address, "/metrics");
    if (text.ok()) {
      std::map<double, double> after =
          ParseRoutingLatencyBuckets(*text, config.policy);
      for (auto& [le, count] : after) count -= before[le];
      if (!after.empty()) {
        result.routing_decisions = static_cast<int64_t>(after.rbegin()->second);
      }
      result.routing_p50_ms = HistogramQuantile(after, 0.50) * 1e3;
      result.routing_p99_ms = HistogramQuantile(after, 0.99) * 1e3;
      if (result.routing_p50_ms < 0) result.routing_p50_ms = -1;
      if (result.routing_p99_ms < 0) result.routing_p99_ms = -1;
      result.routing_latency_buckets = std::move(after);
    }
  }
  Summarize(&result);
  return result;
}

namespace {

std::string WorkerShare(const RunResult& r) {
  std::vector<std::string> parts;
  for (const auto& [worker, n] : r.requests_by_worker) {
    parts.push_back(absl::StrFormat(
        "%s %.0f%%", worker.empty() ? "?" : worker,
        r.ok > 0 ? 100.0 * static_cast<double>(n) / static_cast<double>(r.ok)
                 : 0.0));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::string Ms(double v) { return v < 0 ? "n/a" : absl::StrFormat("%.2f", v); }

}  // namespace

std::string FormatComparison(const std::vector<RunResult>& runs) {
  if (runs.empty()) return "";
  std::vector<std::pair<std::string, std::vector<std::string>>> rows = {
      {"requests ok / errors", {}}, {"duration s", {}},
      {"throughput req/s", {}},     {"output tokens/s", {}},
      {"TTFT ms p50/p90/p99", {}},  {"TPOT ms p50/p90/p99", {}},
      {"prompt tokens", {}},        {"prefill tokens computed", {}},
      {"prefix hit rate", {}},      {"per-worker share", {}},
      {"routing ms p50/p99", {}},
  };
  std::vector<std::string> header = {""};
  for (const RunResult& r : runs) {
    header.push_back(r.config.label);
    std::string errors = absl::StrCat(r.ok, " / ", r.errors);
    if (!r.errors_by_status.empty()) {
      std::vector<std::string> parts;
      for (const auto& [code, n] : r.errors_by_status) {
        parts.push_back(absl::StrCat(code, ":", n));
      }
      absl::StrAppend(&errors, " (", absl::StrJoin(parts, " "), ")");
    }
    rows[0].second.push_back(errors);
    rows[1].second.push_back(absl::StrFormat("%.2f", r.duration_s));
    rows[2].second.push_back(absl::StrFormat("%.2f", r.requests_per_s));
    rows[3].second.push_back(absl::StrFormat("%.1f", r.output_tokens_per_s));
    rows[4].second.push_back(absl::StrFormat(
        "%.0f / %.0f / %.0f", r.ttft_ms.p50, r.ttft_ms.p90, r.ttft_ms.p99));
    rows[5].second.push_back(absl::StrFormat(
        "%.1f / %.1f / %.1f", r.tpot_ms.p50, r.tpot_ms.p90, r.tpot_ms.p99));
    rows[6].second.push_back(absl::StrCat(r.prompt_tokens));
    rows[7].second.push_back(absl::StrCat(r.prefill_tokens_computed));
    rows[8].second.push_back(absl::StrFormat("%.1f%%", 100.0 * r.hit_rate));
    rows[9].second.push_back(WorkerShare(r));
    rows[10].second.push_back(
        absl::StrCat(Ms(r.routing_p50_ms), " / ", Ms(r.routing_p99_ms)));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& [name, _] : rows) width[0] = std::max(width[0], name.size());
  for (size_t c = 1; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& [_, cells] : rows) {
      width[c] = std::max(width[c], cells[c - 1].size());
    }
  }
  std::string out =
      absl::StrCat(runs[0].workload, ": ", runs[0].description, "\n");
  auto line = [&](const std::string& first,
                  const std::vector<std::string>& cells) {
    std::string l =
        absl::StrFormat("  %-*s", static_cast<int>(width[0]), first);
    for (size_t c = 0; c < cells.size(); ++c) {
      absl::StrAppend(
          &l,
          absl::StrFormat(" | %*s", static_cast<int>(width[c + 1]), cells[c]));
    }
    absl::StrAppend(&out, l, "\n");
  };
  line("", std::vector<std::string>(header.begin() + 1, header.end()));
  absl::StrAppend(&out, "  ", std::string(width[0], '-'));
  for (size_t c = 1; c < header.size(); ++c) {
    absl::StrAppend(&out, "-+-", std::string(width[c], '-'));
  }
  absl::StrAppend(&out, "\n");
  for (const auto& [name, cells] : rows) line(name, cells);
  return out;
}

std::string FormatCsv(const std::vector<RunResult>& runs) {
  std::string out =
      "workload,config,policy,prefix_cache,requests_ok,errors,duration_s,"
      "requests_per_s,output_tokens_per_s,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,"
      "tpot_p50_ms,tpot_p90_ms,tpot_p99_ms,prompt_tokens,cached_tokens,"
      "prefill_tokens_computed,hit_rate,routing_p50_ms,routing_p99_ms,"
      "worker_share\n";
  for (const RunResult& r : runs) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  "%s,%s,%s,%d,%d,%d,%.3f,%.3f,%.2f,%.2f,%.2f,%.2f,%.2f,"
                  "%.2f,%.2f,%d,%d,%d,%.4f,%.3f,%.3f,\"%s\"\n",
                  r.workload, r.config.label, r.config.policy,
                  r.config.prefix_cache ? 1 : 0, r.ok, r.errors, r.duration_s,
                  r.requests_per_s, r.output_tokens_per_s, r.ttft_ms.p50,
                  r.ttft_ms.p90, r.ttft_ms.p99, r.tpot_ms.p50, r.tpot_ms.p90,
                  r.tpot_ms.p99, r.prompt_tokens, r.cached_tokens,
                  r.prefill_tokens_computed, r.hit_rate, r.routing_p50_ms,
                  r.routing_p99_ms, WorkerShare(r)));
  }
  return out;
}

std::string FormatJson(const std::vector<RunResult>& runs) {
  nlohmann::json out = nlohmann::json::array();
  for (const RunResult& r : runs) {
    nlohmann::json j;
    j["workload"] = r.workload;
    j["description"] = r.description;
    j["config"] = r.config.label;
    j["policy"] = r.config.policy;
    j["prefix_cache"] = r.config.prefix_cache;
    j["requests_ok"] = r.ok;
    j["errors"] = r.errors;
    j["errors_by_status"] = r.errors_by_status;
    j["duration_s"] = r.duration_s;
    j["requests_per_s"] = r.requests_per_s;
    j["output_tokens_per_s"] = r.output_tokens_per_s;
    j["ttft_ms"] = {
        {"p50", r.ttft_ms.p50}, {"p90", r.ttft_ms.p90}, {"p99", r.ttft_ms.p99}};
    j["tpot_ms"] = {
        {"p50", r.tpot_ms.p50}, {"p90", r.tpot_ms.p90}, {"p99", r.tpot_ms.p99}};
    j["prompt_tokens"] = r.prompt_tokens;
    j["cached_tokens"] = r.cached_tokens;
    j["prefill_tokens_computed"] = r.prefill_tokens_computed;
    j["hit_rate"] = r.hit_rate;
    j["requests_by_worker"] = r.requests_by_worker;
    j["routing_ms"] = {{"p50", r.routing_p50_ms}, {"p99", r.routing_p99_ms}};
    j["routing_decisions"] = r.routing_decisions;
    out.push_back(j);
  }
  return out.dump(2);
}

}  // namespace radixkv::router

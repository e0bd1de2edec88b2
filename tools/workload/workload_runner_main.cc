// radixkv workload runner: drives a router with concurrent streaming clients
// over the shared-prefix, multi-turn and document-qa workloads, once per run
// configuration (placement policy, prefix cache on/off), and prints the
// comparison side by side (plus optional CSV/JSON files).
//
// Default sizes are scaled for the embedded 3M-parameter model on a 2-core
// CPU so that the main job finishes in minutes; SGLang's benchmark sizes are
// flags (see --help and docs/perf.md).
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "model/model_config.h"
#include "model/tokenizer/load_tokenizer.h"
#include "process/process_lifecycle.h"
#include "spdlog/spdlog.h"
#include "tools/workload/workload.h"
#include "tools/workload/workload_runner.h"

ABSL_DECLARE_FLAG(std::string, log_level);

ABSL_FLAG(std::string, router, "127.0.0.1:50050", "Router host:port.");
ABSL_FLAG(std::string, cache_service, "",
          "Cache service host:port, flushed before each run so every run "
          "starts cold; empty = no flush.");
ABSL_FLAG(std::string, router_metrics, "",
          "Router /metrics host:port, scraped for routing latency; empty = "
          "not reported.");
ABSL_FLAG(
    std::string, model_dir, "models/radixkv-demo-llama",
    "Checkpoint whose tokenizer (tokenizer.json or tokenizer.model) turns "
    "the texts into token ids and "
    "whose config.json bounds the context.");
ABSL_FLAG(std::string, workloads, "shared-prefix,multi-turn,document-qa",
          "Workloads to run, in order.");
ABSL_FLAG(std::string, configs,
          "cache_aware,cache_off,round_robin,least_load,approx_tree",
          "Run configurations compared on shared-prefix and multi-turn: "
          "placement policies, and cache_off (cache_aware with the prefix "
          "cache disabled).");
ABSL_FLAG(std::string, document_qa_configs, "cache_aware,cache_off",
          "Run configurations for document-qa.");
ABSL_FLAG(int, concurrency, 8, "Concurrent client streams.");
ABSL_FLAG(int, max_run_seconds, 120,
          "No new session starts after this many seconds of a run.");
ABSL_FLAG(int, request_timeout_seconds, 120, "Deadline of each request.");
ABSL_FLAG(uint32_t, seed, 1234, "Seed of the traces (offsets, order).");
ABSL_FLAG(std::string, corpus_files,
          "/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/"
          "Apache-2.0,/usr/share/common-licenses/MPL-2.0,/usr/share/"
          "common-licenses/Artistic",
          "Texts sliced into system prompts, questions and user messages.");
// shared-prefix (SGLang's generated-shared-prefix benchmark: 64 x 16, 2048,
// 128, 256).
ABSL_FLAG(int, sp_groups, 12,
          "shared-prefix: groups (SGLang: 64). 12 x (1 + 384) system tokens = "
          "4,620 tokens: 1.5 of the main job's 3,072-token KV pools, so two "
          "workers hold every group only when placement partitions them.");
ABSL_FLAG(int, sp_prompts_per_group, 16,
          "shared-prefix: prompts per group (SGLang: 16).");
ABSL_FLAG(int, sp_system_tokens, 384,
          "shared-prefix: system prompt tokens (SGLang: 2048).");
ABSL_FLAG(int, sp_question_tokens, 32,
          "shared-prefix: question tokens (SGLang: 128).");
ABSL_FLAG(int, sp_output_tokens, 16,
          "shared-prefix: output tokens (SGLang: 256).");
// multi-turn
ABSL_FLAG(int, mt_conversations, 16, "multi-turn: conversations.");
ABSL_FLAG(int, mt_rounds, 5, "multi-turn: rounds per conversation.");
ABSL_FLAG(int, mt_system_tokens, 128, "multi-turn: system prompt tokens.");
ABSL_FLAG(int, mt_user_tokens, 48, "multi-turn: user message tokens.");
ABSL_FLAG(int, mt_output_tokens, 16, "multi-turn: answer tokens per round.");
ABSL_FLAG(int, mt_concurrency, 0,
          "multi-turn: client streams (0 = one per conversation, so every "
          "conversation is active and rounds interleave across all of "
          "them; --concurrency does not apply).");
// document-qa
ABSL_FLAG(std::string, dq_document, "/usr/share/common-licenses/Apache-2.0",
          "document-qa: the shared document.");
ABSL_FLAG(int, dq_document_tokens, 1024,
          "document-qa: leading document tokens used as context.");
ABSL_FLAG(int, dq_questions, 32, "document-qa: questions.");
ABSL_FLAG(int, dq_question_tokens, 24, "document-qa: question tokens.");
ABSL_FLAG(int, dq_output_tokens, 16, "document-qa: output tokens.");
// outputs
ABSL_FLAG(std::string, csv, "", "Also write the run summaries as CSV here.");
ABSL_FLAG(std::string, json, "", "Also write the run summaries as JSON here.");
ABSL_FLAG(std::string, report_file, "", "Also write the report text here.");

namespace {

namespace router = radixkv::router;
namespace model = radixkv::model;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Prefill with the cache on vs off, hit rates of cache_aware vs approx_tree
// and round_robin, routing p99: the main job's targets (docs/perf.md).
std::string Checks(const std::vector<router::RunResult>& runs) {
  auto find = [&](const std::string& label) -> const router::RunResult* {
    for (const auto& r : runs) {
      if (r.config.label == label) return &r;
    }
    return nullptr;
  };
  std::string out;
  const auto* on = find("cache_aware");
  const auto* off = find("cache_off");
  const auto* approx = find("approx_tree");
  const auto* rr = find("round_robin");
  if (on != nullptr && off != nullptr && off->prefill_tokens_computed > 0) {
    const double ratio = static_cast<double>(on->prefill_tokens_computed) /
                         static_cast<double>(off->prefill_tokens_computed);
    absl::StrAppend(
        &out, absl::StrFormat("  prefill computed, cache on / off: %.1f%% "
                              "(target <= 40%%) %s\n",
                              100 * ratio, ratio <= 0.40 ? "PASS" : "MISS"));
  }
  if (on != nullptr && approx != nullptr) {
    absl::StrAppend(
        &out,
        absl::StrFormat("  hit rate cache_aware %.1f%% vs approx_tree "
                        "%.1f%% (target >=) %s\n",
                        100 * on->hit_rate, 100 * approx->hit_rate,
                        on->hit_rate >= approx->hit_rate ? "PASS" : "MISS"));
  }
  if (on != nullptr && rr != nullptr) {
    absl::StrAppend(
        &out,
        absl::StrFormat("  hit rate cache_aware %.1f%% vs round_robin %.1f%% "
                        "= %.2fx (target >= 2x) %s\n",
                        100 * on->hit_rate, 100 * rr->hit_rate,
                        rr->hit_rate > 0 ? on->hit_rate / rr->hit_rate : 0.0,
                        on->hit_rate >= 2 * rr->hit_rate ? "PASS" : "MISS"));
  }
  if (on != nullptr && on->routing_p99_ms >= 0) {
    absl::StrAppend(
        &out,
        absl::StrFormat("  routing decision incl. Match p99: %.2f ms over %d "
                        "decisions%s (target <= 2 ms) %s\n",
                        on->routing_p99_ms, on->routing_decisions,
                        on->routing_decisions < 100
                            ? " (fewer than 100: p99 is about their maximum)"
                            : "",
                        on->routing_p99_ms <= 2.0 ? "PASS" : "MISS"));
  }
  return out;
}

// The runner is a client: SIGINT/SIGTERM end it by default. Both the mask
// and the disposition: InitProcess installs a handler that only records them
// for WaitForShutdownSignal, which the runner never calls (the launcher's
// SIGTERM on Ctrl-C would be ignored and the job would run on).
void RestoreDefaultTerminationSignals() {
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

// What every workload generator draws from.
struct WorkloadInputs {
  const model::Tokenizer* tokenizer = nullptr;
  std::vector<int32_t> corpus;  // token ids of --corpus_files
  int32_t bos = -1;             // -1: the model has none
  uint32_t seed = 0;
  int64_t max_context = 2048;  // positions: prompt + output must fit
};

// The token ids of every file of --corpus_files, concatenated.
absl::StatusOr<std::vector<int32_t>> LoadCorpus(
    const model::Tokenizer& tokenizer) {
  std::vector<int32_t> corpus;
  for (absl::string_view path : absl::StrSplit(
           absl::GetFlag(FLAGS_corpus_files), ',', absl::SkipEmpty())) {
    auto text = ReadFile(std::string(path));
    if (!text.ok()) return text.status();
    auto ids = tokenizer.Encode(*text, /*add_special_tokens=*/false);
    if (!ids.ok()) return ids.status();
    corpus.insert(corpus.end(), ids->begin(), ids->end());
  }
  return corpus;
}

absl::StatusOr<router::Workload> MakeDocumentQa(const WorkloadInputs& in) {
  const std::string path = absl::GetFlag(FLAGS_dq_document);
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto doc = in.tokenizer->Encode(*text, /*add_special_tokens=*/false);
  if (!doc.ok()) return doc.status();
  router::DocumentQaParams p;
  p.document_name = path.substr(path.rfind('/') + 1);
  p.document_tokens = absl::GetFlag(FLAGS_dq_document_tokens);
  p.questions = absl::GetFlag(FLAGS_dq_questions);
  p.question_tokens = absl::GetFlag(FLAGS_dq_question_tokens);
  p.output_tokens = absl::GetFlag(FLAGS_dq_output_tokens);
  return router::MakeDocumentQaWorkload(p, *doc, in.corpus, in.bos, in.seed,
                                        in.max_context);
}

// The workload `name` of --workloads, sized by its flags.
absl::StatusOr<router::Workload> MakeWorkload(absl::string_view name,
                                              const WorkloadInputs& in) {
  if (name == "shared-prefix") {
    router::SharedPrefixParams p;
    p.groups = absl::GetFlag(FLAGS_sp_groups);
    p.prompts_per_group = absl::GetFlag(FLAGS_sp_prompts_per_group);
    p.system_tokens = absl::GetFlag(FLAGS_sp_system_tokens);
    p.question_tokens = absl::GetFlag(FLAGS_sp_question_tokens);
    p.output_tokens = absl::GetFlag(FLAGS_sp_output_tokens);
    return router::MakeSharedPrefixWorkload(p, in.corpus, in.bos, in.seed,
                                            in.max_context);
  }
  if (name == "multi-turn") {
    router::MultiTurnParams p;
    p.conversations = absl::GetFlag(FLAGS_mt_conversations);
    p.rounds = absl::GetFlag(FLAGS_mt_rounds);
    p.system_tokens = absl::GetFlag(FLAGS_mt_system_tokens);
    p.user_tokens = absl::GetFlag(FLAGS_mt_user_tokens);
    p.output_tokens = absl::GetFlag(FLAGS_mt_output_tokens);
    auto workload = router::MakeMultiTurnWorkload(p, in.corpus, in.bos, in.seed,
                                                  in.max_context);
    if (workload.ok()) {
      const int streams = absl::GetFlag(FLAGS_mt_concurrency);
      workload->concurrency = streams > 0 ? streams : p.conversations;
      absl::StrAppend(&workload->description, ", ", workload->concurrency,
                      " concurrent streams");
    }
    return workload;
  }
  if (name == "document-qa") return MakeDocumentQa(in);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown workload \"", name,
                   "\" (expected shared-prefix, multi-turn, document-qa)"));
}

std::string ReportHeader(const router::RunnerOptions& options, uint32_t seed,
                         int64_t max_context) {
  return absl::StrFormat(
      "radixkv workload report: router %s, %d concurrent streams, seed %u\n"
      "Sizes are scaled down so that the default comparison takes about a "
      "minute with the embedded\n3M-parameter model on 2 CPU cores (the "
      "SGLang benchmark's shared-prefix sizes 64x16 groups, 2048-token\nsystem "
      "prompts, 256 output tokens are flags: --sp_groups=64 "
      "--sp_prompts_per_group=16\n--sp_system_tokens=2048 ...; prompt + "
      "output must fit %d positions).\n%s; "
      "greedy decoding with ignore_eos (fixed output lengths).\n\n",
      options.router_address, options.concurrency, seed, max_context,
      options.cache_service_address.empty()
          ? "The cache is not flushed between runs (no --cache_service)"
          : "Each run starts with a flushed cache");
}

// One run of `workload` per config; failed requests are listed on stderr and
// counted in `*errors`.
absl::StatusOr<std::vector<router::RunResult>> RunConfigs(
    router::WorkloadRunner& runner, const router::Workload& workload,
    const std::vector<router::RunConfig>& configs, int64_t* errors) {
  std::vector<router::RunResult> runs;
  for (const router::RunConfig& config : configs) {
    auto result = runner.Run(workload, config);
    if (!result.ok()) return result.status();
    *errors += result->errors;
    for (const auto& rec : result->records) {
      if (rec.status != "OK") {
        std::fprintf(stderr, "  %s/%s %s turn %d: %s %s\n",
                     result->workload.c_str(), config.label.c_str(),
                     rec.session.c_str(), rec.turn, rec.status.c_str(),
                     rec.error_message.c_str());
      }
    }
    runs.push_back(*std::move(result));
  }
  return runs;
}

// The routing target over every cache_aware decision of the job (one
// workload's p99 rests on its two or three slowest decisions); empty without
// cache_aware decisions.
std::string RoutingSummary(const std::vector<router::RunResult>& all) {
  std::map<double, double> cache_aware_routing;
  int64_t cache_aware_decisions = 0;
  for (const router::RunResult& r : all) {
    if (r.config.label != "cache_aware") continue;
    router::MergeRoutingLatencyBuckets(r.routing_latency_buckets,
                                       &cache_aware_routing);
    cache_aware_decisions += r.routing_decisions;
  }
  if (cache_aware_decisions == 0) return "";
  const double p99_ms =
      router::HistogramQuantile(cache_aware_routing, 0.99) * 1e3;
  return absl::StrFormat(
      "routing decision incl. Match, all cache_aware decisions of this job: "
      "p50 %.2f ms, p99 %.2f ms over %d decisions (target <= 2 ms) %s\n\n",
      router::HistogramQuantile(cache_aware_routing, 0.50) * 1e3, p99_ms,
      cache_aware_decisions, p99_ms <= 2.0 ? "PASS" : "MISS");
}

void WriteIfNamed(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << text;
  std::printf("wrote %s\n", path.c_str());
}

int Fail(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "workload_runner: %s\n", status.ToString().c_str());
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  namespace process = radixkv::process;
  absl::SetFlag(&FLAGS_log_level, "warn");
  process::InitProcess(argc, argv,
                       "radixkv workload runner: shared-prefix, multi-turn "
                       "and document-qa against a router, compared per "
                       "placement policy and with the prefix cache off.");
  RestoreDefaultTerminationSignals();
  auto configs = router::ParseRunConfigs(absl::GetFlag(FLAGS_configs));
  auto dq_configs =
      router::ParseRunConfigs(absl::GetFlag(FLAGS_document_qa_configs));
  absl::Status valid = configs.ok() ? dq_configs.status() : configs.status();
  if (valid.ok() && absl::GetFlag(FLAGS_concurrency) < 1) {
    valid = absl::InvalidArgumentError("--concurrency must be >= 1");
  }
  if (valid.ok() && absl::GetFlag(FLAGS_mt_concurrency) < 0) {
    valid = absl::InvalidArgumentError("--mt_concurrency must be >= 0");
  }
  if (process::CheckFlagsOnly() || !valid.ok()) {
    return process::FinishCheckFlags(valid);
  }

  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  auto loaded = radixkv::model::LoadTokenizer(model_dir);
  if (!loaded.ok()) return Fail(loaded.status(), 1);
  WorkloadInputs inputs;
  inputs.tokenizer = loaded->tokenizer.get();
  if (auto config = radixkv::model::LoadModelConfig(model_dir); config.ok()) {
    inputs.max_context = config->max_position_embeddings;
  }
  auto corpus = LoadCorpus(*inputs.tokenizer);
  if (!corpus.ok()) return Fail(corpus.status(), 1);
  inputs.corpus = *std::move(corpus);
  inputs.bos = loaded->files.bos_token_id.value_or(-1);
  inputs.seed = absl::GetFlag(FLAGS_seed);

  router::RunnerOptions options;
  options.router_address = absl::GetFlag(FLAGS_router);
  options.cache_service_address = absl::GetFlag(FLAGS_cache_service);
  options.router_metrics_address = absl::GetFlag(FLAGS_router_metrics);
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.max_run_duration =
      absl::Seconds(absl::GetFlag(FLAGS_max_run_seconds));
  options.request_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_request_timeout_seconds));
  router::WorkloadRunner runner(options);
  std::string report = ReportHeader(options, inputs.seed, inputs.max_context);
  std::fputs(report.c_str(), stdout);
  std::fflush(stdout);

  std::vector<router::RunResult> all;
  int64_t total_errors = 0;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_workloads), ',', absl::SkipEmpty())) {
    absl::StatusOr<router::Workload> workload = MakeWorkload(name, inputs);
    if (!workload.ok()) return Fail(workload.status(), 2);
    auto runs = RunConfigs(runner, *workload,
                           name == "document-qa" ? *dq_configs : *configs,
                           &total_errors);
    if (!runs.ok()) return Fail(runs.status(), 1);
    std::string section = absl::StrCat(router::FormatComparison(*runs), "\n");
    const std::string checks = Checks(*runs);
    if (!checks.empty()) absl::StrAppend(&section, checks, "\n");
    std::fputs(section.c_str(), stdout);
    std::fflush(stdout);
    absl::StrAppend(&report, section);
    all.insert(all.end(), runs->begin(), runs->end());
  }
  const std::string routing = RoutingSummary(all);
  std::fputs(routing.c_str(), stdout);
  absl::StrAppend(&report, routing);
  WriteIfNamed(absl::GetFlag(FLAGS_csv), router::FormatCsv(all));
  WriteIfNamed(absl::GetFlag(FLAGS_json), router::FormatJson(all));
  WriteIfNamed(absl::GetFlag(FLAGS_report_file), report);
  if (total_errors > 0) {
    std::printf("%lld requests failed (see stderr)\n",
                static_cast<long long>(total_errors));
    return 3;
  }
  return 0;
}

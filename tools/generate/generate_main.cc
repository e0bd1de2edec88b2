// generate: text in, text out with a LLaMA-family checkpoint on the CPU
// executor, without the cache service (offline generation, one request).
//
//   bazel run //tools/generate -- \
//       --prompt="The license grants you the freedom to" --max_new_tokens=48
//
// Streams the continuation to stdout as it is generated (UTF-8 safe deltas,
// stop strings applied), then prints timing to stderr.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "model/tokenizer/load_tokenizer.h"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/kv_flag_parsing.h"
#include "worker/offline_generation.h"
#include "worker/output_processor.h"
#include "worker/sampler.h"

ABSL_FLAG(std::string, model_dir, "models/radixkv-demo-llama",
          "Hugging Face checkpoint directory (config.json, *.safetensors, "
          "tokenizer.json or tokenizer.model). Relative paths are tried in the "
          "working "
          "directory, then in the binary's Bazel runfiles.");
ABSL_FLAG(std::string, prompt, "The license grants you the freedom to",
          "Prompt text; BOS is prepended.");
ABSL_FLAG(int32_t, max_new_tokens, 48, "Tokens to generate, >= 1.");
ABSL_FLAG(double, temperature, 0.0, "0 = greedy.");
ABSL_FLAG(int32_t, top_k, 0, "0 = off.");
ABSL_FLAG(double, top_p, 1.0, "1 = off.");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "Comma-separated stop strings (cut before the match).");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating after EOS.");
ABSL_FLAG(int32_t, threads, 2, "CPU threads (attention + OpenBLAS).");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV pool dtype: f32, bf16, f16.");

namespace radixkv::worker {
namespace {

std::string ResolveModelDir(const std::string& dir) {
  if (dir.empty() || dir[0] == '/' ||
      std::ifstream(dir + "/config.json").good()) {
    return dir;
  }
  std::vector<std::string> roots;
  if (const char* r = std::getenv("RUNFILES_DIR")) roots.push_back(r);
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) roots.push_back(std::string(exe, n) + ".runfiles");
  for (const std::string& root : roots) {
    const std::string candidate = absl::StrCat(root, "/radixkv/", dir);
    if (std::ifstream(candidate + "/config.json").good()) return candidate;
  }
  return dir;
}

int Main() {
  const std::string model_dir = ResolveModelDir(absl::GetFlag(FLAGS_model_dir));
  SamplingParams params;
  params.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  params.top_k = absl::GetFlag(FLAGS_top_k);
  params.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  params.seed = absl::GetFlag(FLAGS_seed);
  params.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  params.stop_strings = absl::GetFlag(FLAGS_stop);
  params.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  if (absl::Status s = ValidateSamplingParams(params, 1 << 16); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 2;
  }
  CpuModelExecutorOptions options;
  options.model_dir = model_dir;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  const absl::StatusOr<DType> dtype =
      ParseKvDType(absl::GetFlag(FLAGS_kv_dtype));
  if (!dtype.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 std::string(dtype.status().message()).c_str());
    return 2;
  }
  options.kv_dtype = *dtype;
  absl::StatusOr<model::LoadedTokenizer> tokenizer =
      model::LoadTokenizer(model_dir);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "error: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::vector<int32_t>> prompt_ids =
      tokenizer->tokenizer->Encode(absl::GetFlag(FLAGS_prompt),
                                   /*add_special_tokens=*/true);
  if (!prompt_ids.ok()) {
    std::fprintf(stderr, "error: %s\n", prompt_ids.status().ToString().c_str());
    return 2;
  }
  options.kv_capacity_slots =
      static_cast<int64_t>(prompt_ids->size()) + params.max_new_tokens + 16;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> executor =
      CpuModelExecutor::Create(options);
  if (!executor.ok()) {
    std::fprintf(stderr, "error: %s\n", executor.status().ToString().c_str());
    return 1;
  }

  absl::StatusOr<model::IncrementalDetokenizer> detok =
      model::IncrementalDetokenizer::Create(tokenizer->tokenizer.get(),
                                            *prompt_ids,
                                            /*skip_special_tokens=*/true);
  if (!detok.ok()) {
    std::fprintf(stderr, "error: %s\n", detok.status().ToString().c_str());
    return 1;
  }
  StopChecker stop(params.stop_strings);
  const std::vector<int32_t> eos = MergeEosTokenIds(
      (*executor)->config().eos_token_ids, tokenizer->files.eos_token_ids);
  std::fputs(absl::GetFlag(FLAGS_prompt).c_str(), stdout);
  std::fflush(stdout);
  absl::Status stream_error;
  auto on_token = [&](size_t, int32_t token) {
    if (!params.ignore_eos &&
        std::find(eos.begin(), eos.end(), token) != eos.end()) {
      return true;  // EOS: no text
    }
    absl::StatusOr<std::string> delta = detok->Append(token);
    if (!delta.ok()) {
      stream_error = delta.status();
      return false;
    }
    StopChecker::Result r = stop.Append(*delta);
    std::fputs(r.emit.c_str(), stdout);
    std::fflush(stdout);
    return !r.stopped;
  };
  OfflineRequest request{*prompt_ids, params};
  OfflineGenerationStats stats;
  absl::StatusOr<std::vector<OfflineResult>> out =
      GenerateOffline(**executor, {request}, eos, on_token, &stats);
  if (!out.ok() || !stream_error.ok()) {
    std::fprintf(stderr, "\nerror: %s\n",
                 (out.ok() ? stream_error : out.status()).ToString().c_str());
    return 1;
  }
  if (!stop.stopped()) {
    absl::StatusOr<std::string> rest = detok->Flush();
    StopChecker::Result r = stop.Append(rest.ok() ? *rest : "");
    std::fputs(r.emit.c_str(), stdout);
    if (!r.stopped) std::fputs(stop.Flush().c_str(), stdout);
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  const char* reasons[] = {"length", "stop token", "eos", "stop string"};
  std::fprintf(stderr,
               "[%zu prompt tokens, %zu generated, finish: %s; prefill %.1f "
               "ms, decode %.1f tokens/s]\n",
               prompt_ids->size(), (*out)[0].output_ids.size(),
               reasons[static_cast<int>((*out)[0].finish_reason)],
               stats.prefill_seconds * 1e3,
               stats.decode_seconds > 0
                   ? stats.decode_tokens / stats.decode_seconds
                   : 0.0);
  return 0;
}

}  // namespace
}  // namespace radixkv::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return radixkv::worker::Main();
}

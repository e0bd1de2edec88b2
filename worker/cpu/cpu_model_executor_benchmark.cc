// End-to-end throughput of CpuModelExecutor on the embedded default model
// (models/radixkv-demo-llama): prefill tokens/s and decode tokens/s at batch
// 1 and 8, through GenerateOffline (prefill = one ragged extend batch of all
// prompts; decode = paged decode of all sequences per step, greedy sampling
// included). Bounded run (a few seconds); prints a table.
//
//   bazel run -c opt //worker/cpu:cpu_model_executor_benchmark -- --threads=2
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/offline_generation.h"

ABSL_FLAG(std::string, model_dir, "models/radixkv-demo-llama",
          "Checkpoint directory (relative to the runfiles root under bazel "
          "run).");
ABSL_FLAG(int32_t, threads, 2, "CPU threads (attention + OpenBLAS).");
ABSL_FLAG(int32_t, prompt_len, 128, "Prompt tokens per sequence.");
ABSL_FLAG(int32_t, new_tokens, 64, "Generated tokens per sequence.");
ABSL_FLAG(int32_t, repeats, 3, "Runs per row; the best is reported.");
ABSL_FLAG(int32_t, decode_partition_size, 0, "0 = decode v1; > 0 = v2.");
ABSL_FLAG(int32_t, gemv_max_rows, 8,
          "Linear layers with at most this many rows use GEMV per row.");

namespace radixkv::worker {
namespace {

int Main() {
  CpuModelExecutorOptions o;
  o.model_dir = absl::GetFlag(FLAGS_model_dir);
  o.num_threads = absl::GetFlag(FLAGS_threads);
  o.page_size = 16;
  o.decode_partition_size = absl::GetFlag(FLAGS_decode_partition_size);
  o.gemv_max_rows = absl::GetFlag(FLAGS_gemv_max_rows);
  const int32_t prompt_len = absl::GetFlag(FLAGS_prompt_len);
  const int32_t new_tokens = absl::GetFlag(FLAGS_new_tokens);
  o.kv_capacity_slots = 8 * (prompt_len + new_tokens + 32);
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.status().ToString().c_str());
    return 1;
  }
  const model::ModelConfig& c = (*e)->config();
  std::printf(
      "model %s: %d layers, hidden %d, heads %d/%d, vocab %d; threads %d, "
      "page_size 16, KV f32 bshd, decode %s\n",
      o.model_dir.c_str(), c.num_hidden_layers, c.hidden_size,
      c.num_attention_heads, c.num_key_value_heads, c.vocab_size, o.num_threads,
      o.decode_partition_size > 0 ? "v2" : "v1");
  std::printf("%-6s %-8s %-8s %14s %14s %12s\n", "batch", "prompt", "new",
              "prefill tok/s", "decode tok/s", "ms/step");
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(3, c.vocab_size - 1);
  for (int batch : {1, 8}) {
    std::vector<OfflineRequest> requests(batch);
    for (OfflineRequest& r : requests) {
      r.prompt_ids.push_back(1);
      while (static_cast<int32_t>(r.prompt_ids.size()) < prompt_len) {
        r.prompt_ids.push_back(token(rng));
      }
      r.params.max_new_tokens = new_tokens;
      r.params.ignore_eos = true;
    }
    double best_prefill = 0, best_decode = 0, best_step_ms = 1e30;
    for (int rep = 0; rep < absl::GetFlag(FLAGS_repeats); ++rep) {
      OfflineGenerationStats stats;
      absl::StatusOr<std::vector<OfflineResult>> out =
          GenerateOffline(**e, requests, c.eos_token_ids, {}, &stats);
      if (!out.ok()) {
        std::fprintf(stderr, "error: %s\n", out.status().ToString().c_str());
        return 1;
      }
      best_prefill =
          std::max(best_prefill, stats.prefill_tokens / stats.prefill_seconds);
      best_decode =
          std::max(best_decode, stats.decode_tokens / stats.decode_seconds);
      best_step_ms = std::min(best_step_ms,
                              1e3 * stats.decode_seconds / stats.decode_steps);
    }
    std::printf("%-6d %-8d %-8d %14.0f %14.0f %12.2f\n", batch, prompt_len,
                new_tokens, best_prefill, best_decode, best_step_ms);
  }
  return 0;
}

}  // namespace
}  // namespace radixkv::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return radixkv::worker::Main();
}

// Test support: the Hugging Face transformers golden checkpoints of
// shared/golden (see its README "How a C++ test should compare") and the
// one-shot prefill whose every-position logits are compared with the golden
// logits. Shared by the CPU (worker/cpu) and GPU (worker/gpu) model tests.
#ifndef RADIXKV_WORKER_TESTING_GOLDEN_CHECKPOINTS_H_
#define RADIXKV_WORKER_TESTING_GOLDEN_CHECKPOINTS_H_

#include <cstdint>
#include <vector>

#include "worker/model_executor.h"

namespace radixkv::worker::testing {

// Vocabulary size of every golden checkpoint (logit rows are this wide).
inline constexpr int kGoldenVocab = 512;

// The golden checkpoints, folders under shared/golden/models/: LLaMA 2 style
// fp32, LLaMA 3 style GQA + llama3 RoPE in bf16, Qwen2 style (QKV bias) fp32.
inline constexpr const char* kGoldenModels[] = {
    "llama-tiny-fp32", "llama3-gqa-bf16", "qwen2-tiny-fp32"};

// One-shot prefill of `ids` (one sequence) at positions 0.. into slots 0..
// (no prefix) with return_all_logits; returns the fp32 logits of every
// position, [ids.size(), vocab] row-major. A Forward error is reported as a
// gtest failure and yields an empty vector.
std::vector<float> PrefillAllLogits(ModelExecutor& executor,
                                    const std::vector<int32_t>& ids);

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_TESTING_GOLDEN_CHECKPOINTS_H_

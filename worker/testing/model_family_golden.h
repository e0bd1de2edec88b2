// Test support: the model-family golden data written by
// tools/golden/make_model_family_golden.py (worker/testdata/model_families/
// <name>/: config.json, model.safetensors, golden.json, logits.f32) and the
// checks every backend runs against it, with the backend's tolerances:
//   - one-shot prefill of the 1,500-token sequence and a prefix of 700
//     tokens (longer than every window) extended to 1,500: max |logit diff|
//     at the stored positions, argmax equal to transformers' wherever its
//     top-2 margin is at least low_margin;
//   - greedy generation of 32 tokens after the 1,000-token prompt by paged
//     decode: token-identical up to the first step whose transformers top-2
//     margin is below greedy_margin (where the backends may differ).
#ifndef RADIXKV_WORKER_TESTING_MODEL_FAMILY_GOLDEN_H_
#define RADIXKV_WORKER_TESTING_MODEL_FAMILY_GOLDEN_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "worker/model_executor.h"

namespace radixkv::worker::testing {

// The golden checkpoints, folders under model_families/.
inline constexpr const char* kFamilyModels[] = {
    "qwen3-tiny", "mistral-window64", "qwen2-window100"};

// gtest parameter name of a kFamilyModels entry ('-' -> '_').
std::string FamilyTestName(const char* model);

// One sequence's extend of ids[begin:end) over ids[0:begin) cached at slots
// 0..begin-1 (slot = position); all_logits selects return_all_logits.
ForwardBatch ExtendBatch(const std::vector<int32_t>& ids, int begin, int end,
                         bool all_logits);

// Decode of ids[p] (p = ids.size() - 1) over the context ids[0..p] at slots
// 0..p (the token's own slot included, as decode batches carry it).
ForwardBatch DecodeBatch(const std::vector<int32_t>& ids);

// <runfiles>/worker/testdata/model_families/<name> (TEST_SRCDIR, else
// $RADIXKV_MODEL_FAMILY_DIR/<name> when that variable is set: the device
// tests run outside Bazel).
std::string FamilyDir(const std::string& name);

struct FamilyGolden {
  std::string dir;
  nlohmann::json json;            // golden.json
  std::vector<int32_t> sequence;  // 1,500 token ids
  std::vector<int> positions;     // positions of the rows of `logits`
  std::vector<float> logits;      // [positions.size(), vocab]
  int vocab = 0;
};

// Loads the golden of `dir`; false when golden.json is absent (a caller
// skips), a gtest failure when it is there but unreadable.
bool LoadFamilyGolden(const std::string& dir, FamilyGolden* g);

struct FamilyTolerance {
  double max_abs = 1e-3;        // max |logit - golden| at stored positions
  double low_margin = 1e-3;     // argmax compared where margin >= this
  double greedy_margin = 1e-4;  // greedy compared up to a step below this
};

// Prefill and prefix-reuse checks on `executor` (fresh: slots 0..1499 are
// written; needs >= 1,500 slots). `what` prefixes the printed lines.
void ExpectFamilyLogits(ModelExecutor& executor, const FamilyGolden& g,
                        const FamilyTolerance& tol, const std::string& what);

// Greedy-generation check on `executor` (fresh; slots 0..1031 written).
void ExpectFamilyGreedy(ModelExecutor& executor, const FamilyGolden& g,
                        const FamilyTolerance& tol, const std::string& what);

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_TESTING_MODEL_FAMILY_GOLDEN_H_

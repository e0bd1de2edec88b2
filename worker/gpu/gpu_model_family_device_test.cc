// Device test (GPU machine): GpuModelExecutor on the model-family golden
// data (worker/testing/model_family_golden.h: Qwen3's q/k norms, Mistral
// with sliding_window 64, Qwen2 with windows from max_window_layers on)
// against transformers in float64:
//   - fp32 (generic attention kernel): the CPU backend's tolerance, max
//     |logit diff| <= 1e-3, argmax equal where the margin is >= 1e-3, greedy
//     generation token-identical;
//   - bf16 (tensor-core attention for head_dim 64: the windowed mma.sync
//     extend and paged decode): max |logit diff| <= 0.1, argmax equal where
//     the margin is >= 0.1 (the bf16 bound of gpu_model_executor_device_test).
// The data folder is $RADIXKV_MODEL_FAMILY_DIR (stage_gpu_run.sh copies it to
// .gpu-run/model_families); a missing folder fails the test.
#include <string>

#include "gtest/gtest.h"
#include "worker/gpu/gpu_model_executor.h"
#include "worker/testing/model_family_golden.h"

namespace radixkv::worker::gpu {
namespace {

std::unique_ptr<GpuModelExecutor> MakeGpu(const std::string& dir, DType dtype) {
  GpuModelExecutorOptions o;
  o.model_dir = dir;
  o.dtype = dtype;
  o.kv_capacity_slots = 4096;
  o.page_size = 16;
  o.max_tokens_per_step = 2048;
  o.max_batch_size = 8;
  o.max_context_len = 2048;
  absl::StatusOr<std::unique_ptr<GpuModelExecutor>> e =
      GpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

class GpuModelFamilyTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::LoadFamilyGolden(testing::FamilyDir(GetParam()), &g_))
        << g_.dir << " is absent (set RADIXKV_MODEL_FAMILY_DIR)";
  }
  testing::FamilyGolden g_;
};

TEST_P(GpuModelFamilyTest, Fp32MatchesTransformers) {
  std::unique_ptr<GpuModelExecutor> e = MakeGpu(g_.dir, DType::kF32);
  ASSERT_NE(e, nullptr);
  testing::ExpectFamilyLogits(*e, g_, {}, std::string("gpu f32 ") + GetParam());
  std::unique_ptr<GpuModelExecutor> fresh = MakeGpu(g_.dir, DType::kF32);
  ASSERT_NE(fresh, nullptr);
  testing::ExpectFamilyGreedy(*fresh, g_, {},
                              std::string("gpu f32 ") + GetParam());
}

TEST_P(GpuModelFamilyTest, Bf16WithinTolerance) {
  std::unique_ptr<GpuModelExecutor> e = MakeGpu(g_.dir, DType::kBF16);
  ASSERT_NE(e, nullptr);
  testing::FamilyTolerance bf16;
  bf16.max_abs = 0.1;
  bf16.low_margin = 0.1;
  testing::ExpectFamilyLogits(*e, g_, bf16,
                              std::string("gpu bf16 ") + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Families, GpuModelFamilyTest,
                         ::testing::ValuesIn(testing::kFamilyModels),
                         [](const auto& info) {
                           return testing::FamilyTestName(info.param);
                         });

}  // namespace
}  // namespace radixkv::worker::gpu

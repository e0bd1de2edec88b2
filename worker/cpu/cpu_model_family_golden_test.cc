// Golden tests of CpuModelExecutor on the model families beyond LLaMA
// against Hugging Face transformers in float64 (worker/testing/
// model_family_golden.h: Qwen3, Mistral with sliding_window 64, Qwen2 with
// windows from max_window_layers on): fp32 tolerance, max |logit diff| <=
// 1e-3, argmax equal where transformers' top-2 margin is >= 1e-3, greedy
// generation token-identical, with decode v1 and split-KV v2. Skips, naming
// the generator, while worker/testdata/model_families is absent.
#include <string>

#include "gtest/gtest.h"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/testing/model_family_golden.h"

namespace radixkv::worker {
namespace {

std::unique_ptr<CpuModelExecutor> MakeExecutor(const std::string& dir,
                                               int32_t partition) {
  CpuModelExecutorOptions o;
  o.model_dir = dir;
  o.kv_capacity_slots = 2048;
  o.page_size = 16;
  o.decode_partition_size = partition;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

class ModelFamilyGoldenTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!testing::LoadFamilyGolden(testing::FamilyDir(GetParam()), &g_)) {
      GTEST_SKIP() << g_.dir << " is absent: run "
                   << "tools/golden/make_model_family_golden.py --out "
                      "worker/testdata/model_families (torch, transformers)";
    }
  }
  testing::FamilyGolden g_;
};

TEST_P(ModelFamilyGoldenTest, LogitsMatchTransformers) {
  std::unique_ptr<CpuModelExecutor> e = MakeExecutor(g_.dir, 0);
  ASSERT_NE(e, nullptr);
  testing::ExpectFamilyLogits(*e, g_, {}, std::string("cpu ") + GetParam());
}

TEST_P(ModelFamilyGoldenTest, GreedyGenerationMatchesTransformers) {
  for (int32_t partition : {0, 64}) {
    std::unique_ptr<CpuModelExecutor> e = MakeExecutor(g_.dir, partition);
    ASSERT_NE(e, nullptr);
    testing::ExpectFamilyGreedy(*e, g_, {},
                                std::string("cpu ") + GetParam() +
                                    " partition " + std::to_string(partition));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamilyGoldenTest,
                         ::testing::ValuesIn(testing::kFamilyModels),
                         [](const auto& info) {
                           return testing::FamilyTestName(info.param);
                         });

}  // namespace
}  // namespace radixkv::worker

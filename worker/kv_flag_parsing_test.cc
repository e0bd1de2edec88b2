#include "worker/kv_flag_parsing.h"

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

TEST(ParseKvDType, EveryDTypeByItsName) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    absl::StatusOr<DType> parsed = ParseKvDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << DTypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(ParseKvDType("fp16").status().message(),
            "--kv_dtype must be f32, bf16 or f16, got 'fp16'");
  EXPECT_EQ(ParseKvDType("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParseKvLayout, EveryLayoutByItsName) {
  EXPECT_EQ(*ParseKvLayout("bshd"), KvLayout::kBSHD);
  EXPECT_EQ(*ParseKvLayout("bhsd"), KvLayout::kBHSD);
  EXPECT_EQ(*ParseKvLayout("vllm"), KvLayout::kVllm);
  EXPECT_EQ(ParseKvLayout("BSHD").status().message(),
            "--kv_layout must be bshd, bhsd or vllm, got 'BSHD'");
}

}  // namespace
}  // namespace radixkv::worker

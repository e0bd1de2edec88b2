#include "worker/kv_flag_parsing.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace radixkv::worker {

absl::StatusOr<DType> ParseKvDType(absl::string_view value) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (value == DTypeName(dtype)) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--kv_dtype must be f32, bf16 or f16, got '", value, "'"));
}

absl::StatusOr<KvLayout> ParseKvLayout(absl::string_view value) {
  if (value == "bshd") return KvLayout::kBSHD;
  if (value == "bhsd") return KvLayout::kBHSD;
  if (value == "vllm") return KvLayout::kVllm;
  return absl::InvalidArgumentError(absl::StrCat(
      "--kv_layout must be bshd, bhsd or vllm, got '", value, "'"));
}

}  // namespace radixkv::worker

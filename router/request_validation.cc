#include "router/request_validation.h"

#include <string>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/generate_request_checks.h"
#include "proto/prompt_text_limit.h"

namespace radixkv::router {

absl::Status ValidateGenerateRequest(
    const radixkv::v1::GenerateRequest& request,
    int64_t max_prompt_text_bytes) {
  if (request.prompt_case() == radixkv::v1::GenerateRequest::kText &&
      max_prompt_text_bytes > 0 &&
      static_cast<int64_t>(request.text().size()) > max_prompt_text_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt text of ", request.text().size(),
                     " bytes exceeds the limit of ", max_prompt_text_bytes,
                     " bytes (", v1::kMaxPromptBytesPerPosition,
                     " bytes per position of the model's context)"));
  }
  if (absl::StartsWith(request.request_id(), kAssignedRequestIdPrefix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request_id must not start with '", kAssignedRequestIdPrefix,
        "' (reserved for ids the router assigns)"));
  }
  if (absl::Status valid = radixkv::v1::CheckModelIndependentFields(request);
      !valid.ok()) {
    return valid;
  }
  if (request.model().size() > kMaxModelNameBytes) {
    // No worker can serve it, and echoing it would overflow the status
    // metadata.
    return absl::InvalidArgumentError(
        absl::StrCat("model has ", request.model().size(), " bytes; at most ",
                     kMaxModelNameBytes));
  }
  return absl::OkStatus();
}

std::string AssignRequestId() {
  absl::BitGen gen;  // Seeded from the OS entropy pool; not shared.
  const uint64_t hi = absl::Uniform<uint64_t>(gen);
  const uint64_t lo = absl::Uniform<uint64_t>(gen);
  return absl::StrCat(kAssignedRequestIdPrefix, absl::Hex(hi, absl::kZeroPad16),
                      absl::Hex(lo, absl::kZeroPad16));
}

}  // namespace radixkv::router

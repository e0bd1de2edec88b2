// The router's checks of a GenerateRequest before anything else happens to
// it (no tokenization, no Match, no dispatch): the contract's
// model-independent rules plus the router's own (prompt text size, the
// reserved request-id namespace, the model name bound).
#ifndef RADIXKV_ROUTER_REQUEST_VALIDATION_H_
#define RADIXKV_ROUTER_REQUEST_VALIDATION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "radixkv/v1/common.pb.h"

namespace radixkv::router {

// Prefix of the request ids the router assigns itself ("rtr-" + 32 hex
// digits of a random 128-bit value): unguessable, so that no client can
// collide with or Abort another client's request, and a namespace clients
// may not use (their ids with this prefix are INVALID_ARGUMENT).
inline constexpr char kAssignedRequestIdPrefix[] = "rtr-";

// Longest model name, bytes: the cache service registers no longer name, so
// a longer GenerateRequest.model is INVALID_ARGUMENT.
inline constexpr size_t kMaxModelNameBytes = 256;

// INVALID_ARGUMENT with a message that names the field when `request`:
// has text longer than `max_prompt_text_bytes` (> 0; checked before
// tokenizing: a huge text would cost seconds of CPU for a prompt that
// cannot fit any context), a request_id in the reserved
// kAssignedRequestIdPrefix namespace, a field breaking
// radixkv::v1::CheckModelIndependentFields, or a model name over
// kMaxModelNameBytes. Never echoes an unbounded value.
absl::Status ValidateGenerateRequest(
    const radixkv::v1::GenerateRequest& request, int64_t max_prompt_text_bytes);

// A fresh request id: kAssignedRequestIdPrefix + 128 random bits in hex.
std::string AssignRequestId();

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_REQUEST_VALIDATION_H_

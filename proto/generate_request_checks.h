// Contract rules of radixkv.v1.GenerateRequest that hold for every model
// (proto/radixkv/v1/common.proto). The router checks them before placement,
// so a malformed request costs no CacheService.Match and is not dispatched;
// the worker checks them again on arrival (it is also called directly).
// Limits that depend on the model or the worker's flags (vocab_size for
// top_k and token ids, max_position_embeddings, the worker's max_new_tokens
// limit, the model name) stay with the worker
// (worker/generate_request_parser.cc).
#ifndef RADIXKV_PROTO_GENERATE_REQUEST_CHECKS_H_
#define RADIXKV_PROTO_GENERATE_REQUEST_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "radixkv/v1/common.pb.h"

namespace radixkv::v1 {

// common.proto's bounds.
inline constexpr size_t kMaxRequestIdBytes = 128;
inline constexpr int32_t kMaxPriority = 1000;  // priority in [-1000, 1000]
inline constexpr size_t kMaxCacheSaltBytes = 256;
inline constexpr float kMaxTemperature = 100;
inline constexpr int32_t kMaxNewTokens = 65536;
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr int32_t kMaxSamples = 64;  // GenerateRequest.n in [1, 64]
inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr float kMaxRepetitionPenalty = 2;
inline constexpr float kMaxAbsPenalty = 2;  // frequency, presence

// GenerateRequest.n with 0 (unset) read as 1.
inline int32_t NumSamples(const GenerateRequest& request) {
  return request.n() == 0 ? 1 : request.n();
}

// The request_id syntax: 1..128 bytes of [A-Za-z0-9._:-]. Ids travel as gRPC
// metadata, where a byte outside printable ASCII makes gRPC abort the
// process, and are echoed in status messages, so nothing may use an id
// before this check.
bool IsValidRequestId(std::string_view id);

// OK when IsValidRequestId(id), else INVALID_ARGUMENT stating the syntax
// (without echoing the id, which may be megabytes long).
absl::Status CheckRequestId(std::string_view id);

// INVALID_ARGUMENT, naming the field and the value, when `request` breaks a
// model-independent rule: request_id (when set) syntax; priority in
// [-1000, 1000]; cache_salt <= 256 bytes; a prompt (text or token_ids) that
// is set and non-empty, token ids >= 0; temperature finite in [0, 100];
// top_k >= 0; top_p in [0, 1] (0 = unset = 1); max_new_tokens in
// [1, 65536]; stop_token_ids >= 0; at most 16 stop strings of 1..256 bytes;
// n in [0, 64] (0 = 1); logprobs in [0, 20]; repetition_penalty in [0, 2];
// frequency_penalty and presence_penalty in [-2, 2]; min_p in [0, 1].
// OK otherwise. Reads only `request`.
absl::Status CheckModelIndependentFields(const GenerateRequest& request);

// The n / logprobs / penalty / min_p part of CheckModelIndependentFields.
absl::Status CheckSamplingControls(const GenerateRequest& request);

}  // namespace radixkv::v1

#endif  // RADIXKV_PROTO_GENERATE_REQUEST_CHECKS_H_

// The worker's KV pool flags (--kv_dtype, --kv_layout) parsed into the pool's
// terms, for every binary that takes them (the worker, tools/generate).
#ifndef RADIXKV_WORKER_KV_FLAG_PARSING_H_
#define RADIXKV_WORKER_KV_FLAG_PARSING_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {

// "f32", "bf16" or "f16" (DTypeName); INVALID_ARGUMENT "--kv_dtype must be
// f32, bf16 or f16, got '<value>'" otherwise.
absl::StatusOr<DType> ParseKvDType(absl::string_view value);

// "bshd", "bhsd" or "vllm"; INVALID_ARGUMENT "--kv_layout must be bshd, bhsd
// or vllm, got '<value>'" otherwise.
absl::StatusOr<KvLayout> ParseKvLayout(absl::string_view value);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KV_FLAG_PARSING_H_

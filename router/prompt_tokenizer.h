// PromptTokenizer: turns a text prompt into the token ids the router matches
// against the cache service (CacheService.Match needs ids) and forwards to
// the worker, so that routing and serving see exactly the same tokens.
#ifndef RADIXKV_ROUTER_PROMPT_TOKENIZER_H_
#define RADIXKV_ROUTER_PROMPT_TOKENIZER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace radixkv::router {

class PromptTokenizer {
 public:
  virtual ~PromptTokenizer() = default;
  // Token ids of `text` with BOS prepended (the worker's text convention).
  // INVALID_ARGUMENT when the text cannot be encoded. Thread-safe.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text) const = 0;
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_PROMPT_TOKENIZER_H_

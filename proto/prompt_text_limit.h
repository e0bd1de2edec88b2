// The bound on the size of a text prompt, checked before tokenizing it.
//
// Tokenizing is linear in the text but not free (~0.6 us per byte with the
// sentencepiece model on one core), and a text far longer than the model's
// context can only be rejected after tokenizing. A prompt that fits the
// context has at most max_position_embeddings tokens; no tokenizer in use
// produces tokens longer than 32 bytes on average (byte-fallback pieces are
// 1 byte, the longest sentencepiece/BPE pieces a few dozen), so a text of
// more than max_position_embeddings x 32 bytes cannot fit and is rejected
// with INVALID_ARGUMENT by the router and the worker without tokenizing it.
#ifndef RADIXKV_PROTO_PROMPT_TEXT_LIMIT_H_
#define RADIXKV_PROTO_PROMPT_TEXT_LIMIT_H_

#include <algorithm>
#include <cstdint>

namespace radixkv::v1 {

// Bytes of prompt text allowed per position of the model's context.
inline constexpr int64_t kMaxPromptBytesPerPosition = 32;

// Largest accepted text prompt, bytes, for a model with
// `max_position_embeddings` positions (values < 1 count as 1).
inline constexpr int64_t MaxPromptTextBytes(int64_t max_position_embeddings) {
  return std::max<int64_t>(1, max_position_embeddings) *
         kMaxPromptBytesPerPosition;
}

}  // namespace radixkv::v1

#endif  // RADIXKV_PROTO_PROMPT_TEXT_LIMIT_H_

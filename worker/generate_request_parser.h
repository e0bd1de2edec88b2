// ParseGenerateRequest: a radixkv.v1.GenerateRequest checked against what
// one worker serves (its model, vocabulary, context, KV pool and
// max_new_tokens limit) and turned into a prompt of token ids and the
// scheduler's SamplingParams. Pure: nothing is queued and no memory is
// taken, so a refused request leaves the worker unchanged.
#ifndef RADIXKV_WORKER_GENERATE_REQUEST_PARSER_H_
#define RADIXKV_WORKER_GENERATE_REQUEST_PARSER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"
#include "radixkv/v1/common.pb.h"
#include "worker/sampler.h"

namespace radixkv::worker {

// What a request is checked against.
struct GenerateRequestLimits {
  // GenerateRequest.model must be empty or equal.
  std::string model_name;
  int32_t vocab_size = 0;
  // The model's context, positions: prompt + max_new_tokens at most.
  int64_t max_position_embeddings = 0;
  // The KV pool, slots, in pages of page_size slots: a request must fit it
  // empty.
  int64_t capacity_slots = 0;
  int32_t page_size = 1;
  // Upper bound of SamplingParams.max_new_tokens.
  int32_t max_new_tokens_limit = 65536;
};

struct ParsedGenerateRequest {
  // Token ids in [0, vocab_size); text prompts are encoded with BOS.
  std::vector<int32_t> prompt;
  // seed is the request's, 0 when it set none (the scheduler derives one
  // from the request id).
  SamplingParams sampling;
  std::string cache_salt;
  int32_t priority = 0;
  bool disable_prefix_cache = false;
  bool return_text = false;
  // GenerateRequest.n, [1, 64].
  int32_t num_samples = 1;
};

// Errors (INVALID_ARGUMENT unless stated): a model other than
// limits.model_name (echoed only when <= 256 bytes), the model-independent
// rules of proto/generate_request_checks.h, top_k above vocab_size, stop or
// prompt token ids outside [0, vocab_size), sampling values
// ValidateSamplingParams refuses, stop strings, return_text or a text
// prompt without a tokenizer, an empty prompt, text longer than
// MaxPromptTextBytes (checked before tokenizing), prompt + max_new_tokens
// beyond the context; RESOURCE_EXHAUSTED when prompt + max_new_tokens - 1
// slots, in whole pages, exceed the pool (with n > 1: the prompt's full
// pages once plus n x the pages of each sample's own positions). `tokenizer`
// may be nullptr.
absl::StatusOr<ParsedGenerateRequest> ParseGenerateRequest(
    const v1::GenerateRequest& request, const GenerateRequestLimits& limits,
    const model::Tokenizer* tokenizer);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_GENERATE_REQUEST_PARSER_H_

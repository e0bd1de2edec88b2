// Test helper: a radixkv.v1.TokenLogprobs as a worker sends it, for the
// OpenAI response tests.
#ifndef RADIXKV_ROUTER_OPENAI_TOKEN_LOGPROBS_FOR_TEST_H_
#define RADIXKV_ROUTER_OPENAI_TOKEN_LOGPROBS_FOR_TEST_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "radixkv/v1/common.pb.h"

namespace radixkv::router::openai {

// Token `id` with `logprob` and its `top` alternatives (id, logprob).
inline v1::TokenLogprobs TokenLogprobsEntry(
    int32_t id, double logprob,
    const std::vector<std::pair<int32_t, double>>& top) {
  v1::TokenLogprobs e;
  e.mutable_sampled()->set_token_id(id);
  e.mutable_sampled()->set_logprob(logprob);
  for (const auto& [alt, alt_logprob] : top) {
    v1::TokenLogprob* t = e.add_top();
    t->set_token_id(alt);
    t->set_logprob(alt_logprob);
  }
  return e;
}

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_TOKEN_LOGPROBS_FOR_TEST_H_

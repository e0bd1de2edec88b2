#include "worker/generate_request_parser.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/tokenizer/load_tokenizer.h"
#include "proto/prompt_text_limit.h"

namespace radixkv::worker {
namespace {

GenerateRequestLimits Limits() {
  GenerateRequestLimits limits;
  limits.model_name = "m";
  limits.vocab_size = 64;
  limits.max_position_embeddings = 128;
  limits.capacity_slots = 96;
  limits.page_size = 16;
  limits.max_new_tokens_limit = 100;
  return limits;
}

v1::GenerateRequest Request(std::vector<int32_t> prompt, int max_new_tokens) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(),
                                                     prompt.end());
  request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  return request;
}

absl::Status Parse(const v1::GenerateRequest& request) {
  return ParseGenerateRequest(request, Limits(), nullptr).status();
}

TEST(GenerateRequestParserTest, CopiesTheRequestsValues) {
  v1::GenerateRequest request = Request({1, 5, 63}, 7);
  request.set_model("m");
  request.set_cache_salt("tenant-a");
  request.set_priority(-3);
  request.set_disable_prefix_cache(true);
  v1::SamplingParams* sp = request.mutable_sampling();
  sp->set_temperature(0.5f);
  sp->set_top_k(64);
  sp->set_seed(99);
  sp->set_ignore_eos(true);
  sp->add_stop_token_ids(0);
  sp->add_stop_token_ids(63);
  sp->set_repetition_penalty(1.25f);
  sp->set_frequency_penalty(-0.5f);
  sp->set_presence_penalty(0.75f);
  sp->set_min_p(0.05f);
  sp->set_logprobs(5);
  request.set_n(3);
  absl::StatusOr<ParsedGenerateRequest> parsed =
      ParseGenerateRequest(request, Limits(), nullptr);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->prompt, (std::vector<int32_t>{1, 5, 63}));
  EXPECT_EQ(parsed->cache_salt, "tenant-a");
  EXPECT_EQ(parsed->priority, -3);
  EXPECT_TRUE(parsed->disable_prefix_cache);
  EXPECT_FALSE(parsed->return_text);
  EXPECT_EQ(parsed->sampling.temperature, 0.5f);
  EXPECT_EQ(parsed->sampling.top_k, 64);
  EXPECT_EQ(parsed->sampling.top_p, 1.0f);  // 0 = unset = 1.
  EXPECT_EQ(parsed->sampling.seed, 99u);
  EXPECT_EQ(parsed->sampling.max_new_tokens, 7);
  EXPECT_TRUE(parsed->sampling.ignore_eos);
  EXPECT_EQ(parsed->sampling.stop_token_ids, (std::vector<int32_t>{0, 63}));
  EXPECT_TRUE(parsed->sampling.stop_strings.empty());
  EXPECT_EQ(parsed->sampling.repetition_penalty, 1.25f);
  EXPECT_EQ(parsed->sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(parsed->sampling.presence_penalty, 0.75f);
  EXPECT_EQ(parsed->sampling.min_p, 0.05f);
  EXPECT_EQ(parsed->sampling.logprobs, 5);
  EXPECT_EQ(parsed->num_samples, 3);

  // No seed: 0 (the scheduler derives one from the request id).
  absl::StatusOr<ParsedGenerateRequest> unseeded =
      ParseGenerateRequest(Request({1}, 1), Limits(), nullptr);
  ASSERT_TRUE(unseeded.ok());
  EXPECT_EQ(unseeded->sampling.seed, 0u);
  EXPECT_EQ(unseeded->sampling.repetition_penalty, 1.0f);  // 0 = unset = 1.
  EXPECT_EQ(unseeded->num_samples, 1);                     // 0 = unset = 1.
}

TEST(GenerateRequestParserTest, ModelDependentErrorsNameTheLimit) {
  struct Case {
    std::string name;
    v1::GenerateRequest request;
    absl::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, v1::GenerateRequest r, absl::StatusCode code,
                 std::string message) {
    cases.push_back({std::move(name), std::move(r), code, std::move(message)});
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  v1::GenerateRequest r = Request({1, 2}, 4);
  r.set_model("other");
  add("model", r, kInvalid, "unknown model 'other' (this worker serves 'm')");
  r.set_model(std::string(300, 'x'));
  add("long model", r, kInvalid,
      "unknown model of 300 bytes (this worker serves 'm')");
  r = Request({1, 64}, 4);
  add("token id", r, kInvalid, "prompt token id 64 outside [0, 64)");
  r = Request({1}, 4);
  r.mutable_sampling()->set_top_k(65);
  add("top_k", r, kInvalid, "top_k must be in [0, vocab_size=64]");
  r = Request({1}, 4);
  r.mutable_sampling()->add_stop_token_ids(64);
  add("stop id", r, kInvalid, "stop token id 64 outside [0, 64)");
  r = Request({1}, 4);
  r.mutable_sampling()->add_stop("end");
  add("stop string", r, kInvalid,
      "stop strings and return_text need a tokenizer; none is loaded");
  r = Request({1}, 4);
  r.set_return_text(true);
  add("return_text", r, kInvalid,
      "stop strings and return_text need a tokenizer; none is loaded");
  r = Request({1}, 4);
  r.set_text("hello");
  add("text", r, kInvalid, "text prompts need a tokenizer; send token_ids");
  r = Request({}, 4);
  r.set_text("");
  add("empty text", r, kInvalid, "empty prompt");
  r = Request(std::vector<int32_t>(100, 1), 29);
  add("context", r, kInvalid,
      "prompt (100 tokens) + max_new_tokens (29) exceeds the model's context "
      "of 128");
  // 90 + 8 - 1 = 97 slots: 7 pages of 16 > 96 slots.
  r = Request(std::vector<int32_t>(90, 1), 8);
  add("pool", r, absl::StatusCode::kResourceExhausted,
      "prompt (90 tokens) + max_new_tokens (8) cannot fit the KV pool of 96 "
      "slots (page_size 16) even when it is empty");
  // n samples of 33 + 8 - 1 = 40 slots: the 2 full prompt pages once, then
  // one page per sample; 2 + 5 = 7 pages of 16 > 96 slots.
  r = Request(std::vector<int32_t>(33, 1), 8);
  r.set_n(5);
  add("pool, n", r, absl::StatusCode::kResourceExhausted,
      "prompt (33 tokens) + max_new_tokens (8) x n (5) cannot fit the KV pool "
      "of 96 slots (page_size 16) even when it is empty");
  r.set_n(65);
  add("n", r, kInvalid, "n must be in [1, 64], got 65");
  for (const Case& c : cases) {
    absl::Status status = Parse(c.request);
    EXPECT_EQ(status.code(), c.code) << c.name << ": " << status;
    EXPECT_EQ(status.message(), c.message) << c.name;
  }
  // At the bounds: accepted. 90 + 7 - 1 = 96 slots = 6 pages.
  EXPECT_TRUE(Parse(Request(std::vector<int32_t>(90, 1), 7)).ok());
  v1::GenerateRequest four = Request(std::vector<int32_t>(33, 1), 8);
  four.set_n(4);  // 2 + 4 = 6 pages.
  EXPECT_TRUE(Parse(four).ok());
  EXPECT_EQ(Parse(Request({1}, 101)).code(), kInvalid);  // Worker's limit.
}

TEST(GenerateRequestParserTest, TextIsBoundedBeforeTokenizingThenEncoded) {
  auto loaded = model::LoadTokenizer("models/radixkv-demo-llama");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const model::Tokenizer* tokenizer = loaded->tokenizer.get();
  GenerateRequestLimits limits = Limits();
  limits.vocab_size = tokenizer->vocab_size();
  v1::GenerateRequest request = Request({}, 4);
  request.set_text("The license");
  request.set_return_text(true);
  absl::StatusOr<ParsedGenerateRequest> parsed =
      ParseGenerateRequest(request, limits, tokenizer);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<int32_t>> expected =
      tokenizer->Encode("The license", /*add_special_tokens=*/true);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(parsed->prompt, *expected);
  EXPECT_TRUE(parsed->return_text);

  const int64_t max_bytes =
      v1::MaxPromptTextBytes(limits.max_position_embeddings);
  request.set_text(std::string(max_bytes + 1, 'a'));
  absl::Status too_long =
      ParseGenerateRequest(request, limits, tokenizer).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_long.message(),
            absl::StrCat("prompt text of ", max_bytes + 1,
                         " bytes exceeds the limit of ", max_bytes, " bytes (",
                         v1::kMaxPromptBytesPerPosition,
                         " bytes x the model's context of 128 positions)"));
}

}  // namespace
}  // namespace radixkv::worker

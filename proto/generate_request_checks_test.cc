#include "proto/generate_request_checks.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::v1 {
namespace {

GenerateRequest Valid() {
  GenerateRequest r;
  r.set_request_id("req-1");
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(300);
  r.mutable_sampling()->set_max_new_tokens(16);
  return r;
}

TEST(GenerateRequestChecksTest, RequestIdSyntax) {
  EXPECT_TRUE(IsValidRequestId("a"));
  EXPECT_TRUE(IsValidRequestId("conv-3.turn_2:x"));
  EXPECT_TRUE(IsValidRequestId(std::string(128, 'z')));
  EXPECT_FALSE(IsValidRequestId(""));
  EXPECT_FALSE(IsValidRequestId(std::string(129, 'z')));
  EXPECT_FALSE(IsValidRequestId("a b"));
  EXPECT_FALSE(IsValidRequestId("line\n"));
  EXPECT_FALSE(IsValidRequestId("\xc3\xbc"));  // u-umlaut in UTF-8
  EXPECT_TRUE(CheckRequestId("a").ok());
  const absl::Status bad = CheckRequestId(std::string(100000, 'x'));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "request_id must be 1..128 bytes of [A-Za-z0-9._:-]");
}

TEST(GenerateRequestChecksTest, AcceptsValidRequestsAtTheBounds) {
  EXPECT_TRUE(CheckModelIndependentFields(Valid()).ok());
  GenerateRequest r = Valid();
  r.clear_request_id();  // the server assigns one
  r.set_priority(-1000);
  r.set_cache_salt(std::string(256, 's'));
  r.mutable_sampling()->set_temperature(100);
  r.mutable_sampling()->set_top_p(1);
  r.mutable_sampling()->set_max_new_tokens(65536);
  for (int i = 0; i < 16; ++i) {
    r.mutable_sampling()->add_stop(std::string(256, 'x'));
  }
  EXPECT_TRUE(CheckModelIndependentFields(r).ok());
  r.set_text("hello");
  r.set_priority(1000);
  r.mutable_sampling()->set_top_p(0);  // unset = 1
  EXPECT_TRUE(CheckModelIndependentFields(r).ok());
  r.set_n(64);
  r.mutable_sampling()->set_logprobs(20);
  r.mutable_sampling()->mutable_prompt_logprobs()->set_top(0);
  r.mutable_sampling()->set_repetition_penalty(2);
  r.mutable_sampling()->set_frequency_penalty(-2);
  r.mutable_sampling()->set_presence_penalty(2);
  r.mutable_sampling()->set_min_p(1);
  EXPECT_TRUE(CheckModelIndependentFields(r).ok());
  EXPECT_EQ(NumSamples(r), 64);
  r.set_n(0);
  EXPECT_EQ(NumSamples(r), 1);
}

TEST(GenerateRequestChecksTest, EachBrokenRuleIsInvalidArgumentNamingIt) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::function<void(GenerateRequest*)> breaks;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](GenerateRequest* r) { r->set_request_id("caf\xc3\xa9"); },
       "request_id must be 1..128 bytes"},
      {[](GenerateRequest* r) { r->set_priority(1001); },
       "priority must be in [-1000, 1000], got 1001"},
      {[](GenerateRequest* r) { r->set_cache_salt(std::string(257, 's')); },
       "cache_salt must be <= 256 bytes, got 257"},
      {[](GenerateRequest* r) { r->clear_prompt(); }, "no prompt"},
      {[](GenerateRequest* r) { r->set_text(""); }, "empty prompt"},
      {[](GenerateRequest* r) { r->mutable_token_ids()->clear_ids(); },
       "empty prompt"},
      {[](GenerateRequest* r) { r->mutable_token_ids()->add_ids(-5); },
       "prompt token id -5 is negative"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_temperature(-1); },
       "temperature must be in [0, 100], got -1"},
      {[&](GenerateRequest* r) { r->mutable_sampling()->set_temperature(nan); },
       "temperature must be in [0, 100]"},
      {[&](GenerateRequest* r) { r->mutable_sampling()->set_temperature(inf); },
       "temperature must be in [0, 100]"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_top_k(-1); },
       "top_k must be >= 0, got -1"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.5f); },
       "top_p must be in (0, 1]"},
      {[&](GenerateRequest* r) { r->mutable_sampling()->set_top_p(nan); },
       "top_p must be in (0, 1]"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_max_new_tokens(0); },
       "max_new_tokens must be in [1, 65536], got 0"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->set_max_new_tokens(65537);
       },
       "max_new_tokens must be in [1, 65536], got 65537"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->add_stop_token_ids(-2);
       },
       "stop token id -2 is negative"},
      {[](GenerateRequest* r) {
         for (int i = 0; i < 17; ++i) r->mutable_sampling()->add_stop("x");
       },
       "at most 16 stop strings, got 17"},
      {[](GenerateRequest* r) { r->mutable_sampling()->add_stop(""); },
       "empty stop string"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->add_stop(std::string(257, 'x'));
       },
       "stop strings must be <= 256 bytes, got 257"},
      {[](GenerateRequest* r) { r->set_n(65); },
       "n must be in [1, 64], got 65"},
      {[](GenerateRequest* r) { r->set_n(-1); },
       "n must be in [1, 64], got -1"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_logprobs(21); },
       "logprobs must be in [0, 20], got 21"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_logprobs(-1); },
       "logprobs must be in [0, 20], got -1"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->mutable_prompt_logprobs()->set_top(21);
       },
       "prompt_logprobs must be in [0, 20], got 21"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->mutable_prompt_logprobs()->set_top(-1);
       },
       "prompt_logprobs must be in [0, 20], got -1"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->set_repetition_penalty(2.5f);
       },
       "repetition_penalty must be in [0, 2]"},
      {[&](GenerateRequest* r) {
         r->mutable_sampling()->set_repetition_penalty(nan);
       },
       "repetition_penalty must be in [0, 2]"},
      {[](GenerateRequest* r) {
         r->mutable_sampling()->set_frequency_penalty(-2.5f);
       },
       "frequency_penalty must be in [-2, 2], got -2.5"},
      {[&](GenerateRequest* r) {
         r->mutable_sampling()->set_presence_penalty(inf);
       },
       "presence_penalty must be in [-2, 2]"},
      {[](GenerateRequest* r) { r->mutable_sampling()->set_min_p(1.5f); },
       "min_p must be in [0, 1], got 1.5"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerateRequest r = Valid();
    cases[i].breaks(&r);
    const absl::Status st = CheckModelIndependentFields(r);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "case " << i;
    EXPECT_NE(st.message().find(cases[i].message), std::string::npos)
        << "case " << i << ": " << st.message();
  }
}

}  // namespace
}  // namespace radixkv::v1

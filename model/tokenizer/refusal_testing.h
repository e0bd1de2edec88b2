// Test support: checking that components are refused with INVALID_ARGUMENT
// and a message that names them.
#ifndef RADIXKV_MODEL_TOKENIZER_REFUSAL_TESTING_H_
#define RADIXKV_MODEL_TOKENIZER_REFUSAL_TESTING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace radixkv::model::testing {

// A JSON input and a substring its refusal message must contain.
struct Refusal {
  std::string json;
  std::string message;
};

// Expects `build(json)` (returning a Status or StatusOr) to fail with
// INVALID_ARGUMENT naming `message`, for every case.
template <typename Build>
void ExpectRefusals(const std::vector<Refusal>& cases, Build build) {
  for (const Refusal& c : cases) {
    const absl::Status status = build(c.json).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(c.message))
        << c.json;
  }
}

}  // namespace radixkv::model::testing

#endif  // RADIXKV_MODEL_TOKENIZER_REFUSAL_TESTING_H_

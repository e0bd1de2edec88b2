#include "router/request_validation.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

radixkv::v1::GenerateRequest Valid() {
  radixkv::v1::GenerateRequest r;
  r.set_text("hello");
  r.mutable_sampling()->set_max_new_tokens(4);
  return r;
}

void ExpectInvalid(const radixkv::v1::GenerateRequest& r,
                   const std::string& substring) {
  const absl::Status s = ValidateGenerateRequest(r, 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << substring;
  EXPECT_NE(std::string(s.message()).find(substring), std::string::npos) << s;
}

TEST(RequestValidationTest, AcceptsAValidRequest) {
  EXPECT_TRUE(ValidateGenerateRequest(Valid(), 100).ok());
}

TEST(RequestValidationTest, RefusesEachRuleByName) {
  radixkv::v1::GenerateRequest r = Valid();
  r.set_text(std::string(101, 'a'));
  ExpectInvalid(r, "prompt text of 101 bytes exceeds the limit of 100");
  EXPECT_TRUE(ValidateGenerateRequest(r, 0).ok()) << "0 = no text bound";
  r = Valid();
  r.set_request_id("rtr-mine");
  ExpectInvalid(r, "must not start with 'rtr-'");
  r = Valid();
  r.mutable_sampling()->set_max_new_tokens(0);
  ExpectInvalid(r, "max_new_tokens");
  r = Valid();
  r.set_model(std::string(kMaxModelNameBytes + 1, 'm'));
  ExpectInvalid(r, "model has 257 bytes; at most 256");
}

TEST(RequestValidationTest, AssignedIdsAreUniqueInTheReservedNamespace) {
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    const std::string id = AssignRequestId();
    EXPECT_EQ(id.rfind(kAssignedRequestIdPrefix, 0), 0u) << id;
    EXPECT_EQ(id.size(), 4u + 32u) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
}

}  // namespace
}  // namespace radixkv::router

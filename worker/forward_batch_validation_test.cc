#include "worker/forward_batch_validation.h"

#include <string>

#include "gtest/gtest.h"
#include "worker/forward_batch_examples.h"

namespace radixkv::worker {
namespace {

constexpr int32_t kVocab = 100;
constexpr int64_t kCapacity = 64;
constexpr int32_t kPageSize = 16;

using testing::TwoSequenceDecodeBatch;

TEST(ValidateForwardBatch, AcceptsConsistentDecodeAndExtend) {
  EXPECT_TRUE(
      ValidateForwardBatch(TwoSequenceDecodeBatch(), kVocab, kCapacity, kPageSize)
          .ok());
  ForwardBatch e;
  e.input_ids = {1, 2, 3};
  e.positions = {4, 5, 0};
  e.qo_indptr = {0, 2, 3};
  e.kv_indptr = {0, 4, 4};
  e.kv_indices = {8, 9, 10, 11};
  e.out_cache_loc = {12, 13, 32};
  EXPECT_TRUE(ValidateForwardBatch(e, kVocab, kCapacity, kPageSize).ok());
}

TEST(ValidateForwardBatch, RejectsEachViolation) {
  struct Case {
    const char* what;
    void (*edit)(ForwardBatch&);
    const char* message;  // substring of the error
  };
  const Case cases[] = {
      {"no tokens",
       [](ForwardBatch& b) {
         b.input_ids.clear();
         b.positions.clear();
         b.out_cache_loc.clear();
       },
       "no tokens"},
      {"short qo_indptr", [](ForwardBatch& b) { b.qo_indptr = {0}; },
       "qo_indptr needs"},
      {"indptr sizes", [](ForwardBatch& b) { b.kv_indptr.pop_back(); },
       "kv_indptr has"},
      {"lengths", [](ForwardBatch& b) { b.positions.pop_back(); },
       "same length"},
      {"start", [](ForwardBatch& b) { b.qo_indptr[0] = 1; }, "start at 0"},
      {"kv_indptr[B] past kv_indices",
       [](ForwardBatch& b) { b.kv_indptr[2] = 9; }, "kv_indptr[B]"},
      {"qo_indptr[B]",
       [](ForwardBatch& b) {
         b.input_ids.push_back(1);
         b.positions.push_back(0);
         b.out_cache_loc.push_back(3);
       },
       "qo_indptr[B]"},
      {"empty sequence",
       [](ForwardBatch& b) {
         b.qo_indptr = {0, 0, 2};
         b.is_decode = false;
       },
       "no new tokens"},
      {"kv_indptr decreasing",
       [](ForwardBatch& b) {
         // Sequence 0's end (6) lies past kv_indices (5 entries): must be
         // rejected without reading kv_indices[5] for the decode rule.
         b.kv_indptr = {0, 6, 5};
       },
       "kv_indptr is decreasing"},
      {"decode last slot", [](ForwardBatch& b) { b.kv_indices[4] = 18; },
       "last kv_indices entry"},
      {"kv slot", [](ForwardBatch& b) { b.kv_indices[0] = kCapacity; },
       "kv_indices slot"},
      {"out_cache_loc",
       [](ForwardBatch& b) {
         b.is_decode = false;
         b.out_cache_loc[0] = -1;
       },
       "out_cache_loc slot"},
      {"token id", [](ForwardBatch& b) { b.input_ids[1] = kVocab; },
       "token id"},
      {"position", [](ForwardBatch& b) { b.positions[0] = -3; },
       "negative position"},
  };
  for (const Case& c : cases) {
    ForwardBatch b = TwoSequenceDecodeBatch();
    c.edit(b);
    const absl::Status s = ValidateForwardBatch(b, kVocab, kCapacity, kPageSize);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << s;
    EXPECT_NE(std::string(s.message()).find(c.message), std::string::npos)
        << c.what << ": " << s;
  }
}

}  // namespace
}  // namespace radixkv::worker

#include "worker/testing/golden_checkpoints.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace radixkv::worker::testing {

std::vector<float> PrefillAllLogits(ModelExecutor& executor,
                                    const std::vector<int32_t>& ids) {
  ForwardBatch b;
  b.input_ids = ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    b.positions.push_back(static_cast<int32_t>(i));
    b.out_cache_loc.push_back(static_cast<int64_t>(i));
  }
  b.qo_indptr = {0, static_cast<int32_t>(ids.size())};
  b.kv_indptr = {0, 0};
  b.return_all_logits = true;
  std::vector<float> logits;
  absl::Status s = executor.Forward(b, &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

}  // namespace radixkv::worker::testing

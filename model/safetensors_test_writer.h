// Test support: writes safetensors files (8-byte little-endian header length,
// JSON header, raw data) so tests can build checkpoints, including sharded
// and deliberately corrupt ones.
#ifndef RADIXKV_MODEL_SAFETENSORS_TEST_WRITER_H_
#define RADIXKV_MODEL_SAFETENSORS_TEST_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::testing {

struct RawTensor {
  std::string name;
  std::string dtype;  // safetensors dtype name, e.g. "F32", "BF16"
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

// Writes `tensors` to `path` in order. `edit_header`, if set, may change the
// JSON header before it is written (to make corrupt files). INTERNAL if the
// file cannot be written.
absl::Status WriteSafetensors(
    const std::string& path, const std::vector<RawTensor>& tensors,
    const std::function<void(nlohmann::json&)>& edit_header = {});

}  // namespace radixkv::model::testing

#endif  // RADIXKV_MODEL_SAFETENSORS_TEST_WRITER_H_

// Test support: locates the shared reference data (shared/golden: Hugging
// Face transformers checkpoints, logits and generations; shared/demo-model)
// and the embedded default model, and reads their files.
//
// The shared folder is taken from the environment variable RADIXKV_SHARED_DIR
// (.bazelrc forwards it into tests); otherwise it is `<repo>/../shared`, where
// <repo> is found by resolving the symlink of a runfile of this repository
// (models/radixkv-demo-llama/config.json) out of the Bazel sandbox. Tests that
// need the data FAIL (never skip) when it is absent.
#ifndef RADIXKV_MODEL_TESTING_SHARED_TEST_DATA_H_
#define RADIXKV_MODEL_TESTING_SHARED_TEST_DATA_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::testing {

// Absolute path of the shared folder (contains golden/ and demo-model/).
// NOT_FOUND with a message saying how to set RADIXKV_SHARED_DIR.
absl::StatusOr<std::string> FindSharedDir();

// Path of the embedded default model in this test's runfiles
// (models/radixkv-demo-llama). NOT_FOUND if the test lacks the data dep.
absl::StatusOr<std::string> EmbeddedModelDir();

// Whole file as bytes. NOT_FOUND if it cannot be opened.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);

// Raw little-endian fp32 file; INVALID_ARGUMENT unless it holds exactly
// `expected_count` floats.
absl::StatusOr<std::vector<float>> ReadF32File(const std::string& path,
                                               size_t expected_count);

// Parsed JSON file; INVALID_ARGUMENT if malformed.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace radixkv::model::testing

#endif  // RADIXKV_MODEL_TESTING_SHARED_TEST_DATA_H_

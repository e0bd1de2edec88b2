#include "model/testing/shared_test_data.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace radixkv::model::testing {
namespace {

constexpr char kModelRunfile[] = "models/radixkv-demo-llama/config.json";

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Runfiles root of this workspace, or "" outside Bazel.
std::string RunfilesWorkspaceDir() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  if (srcdir == nullptr) srcdir = std::getenv("RUNFILES_DIR");
  if (srcdir == nullptr) return "";
  const char* ws = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir, "/", ws != nullptr ? ws : "radixkv");
}

}  // namespace

absl::StatusOr<std::string> FindSharedDir() {
  const char* env = std::getenv("RADIXKV_SHARED_DIR");
  if (env != nullptr && env[0] != '\0') {
    if (!IsDir(absl::StrCat(env, "/golden"))) {
      return absl::NotFoundError(absl::StrCat(
          "RADIXKV_SHARED_DIR=", env,
          " has no golden/ folder; point it at the shared/ folder"));
    }
    return std::string(env);
  }
  // <repo>/../shared, <repo> found through a runfile's real path (or the
  // current directory when run outside Bazel).
  std::vector<std::string> candidates;
  const std::string runfiles = RunfilesWorkspaceDir();
  const std::string probe = runfiles.empty()
                                ? std::string(kModelRunfile)
                                : absl::StrCat(runfiles, "/", kModelRunfile);
  char resolved[PATH_MAX];
  if (::realpath(probe.c_str(), resolved) != nullptr) {
    std::string real(resolved);
    if (absl::EndsWith(real, kModelRunfile)) {
      const std::string repo =
          real.substr(0, real.size() - std::strlen(kModelRunfile));
      candidates.push_back(absl::StrCat(repo, "../shared"));
    }
  }
  candidates.push_back("../shared");
  for (const std::string& c : candidates) {
    if (IsDir(c + "/golden") && ::realpath(c.c_str(), resolved) != nullptr) {
      return std::string(resolved);
    }
  }
  return absl::NotFoundError(
      "shared reference data (shared/golden, shared/demo-model) not found: "
      "set RADIXKV_SHARED_DIR to the absolute path of the shared/ folder, "
      "e.g. `RADIXKV_SHARED_DIR=/work/shared bazel test //model/...`");
}

absl::StatusOr<std::string> EmbeddedModelDir() {
  const std::string runfiles = RunfilesWorkspaceDir();
  const std::string dir = runfiles.empty()
                              ? std::string("models/radixkv-demo-llama")
                              : runfiles + "/models/radixkv-demo-llama";
  std::ifstream probe(dir + "/config.json");
  if (!probe.good()) {
    return absl::NotFoundError(
        absl::StrCat("embedded model not found at ", dir,
                     " (add //models:radixkv_demo_llama to the test's data)"));
  }
  return dir;
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::vector<float>> ReadF32File(const std::string& path,
                                               size_t expected_count) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() != expected_count * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes->size(),
                                                   " bytes, expected ",
                                                   expected_count, " floats"));
  }
  std::vector<float> out(expected_count);
  std::memcpy(out.data(), bytes->data(), bytes->size());
  return out;
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  nlohmann::json j = nlohmann::json::parse(*bytes, nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed JSON"));
  }
  return j;
}

}  // namespace radixkv::model::testing

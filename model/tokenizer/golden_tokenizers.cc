#include "model/tokenizer/golden_tokenizers.h"

#include "absl/strings/str_cat.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::testing {

absl::StatusOr<std::string> GoldenTokenizersDir() {
  absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
  if (!shared.ok()) return shared.status();
  return absl::StrCat(*shared, "/golden/tokenizers");
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadGoldenTokenizer(
    const std::string& name) {
  absl::StatusOr<std::string> dir = GoldenTokenizersDir();
  if (!dir.ok()) return dir.status();
  return HfTokenizer::LoadFile(
      absl::StrCat(*dir, "/", name, "/tokenizer.json"));
}

absl::StatusOr<std::vector<GoldenCase>> LoadGoldenCases(
    const std::string& name) {
  absl::StatusOr<std::string> dir = GoldenTokenizersDir();
  if (!dir.ok()) return dir.status();
  absl::StatusOr<nlohmann::json> cases = model::testing::ReadJsonFile(
      absl::StrCat(*dir, "/", name, "/cases.json"));
  if (!cases.ok()) return cases.status();
  std::vector<GoldenCase> out;
  for (const nlohmann::json& c : *cases) {
    GoldenCase g;
    g.text = c.at("text").get<std::string>();
    g.ids = c.at("ids").get<std::vector<int32_t>>();
    g.ids_with_special = c.at("ids_with_special").get<std::vector<int32_t>>();
    g.decoded = c.at("decoded").get<std::string>();
    g.decoded_skip_special = c.at("decoded_skip_special").get<std::string>();
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace radixkv::model::testing

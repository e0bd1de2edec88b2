#include "router/model_catalog.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/model_config.h"
#include "model/tokenizer/load_tokenizer.h"
#include "proto/prompt_text_limit.h"
#include "spdlog/spdlog.h"

namespace radixkv::router {
namespace {

// A model name usable as a folder name: no path separators, no "..".
bool IsFolderName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status InFolder(const std::string& dir, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
}

}  // namespace

ModelCatalog::ModelCatalog(
    std::vector<std::pair<std::string, std::string>> models,
    std::string models_dir)
    : folders_(models.begin(), models.end()),
      models_dir_(std::move(models_dir)) {}

absl::StatusOr<std::shared_ptr<const ModelCatalog::Entry>> ModelCatalog::Load(
    const std::string& name, const std::string& dir) {
  auto entry = std::make_shared<Entry>();
  entry->name = name;
  absl::StatusOr<model::ModelConfig> config = model::LoadModelConfig(dir);
  if (!config.ok()) return config.status();
  entry->max_position_embeddings = config->max_position_embeddings;
  entry->max_prompt_text_bytes =
      v1::MaxPromptTextBytes(config->max_position_embeddings);
  absl::StatusOr<model::LoadedTokenizer> loaded = model::LoadTokenizer(dir);
  if (!loaded.ok()) return InFolder(dir, loaded.status());
  entry->tokenizer = std::move(loaded->tokenizer);
  entry->bos_token = loaded->files.bos_token;
  entry->eos_token = loaded->files.eos_token;
  if (const model::ChatTemplateSource* t =
          loaded->files.FindChatTemplate("default")) {
    absl::StatusOr<model::chat::ChatTemplate> parsed =
        model::chat::ChatTemplate::Parse(t->text);
    if (!parsed.ok()) {
      return InFolder(
          dir, absl::Status(
                   parsed.status().code(),
                   absl::StrCat("chat template: ", parsed.status().message())));
    }
    entry->chat_template = *std::move(parsed);
  }
  return std::shared_ptr<const Entry>(std::move(entry));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
ModelCatalog::ParseModelsFlag(absl::string_view flag) {
  std::vector<std::pair<std::string, std::string>> out;
  if (flag.empty()) return out;
  for (absl::string_view item : absl::StrSplit(flag, ',')) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty() ||
        !absl::StrContains(item, "=")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--models entry '", item, "' is not name=folder"));
    }
    for (const auto& [name, _] : out) {
      if (name == kv.first) {
        return absl::InvalidArgumentError(
            absl::StrCat("--models names ", name, " twice"));
      }
    }
    out.push_back(std::move(kv));
  }
  return out;
}

std::string ModelCatalog::FolderOf(const std::string& name) const {
  if (auto it = folders_.find(name); it != folders_.end()) return it->second;
  if (models_dir_.empty() || !IsFolderName(name)) return "";
  const std::string dir = absl::StrCat(models_dir_, "/", name);
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec) ? dir : "";
}

std::shared_ptr<const ModelCatalog::Entry> ModelCatalog::Find(
    const std::string& name) const {
  {
    absl::MutexLock lock(&mu_);
    if (auto it = entries_.find(name); it != entries_.end()) return it->second;
  }
  const std::string dir = FolderOf(name);
  if (dir.empty()) return nullptr;  // not remembered: names are unbounded
  absl::StatusOr<std::shared_ptr<const Entry>> entry = Load(name, dir);
  if (!entry.ok()) {
    spdlog::error("model {}: {}; its text prompts go to the workers as text",
                  name, entry.status().ToString());
  } else {
    spdlog::info("model {}: tokenizer and chat template from {}", name, dir);
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.emplace(name, entry.ok() ? *entry : nullptr);
  return it->second;
}

void ModelCatalog::Add(std::shared_ptr<const Entry> entry) {
  absl::MutexLock lock(&mu_);
  entries_[entry->name] = std::move(entry);
}

}  // namespace radixkv::router

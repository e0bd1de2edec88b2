// ModelCatalog: what the router knows of each model it serves: the model's
// tokenizer (the same files and code as its workers, so routing and serving
// see the same ids), chat template, special tokens and context length. A
// model is found in the explicit list (--models name=dir,...), else in
// <models_dir>/<name> (--models_dir), loaded on first use; a model without
// either is forwarded as text (its workers tokenize) and has no chat.
#ifndef RADIXKV_ROUTER_MODEL_CATALOG_H_
#define RADIXKV_ROUTER_MODEL_CATALOG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "model/chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"

namespace radixkv::router {

class ModelCatalog {
 public:
  // One model's assets. Immutable once loaded.
  struct Entry {
    std::string name;
    std::shared_ptr<const model::Tokenizer> tokenizer;
    // The default chat template, when the model ships one.
    std::optional<model::chat::ChatTemplate> chat_template;
    std::optional<std::string> bos_token, eos_token;
    // From config.json; 0 when unknown.
    int64_t max_position_embeddings = 0;
    // Longest text prompt tokenized (proto/prompt_text_limit.h), bytes.
    int64_t max_prompt_text_bytes = 0;
  };

  // `models`: name -> folder; `models_dir`: where other models are looked
  // up by name ("" = nowhere).
  ModelCatalog(std::vector<std::pair<std::string, std::string>> models,
               std::string models_dir);

  // Loads folder `dir` (config.json; tokenizer.json or tokenizer.model;
  // tokenizer_config.json, chat_template.jinja) as model `name`. The errors
  // of model::LoadModelConfig, model::LoadTokenizer and
  // ChatTemplate::Parse, prefixed with the folder.
  static absl::StatusOr<std::shared_ptr<const Entry>> Load(
      const std::string& name, const std::string& dir);

  // Parses --models: "name=dir[,name=dir...]". INVALID_ARGUMENT for an
  // entry without "=", an empty name or folder, a repeated name.
  static absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
  ParseModelsFlag(absl::string_view flag);

  // The entry of `name`, loading it on first use; nullptr when the catalog
  // has no folder for it (a failed load is logged once and remembered).
  // Thread-safe.
  std::shared_ptr<const Entry> Find(const std::string& name) const;

  // Adds an entry (tests, and folders loaded up front).
  void Add(std::shared_ptr<const Entry> entry);

 private:
  // The folder of `name`, "" when there is none.
  std::string FolderOf(const std::string& name) const;

  const absl::flat_hash_map<std::string, std::string> folders_;
  const std::string models_dir_;
  mutable absl::Mutex mu_;
  // Loaded entries; a null entry remembers a failed load.
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const Entry>>
      entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_MODEL_CATALOG_H_

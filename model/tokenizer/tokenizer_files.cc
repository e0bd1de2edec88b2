#include "model/tokenizer/tokenizer_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/json_fields.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

// Largest config or template file read (real ones are a few hundred KB).
constexpr uintmax_t kMaxFileBytes = uintmax_t{64} << 20;

// The file's content; nullopt if it does not exist.
absl::StatusOr<std::optional<std::string>> ReadOptionalFile(
    const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return std::optional<std::string>();
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": not a readable file below ",
                     kMaxFileBytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  }
  return std::optional<std::string>(content.str());
}

// The parsed JSON object of an optional file (null Json if absent).
absl::StatusOr<Json> ReadOptionalJson(const std::filesystem::path& path) {
  absl::StatusOr<std::optional<std::string>> text = ReadOptionalFile(path);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return Json();
  Json j = Json::parse(**text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": not a JSON object"));
  }
  return j;
}

// A special token given as a string or an AddedToken object.
absl::StatusOr<std::optional<std::string>> SpecialToken(
    const Json& config, const char* key, absl::string_view file) {
  const Json* v = json_fields::Find(config, key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    absl::StatusOr<std::string> content =
        json_fields::String(*v, "content", json_fields::Child(file, key));
    if (!content.ok()) return content.status();
    return std::optional<std::string>(*content);
  }
  return json_fields::Invalid(json_fields::Child(file, key),
                              "expected a string or {\"content\": ...}");
}

absl::StatusOr<std::optional<bool>> OptionalBool(const Json& config,
                                                 const char* key,
                                                 absl::string_view file) {
  const Json* v = json_fields::Find(config, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) {
    return json_fields::Invalid(json_fields::Child(file, key),
                                "expected a boolean");
  }
  return std::optional<bool>(v->get<bool>());
}

// An id field: an integer or a list of integers (empty if absent).
absl::StatusOr<std::vector<int32_t>> IdList(const Json& config, const char* key,
                                            absl::string_view file) {
  std::vector<int32_t> ids;
  const Json* v = json_fields::Find(config, key);
  if (v == nullptr) return ids;
  const Json list = v->is_array() ? *v : Json::array({*v});
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > INT32_MAX) {
      return json_fields::Invalid(
          json_fields::Child(file, key),
          "expected a non-negative integer or a list of them");
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// `key` from generation_config.json, else config.json (or its text_config).
absl::StatusOr<std::vector<int32_t>> ConfigIds(const Json& generation,
                                               const Json& config,
                                               const char* key) {
  absl::StatusOr<std::vector<int32_t>> ids =
      IdList(generation, key, "generation_config.json");
  if (!ids.ok() || !ids->empty()) return ids;
  ids = IdList(config, key, "config.json");
  if (!ids.ok() || !ids->empty()) return ids;
  if (const Json* text = json_fields::Find(config, "text_config")) {
    return IdList(*text, key, "config.json.text_config");
  }
  return ids;
}

absl::Status ConfigTemplates(const Json& config,
                             std::map<std::string, std::string>* out) {
  const Json* v = json_fields::Find(config, "chat_template");
  if (v == nullptr) return absl::OkStatus();
  const std::string path = "tokenizer_config.json.chat_template";
  if (v->is_string()) {
    (*out)["default"] = v->get<std::string>();
    return absl::OkStatus();
  }
  if (!v->is_array()) {
    return json_fields::Invalid(path, "expected a string or a list");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string where = json_fields::Element(path, i);
    absl::StatusOr<std::string> name =
        json_fields::String((*v)[i], "name", where);
    if (!name.ok()) return name.status();
    absl::StatusOr<std::string> text =
        json_fields::String((*v)[i], "template", where);
    if (!text.ok()) return text.status();
    (*out)[*name] = *text;
  }
  return absl::OkStatus();
}

absl::Status FileTemplates(const std::filesystem::path& dir,
                           std::map<std::string, std::string>* out) {
  absl::StatusOr<std::optional<std::string>> main =
      ReadOptionalFile(dir / "chat_template.jinja");
  if (!main.ok()) return main.status();
  if (main->has_value()) {
    out->clear();  // the file replaces the config's templates
    (*out)["default"] = **main;
  }
  std::error_code ec;
  const std::filesystem::path extra = dir / "additional_chat_templates";
  if (!std::filesystem::is_directory(extra, ec)) return absl::OkStatus();
  for (std::filesystem::directory_iterator it(extra, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::path& path = it->path();
    if (path.extension() != ".jinja") continue;
    absl::StatusOr<std::optional<std::string>> text = ReadOptionalFile(path);
    if (!text.ok()) return text.status();
    if (text->has_value()) (*out)[path.stem().string()] = **text;
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", extra.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status ReadSpecialTokens(const Json& tc, TokenizerFiles* files) {
  const absl::string_view file = "tokenizer_config.json";
  for (auto [key, field] : {std::pair{"bos_token", &files->bos_token},
                            std::pair{"eos_token", &files->eos_token},
                            std::pair{"pad_token", &files->pad_token},
                            std::pair{"unk_token", &files->unk_token}}) {
    absl::StatusOr<std::optional<std::string>> v = SpecialToken(tc, key, file);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  for (auto [key, field] :
       {std::pair{"add_bos_token", &files->add_bos_token},
        std::pair{"add_eos_token", &files->add_eos_token}}) {
    absl::StatusOr<std::optional<bool>> v = OptionalBool(tc, key, file);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  return absl::OkStatus();
}

}  // namespace

const ChatTemplateSource* TokenizerFiles::FindChatTemplate(
    absl::string_view name) const {
  for (const ChatTemplateSource& t : chat_templates) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<TokenizerFiles> LoadTokenizerFiles(const std::string& dir,
                                                  const Tokenizer* tokenizer) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a folder"));
  }
  const std::filesystem::path root(dir);
  absl::StatusOr<Json> tc = ReadOptionalJson(root / "tokenizer_config.json");
  if (!tc.ok()) return tc.status();
  absl::StatusOr<Json> generation =
      ReadOptionalJson(root / "generation_config.json");
  if (!generation.ok()) return generation.status();
  absl::StatusOr<Json> config = ReadOptionalJson(root / "config.json");
  if (!config.ok()) return config.status();

  TokenizerFiles files;
  absl::Status s = ReadSpecialTokens(*tc, &files);
  if (!s.ok()) return s;
  std::map<std::string, std::string> templates;
  s = ConfigTemplates(*tc, &templates);
  if (s.ok()) s = FileTemplates(root, &templates);
  if (!s.ok()) return s;
  if (auto it = templates.find("default"); it != templates.end()) {
    files.chat_templates.push_back({it->first, it->second});
    templates.erase(it);
  }
  for (auto& [name, text] : templates) {
    files.chat_templates.push_back({name, std::move(text)});
  }

  auto token_id = [tokenizer](const std::optional<std::string>& token) {
    return tokenizer != nullptr && token.has_value()
               ? tokenizer->TokenToId(*token)
               : std::nullopt;
  };
  absl::StatusOr<std::vector<int32_t>> eos =
      ConfigIds(*generation, *config, "eos_token_id");
  if (!eos.ok()) return eos.status();
  std::vector<int32_t>& stop = files.eos_token_ids;
  auto add_unique = [&stop](int32_t id) {
    if (std::find(stop.begin(), stop.end(), id) == stop.end()) {
      stop.push_back(id);
    }
  };
  for (int32_t id : *eos) add_unique(id);
  if (std::optional<int32_t> id = token_id(files.eos_token)) add_unique(*id);
  absl::StatusOr<std::vector<int32_t>> bos =
      ConfigIds(*generation, *config, "bos_token_id");
  if (!bos.ok()) return bos.status();
  files.bos_token_id = token_id(files.bos_token);
  if (!files.bos_token_id.has_value() && !bos->empty()) {
    files.bos_token_id = bos->front();
  }
  return files;
}

}  // namespace radixkv::model

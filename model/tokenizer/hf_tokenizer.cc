#include "model/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {

using json_fields::Json;

namespace {

// Largest tokenizer.json LoadFile reads (real ones are below 40 MB).
constexpr std::streamoff kMaxFileBytes = std::streamoff{1} << 30;

absl::StatusOr<std::unique_ptr<BpeModel>> ModelFromJson(const Json& root) {
  const Json* model = json_fields::Find(root, "model");
  if (model == nullptr || !model->is_object()) {
    return json_fields::Invalid("model", "missing");
  }
  absl::StatusOr<std::optional<std::string>> type =
      json_fields::OptionalString(*model, "type", "model");
  if (!type.ok()) return type.status();
  // Old files leave out "type"; tokenizers then recognises BPE by "merges".
  const bool bpe = type->has_value()
                       ? **type == "BPE"
                       : json_fields::Find(*model, "merges") != nullptr;
  if (!bpe) {
    return json_fields::Unsupported("model", type->value_or("(untyped)"),
                                    "model.type");
  }
  return BpeModel::FromJson(*model, "model");
}

// Builds the component at top-level `key` into *out with `from_json`; a
// null or absent component leaves *out null.
template <typename T, typename FromJson>
absl::Status OptionalComponent(const Json& root, const char* key,
                               FromJson from_json, std::unique_ptr<T>* out) {
  const Json* json = json_fields::Find(root, key);
  if (json == nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<T>> component = from_json(*json, key);
  if (!component.ok()) return component.status();
  *out = std::move(*component);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(
    absl::string_view json) {
  Json root = Json::parse(json.begin(), json.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  }
  std::unique_ptr<HfTokenizer> tokenizer(new HfTokenizer());
  try {
    absl::Status s = tokenizer->Load(root);
    if (!s.ok()) return s;
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json: unexpected JSON value: ", e.what()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::LoadFile(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": size ", size, " is not that of a tokenizer.json"));
  }
  std::string content(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(content.data(), size)) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = FromJson(content);
  if (!t.ok()) {
    return absl::Status(t.status().code(),
                        absl::StrCat(path, ": ", t.status().message()));
  }
  return t;
}

absl::Status HfTokenizer::Load(const Json& root) {
  if (const Json* v = json_fields::Find(root, "version");
      v != nullptr && (!v->is_string() || v->get<std::string>() != "1.0")) {
    return json_fields::Unsupported("tokenizer.json version", v->dump(),
                                    "version");
  }
  for (const char* key : {"truncation", "padding"}) {
    if (const Json* v = json_fields::Find(root, key)) {
      return json_fields::Unsupported(key, v->dump(), key);
    }
  }
  absl::StatusOr<std::unique_ptr<BpeModel>> model = ModelFromJson(root);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  absl::Status s =
      OptionalComponent(root, "normalizer", Normalizer::FromJson, &normalizer_);
  if (s.ok()) {
    s = OptionalComponent(root, "pre_tokenizer", PreTokenizer::FromJson,
                          &pre_tokenizer_);
  }
  if (!s.ok()) return s;
  absl::StatusOr<AddedVocabulary> added =
      AddedVocabulary::Build(json_fields::Find(root, "added_tokens"),
                             "added_tokens", *model_, normalizer_.get());
  if (!added.ok()) return added.status();
  added_ = std::move(*added);
  vocab_size_ = std::max(model_->id_bound(), added_.id_bound());
  s = OptionalComponent(
      root, "post_processor",
      [this](const Json& j, absl::string_view path) {
        return PostProcessor::FromJson(j, path, vocab_size_);
      },
      &post_processor_);
  if (!s.ok()) return s;
  return OptionalComponent(root, "decoder", Decoder::FromJson, &decoder_);
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(
    absl::string_view text, bool add_special_tokens) const {
  if (text.size() > kMaxTextBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text of ", text.size(), " bytes exceeds ", kMaxTextBytes));
  }
  if (!utf8::IsValid(text)) {
    return absl::InvalidArgumentError("text is not valid UTF-8");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 4);
  auto to_model = [&](absl::string_view word, bool) {
    return model_->Tokenize(word, &ids);
  };
  absl::Status s = added_.ExtractAndNormalize(
      text, normalizer_.get(),
      [&](absl::string_view piece, bool at_origin, int32_t id) {
        if (id >= 0) {
          ids.push_back(id);
          return absl::OkStatus();
        }
        if (pre_tokenizer_ == nullptr) return to_model(piece, at_origin);
        return pre_tokenizer_->PreTokenize(piece, at_origin, to_model);
      });
  if (!s.ok()) return s;
  if (add_special_tokens && post_processor_ != nullptr) {
    post_processor_->Process(&ids);
  }
  return ids;
}

const std::string* HfTokenizer::TokenString(int32_t id) const {
  if (const AddedToken* added = added_.Find(id)) return &added->content;
  return model_->IdToToken(id);
}

absl::StatusOr<std::string> HfTokenizer::Decode(
    absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token =
        id >= 0 && id < vocab_size_ ? TokenString(id) : nullptr;
    if (token == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside [0, ", vocab_size_,
                       ") or has no token"));
    }
    if (skip_special_tokens && IsSpecial(id)) continue;
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) return absl::StrJoin(tokens, " ");
  absl::Status s = decoder_->DecodeChain(&tokens);
  if (!s.ok()) return s;
  return absl::StrJoin(tokens, "");
}

std::optional<int32_t> HfTokenizer::TokenToId(absl::string_view token) const {
  if (std::optional<int32_t> id = added_.TokenToId(token)) return id;
  return model_->TokenToId(token);
}

std::optional<std::string> HfTokenizer::IdToToken(int32_t id) const {
  const std::string* token = TokenString(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_.Find(id);
  return added != nullptr && added->special;
}

}  // namespace radixkv::model

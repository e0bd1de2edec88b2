#include "model/tokenizer/post_processor.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

// Every supported single-sequence processor adds fixed ids before and after
// the sequence, so a Sequence of them is one again.
class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

  void Process(std::vector<int32_t>* ids) const override {
    ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
    ids->insert(ids->end(), suffix_.begin(), suffix_.end());
  }

  // Wraps `inner` (applied first) in this processor.
  void Wrap(const AffixProcessor& inner) {
    std::vector<int32_t> prefix = prefix_;
    prefix.insert(prefix.end(), inner.prefix_.begin(), inner.prefix_.end());
    std::vector<int32_t> suffix = inner.suffix_;
    suffix.insert(suffix.end(), suffix_.begin(), suffix_.end());
    prefix_ = std::move(prefix);
    suffix_ = std::move(suffix);
  }

 private:
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

// One element of a template: a special token name, or the sequence ("A").
struct TemplatePiece {
  bool is_sequence = false;
  std::string name;  // special token name, or "A"/"B"
};

// tokenizers' Piece::try_from(String): "$A", "$B", "$" or "$<type_id>"
// (sequence A), anything else a special token; a ":<type_id>" suffix is
// dropped (type ids do not matter for ids).
absl::StatusOr<TemplatePiece> ParseTemplateString(absl::string_view s,
                                                  absl::string_view path) {
  const size_t colon = s.find(':');
  if (colon != absl::string_view::npos) s = s.substr(0, colon);
  if (s.empty() || s[0] != '$') return TemplatePiece{false, std::string(s)};
  const absl::string_view rest = s.substr(1);
  uint32_t type_id;
  if (rest.empty() || rest == "A" || rest == "a" ||
      absl::SimpleAtoi(rest, &type_id)) {
    return TemplatePiece{true, "A"};
  }
  if (rest == "B" || rest == "b") return TemplatePiece{true, "B"};
  return json_fields::Invalid(path,
                              absl::StrCat("bad template piece '", s, "'"));
}

absl::StatusOr<std::vector<TemplatePiece>> ParseSingle(const Json& single,
                                                       absl::string_view path) {
  std::vector<TemplatePiece> pieces;
  if (single.is_string()) {
    for (absl::string_view s :
         absl::StrSplit(single.get<std::string>(), ' ', absl::SkipEmpty())) {
      absl::StatusOr<TemplatePiece> p = ParseTemplateString(s, path);
      if (!p.ok()) return p.status();
      pieces.push_back(std::move(*p));
    }
    return pieces;
  }
  if (!single.is_array()) {
    return json_fields::Invalid(path, "expected a template list or string");
  }
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string where = json_fields::Element(path, i);
    const Json* seq = json_fields::Find(single[i], "Sequence");
    const Json* special = json_fields::Find(single[i], "SpecialToken");
    const Json* body = seq != nullptr ? seq : special;
    if (body == nullptr) {
      return json_fields::Invalid(where, "expected Sequence or SpecialToken");
    }
    absl::StatusOr<std::string> id = json_fields::String(*body, "id", where);
    if (!id.ok()) return id.status();
    pieces.push_back({seq != nullptr, *id});
  }
  return pieces;
}

absl::StatusOr<std::unique_ptr<AffixProcessor>> TemplateFromJson(
    const Json& json, absl::string_view path, int32_t id_bound) {
  const Json* single = json_fields::Find(json, "single");
  if (single == nullptr) return json_fields::Invalid(path, "missing single");
  absl::StatusOr<std::vector<TemplatePiece>> pieces =
      ParseSingle(*single, json_fields::Child(path, "single"));
  if (!pieces.ok()) return pieces.status();
  const Json* specials = json_fields::Find(json, "special_tokens");
  std::vector<int32_t> prefix, suffix;
  int sequences = 0;
  for (const TemplatePiece& p : *pieces) {
    if (p.is_sequence) {
      if (p.name != "A") {
        return json_fields::Invalid(path, "single template uses sequence B");
      }
      ++sequences;
      continue;
    }
    const Json* entry =
        specials == nullptr ? nullptr : json_fields::Find(*specials, p.name);
    const Json* ids =
        entry == nullptr ? nullptr : json_fields::Find(*entry, "ids");
    if (ids == nullptr || !ids->is_array()) {
      return json_fields::Invalid(
          path, absl::StrCat("special token '", p.name,
                             "' has no ids in special_tokens"));
    }
    for (const Json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= id_bound) {
        return json_fields::Invalid(
            path, absl::StrCat("special token '", p.name, "' id ", id.dump(),
                               " is outside the vocabulary"));
      }
      (sequences == 0 ? prefix : suffix).push_back(id.get<int32_t>());
    }
  }
  if (sequences != 1) {
    return json_fields::Invalid(path, "single template needs exactly one $A");
  }
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

// BertProcessing / RobertaProcessing: "cls" and "sep" as [token, id].
absl::StatusOr<std::unique_ptr<AffixProcessor>> ClsSepFromJson(
    const Json& json, absl::string_view path, int32_t id_bound) {
  std::vector<int32_t> ids;
  for (const char* key : {"cls", "sep"}) {
    const Json* pair = json_fields::Find(json, key);
    if (pair == nullptr || !pair->is_array() || pair->size() != 2 ||
        !(*pair)[1].is_number_integer() || (*pair)[1].get<int64_t>() < 0 ||
        (*pair)[1].get<int64_t>() >= id_bound) {
      return json_fields::Invalid(json_fields::Child(path, key),
                                  "expected [token, id] inside the vocabulary");
    }
    ids.push_back((*pair)[1].get<int32_t>());
  }
  return std::make_unique<AffixProcessor>(std::vector<int32_t>{ids[0]},
                                          std::vector<int32_t>{ids[1]});
}

absl::StatusOr<std::unique_ptr<AffixProcessor>> AffixFromJson(
    const Json& json, absl::string_view path, int32_t id_bound) {
  absl::StatusOr<std::string> type = json_fields::Type(json, path);
  if (!type.ok()) return type.status();
  if (*type == "TemplateProcessing") {
    return TemplateFromJson(json, path, id_bound);
  }
  if (*type == "BertProcessing" || *type == "RobertaProcessing") {
    return ClsSepFromJson(json, path, id_bound);
  }
  if (*type == "ByteLevel") {
    return std::make_unique<AffixProcessor>(std::vector<int32_t>{},
                                            std::vector<int32_t>{});
  }
  if (*type == "Sequence") {
    absl::StatusOr<std::vector<std::unique_ptr<AffixProcessor>>> steps =
        json_fields::ComponentList<AffixProcessor>(
            json, "processors", path,
            [id_bound](const Json& j, absl::string_view p) {
              return AffixFromJson(j, p, id_bound);
            });
    if (!steps.ok()) return steps.status();
    auto combined = std::make_unique<AffixProcessor>(std::vector<int32_t>{},
                                                     std::vector<int32_t>{});
    for (std::unique_ptr<AffixProcessor>& step : *steps) {
      step->Wrap(*combined);
      combined = std::move(step);
    }
    return combined;
  }
  return json_fields::Unsupported("post_processor", *type, path);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessor::FromJson(
    const Json& json, absl::string_view path, int32_t id_bound) {
  absl::StatusOr<std::unique_ptr<AffixProcessor>> p =
      AffixFromJson(json, path, id_bound);
  if (!p.ok()) return p.status();
  return std::unique_ptr<PostProcessor>(std::move(*p));
}

}  // namespace radixkv::model

#include "model/tokenizer/normalizer.h"

#include <utility>
#include <vector>

#include "model/tokenizer/pattern.h"
#include "model/tokenizer/unicode.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  absl::Status Normalize(std::string* text, bool*) const override {
    return unicode::Normalize(form_, text);
  }

 private:
  unicode::NormalForm form_;
};

class Lowercase : public Normalizer {
 public:
  absl::Status Normalize(std::string* text, bool*) const override {
    std::string out;
    out.reserve(text->size());
    unicode::AppendLowercase(*text, &out);
    *text = std::move(out);
    return absl::OkStatus();
  }
};

// Removes leading and/or trailing whitespace (Rust char::is_whitespace).
class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  absl::Status Normalize(std::string* text, bool* head_moved) const override {
    size_t begin = 0;
    size_t end = text->size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!unicode::IsWhitespace(utf8::DecodeValid(*text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t last = end - 1;
        while (last > begin &&
               (static_cast<unsigned char>((*text)[last]) & 0xC0) == 0x80) {
          --last;
        }
        size_t pos = last;
        if (!unicode::IsWhitespace(utf8::DecodeValid(*text, &pos))) break;
        end = last;
      }
    }
    if (begin > 0 && begin < end) *head_moved = true;
    *text = text->substr(begin, end - begin);
    return absl::OkStatus();
  }

 private:
  bool left_;
  bool right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prepend) : prepend_(std::move(prepend)) {}
  absl::Status Normalize(std::string* text, bool*) const override {
    if (!text->empty()) text->insert(0, prepend_);
    return absl::OkStatus();
  }

 private:
  std::string prepend_;
};

class Replace : public Normalizer {
 public:
  Replace(ParsedPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  absl::Status Normalize(std::string* text, bool* head_moved) const override {
    std::string out;
    out.reserve(text->size());
    bool head_removed = false;
    absl::Status s =
        AppendReplaced(*pattern_.regex, *text, content_, &out, &head_removed);
    if (!s.ok()) return s;
    if (head_removed && !out.empty()) *head_moved = true;
    *text = std::move(out);
    return absl::OkStatus();
  }

 private:
  ParsedPattern pattern_;
  std::string content_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  absl::Status Normalize(std::string* text, bool* head_moved) const override {
    for (const auto& step : steps_) {
      absl::Status s = step->Normalize(text, head_moved);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::unique_ptr<Normalizer>> SequenceFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<std::vector<std::unique_ptr<Normalizer>>> steps =
      json_fields::ComponentList<Normalizer>(json, "normalizers", path,
                                             Normalizer::FromJson);
  if (!steps.ok()) return steps.status();
  return std::make_unique<Sequence>(std::move(*steps));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<std::string> type = json_fields::Type(json, path);
  if (!type.ok()) return type.status();
  if (*type == "NFC" || *type == "NFD" || *type == "NFKC" || *type == "NFKD") {
    const unicode::NormalForm form =
        *type == "NFC"    ? unicode::NormalForm::kNfc
        : *type == "NFD"  ? unicode::NormalForm::kNfd
        : *type == "NFKC" ? unicode::NormalForm::kNfkc
                          : unicode::NormalForm::kNfkd;
    return std::make_unique<UnicodeNormalizer>(form);
  }
  if (*type == "Lowercase") return std::make_unique<Lowercase>();
  if (*type == "Strip") {
    if (json_fields::Find(json, "strip_left") == nullptr ||
        json_fields::Find(json, "strip_right") == nullptr) {
      return json_fields::Invalid(path,
                                  "Strip needs strip_left and strip_right");
    }
    absl::StatusOr<bool> left =
        json_fields::Bool(json, "strip_left", path, false);
    if (!left.ok()) return left.status();
    absl::StatusOr<bool> right =
        json_fields::Bool(json, "strip_right", path, false);
    if (!right.ok()) return right.status();
    return std::make_unique<Strip>(*left, *right);
  }
  if (*type == "Prepend") {
    absl::StatusOr<std::string> prepend =
        json_fields::String(json, "prepend", path);
    if (!prepend.ok()) return prepend.status();
    return std::make_unique<Prepend>(std::move(*prepend));
  }
  if (*type == "Replace") {
    ParsedPattern pattern;
    std::string content;
    absl::Status s = ParseReplace(json, path, &pattern, &content);
    if (!s.ok()) return s;
    return std::make_unique<Replace>(std::move(pattern), std::move(content));
  }
  if (*type == "Sequence") return SequenceFromJson(json, path);
  return json_fields::Unsupported("normalizer", *type, path);
}

}  // namespace radixkv::model

#include "model/tokenizer/pre_tokenizer.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/pattern.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/split_behavior.h"
#include "model/tokenizer/unicode.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

// GPT-2's pre-tokenization regex (Oniguruma syntax), tokenizers'
// pre_tokenizers/byte_level.rs.
constexpr absl::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

// tokenizers' Whitespace pre-tokenizer pattern (Oniguruma syntax).
constexpr absl::string_view kWhitespacePattern = "\\w+|[^\\w\\s]+";

// Passes the slices [begin, end) of `text` to `sink`; a slice keeps the
// origin only if it starts the piece.
auto SliceSink(absl::string_view text, bool at_origin, TextSink sink) {
  return [text, at_origin, sink](uint32_t begin, uint32_t end) {
    return sink(text.substr(begin, end - begin), at_origin && begin == 0);
  };
}

class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  absl::Status PreTokenize(absl::string_view text, bool at_origin,
                           TextSink sink) const override {
    auto emit = SliceSink(text, at_origin, sink);
    SegmentSplitter splitter(behavior_, invert_, emit);
    return SplitOnRegex(*regex_, text, &splitter);
  }

 private:
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// Splits on single characters a predicate selects (Digits, Punctuation,
// WhitespaceSplit).
class CharSplit : public PreTokenizer {
 public:
  CharSplit(bool (*pred)(char32_t), SplitBehavior behavior)
      : pred_(pred), behavior_(behavior) {}

  absl::Status PreTokenize(absl::string_view text, bool at_origin,
                           TextSink sink) const override {
    auto emit = SliceSink(text, at_origin, sink);
    SegmentSplitter splitter(behavior_, false, emit);
    return SplitOnChars(text, pred_, &splitter);
  }

 private:
  bool (*pred_)(char32_t);
  SplitBehavior behavior_;
};

// ByteLevel: optional leading space, optional GPT-2 split, then every byte
// written as its byte-level character.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  absl::Status PreTokenize(absl::string_view text, bool at_origin,
                           TextSink sink) const override {
    std::optional<ScratchString> prefixed;
    if (add_prefix_space_ && text[0] != ' ') {
      prefixed.emplace();
      prefixed->get().push_back(' ');
      prefixed->get().append(text.data(), text.size());
      text = prefixed->get();
    }
    ScratchString encoded;
    auto emit = [&](uint32_t begin, uint32_t end) {
      encoded.get().clear();
      byte_level::AppendEncoded(text.substr(begin, end - begin),
                                &encoded.get());
      return sink(encoded.get(), at_origin && begin == 0);
    };
    if (regex_ == nullptr) {
      return emit(0, static_cast<uint32_t>(text.size()));
    }
    SegmentSplitter splitter(SplitBehavior::kIsolated, false, emit);
    return SplitOnRegex(*regex_, text, &splitter);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null: use_regex false
};

// Metaspace: spaces become the replacement character, which is prepended
// per the scheme; then optionally split before each replacement character.
class Metaspace : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    utf8::Append(replacement, &replacement_utf8_);
  }

  absl::Status PreTokenize(absl::string_view text, bool at_origin,
                           TextSink sink) const override {
    ScratchString rewritten;
    Rewrite(text, at_origin, &rewritten.get());
    const absl::string_view r = rewritten.get();
    if (!split_) return sink(r, at_origin);
    auto emit = SliceSink(r, at_origin, sink);
    SegmentSplitter splitter(SplitBehavior::kMergedWithNext, false, emit);
    const char32_t replacement = replacement_;
    return SplitOnChars(
        r, [replacement](char32_t c) { return c == replacement; }, &splitter);
  }

 private:
  void Rewrite(absl::string_view text, bool at_origin, std::string* out) const {
    for (char c : text) {
      if (c == ' ') {
        out->append(replacement_utf8_);
      } else {
        out->push_back(c);
      }
    }
    const bool starts_with_replacement =
        absl::string_view(*out).substr(0, replacement_utf8_.size()) ==
        replacement_utf8_;
    const bool prepend = !starts_with_replacement &&
                         (scheme_ == PrependScheme::kAlways ||
                          (scheme_ == PrependScheme::kFirst && at_origin));
    if (prepend) out->insert(0, replacement_utf8_);
  }

  char32_t replacement_;
  std::string replacement_utf8_;
  PrependScheme scheme_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}

  absl::Status PreTokenize(absl::string_view text, bool at_origin,
                           TextSink sink) const override {
    return Run(0, text, at_origin, sink);
  }

 private:
  // Step `i` on one piece, its output fed to step i + 1.
  absl::Status Run(size_t i, absl::string_view text, bool at_origin,
                   TextSink sink) const {
    if (i == steps_.size()) return sink(text, at_origin);
    return steps_[i]->PreTokenize(text, at_origin,
                                  [this, i, sink](absl::string_view t, bool o) {
                                    return Run(i + 1, t, o, sink);
                                  });
  }

  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<std::unique_ptr<PreTokenizer>> SplitFromJson(
    const Json& json, absl::string_view path) {
  const Json* pattern = json_fields::Find(json, "pattern");
  if (pattern == nullptr) return json_fields::Invalid(path, "missing pattern");
  absl::StatusOr<ParsedPattern> parsed =
      ParsePattern(*pattern, json_fields::Child(path, "pattern"));
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<SplitBehavior> behavior =
      ParseSplitBehavior(json, "behavior", path, std::nullopt);
  if (!behavior.ok()) return behavior.status();
  absl::StatusOr<bool> invert = json_fields::Bool(json, "invert", path, false);
  if (!invert.ok()) return invert.status();
  return std::make_unique<RegexSplit>(std::move(parsed->regex), *behavior,
                                      *invert);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ByteLevelFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<bool> prefix =
      json_fields::Bool(json, "add_prefix_space", path, true);
  if (!prefix.ok()) return prefix.status();
  absl::StatusOr<bool> use_regex =
      json_fields::Bool(json, "use_regex", path, true);
  if (!use_regex.ok()) return use_regex.status();
  std::unique_ptr<Regex> regex;
  if (*use_regex) {
    absl::StatusOr<std::unique_ptr<Regex>> r =
        Regex::FromOniguruma(kGpt2Pattern);
    if (!r.ok()) return r.status();
    regex = std::move(*r);
  }
  return std::make_unique<ByteLevelPreTokenizer>(*prefix, std::move(regex));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> MetaspaceFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<char32_t> replacement =
      json_fields::Char(json, "replacement", path);
  if (!replacement.ok()) return replacement.status();
  absl::StatusOr<PrependScheme> scheme = ParsePrependScheme(json, path);
  if (!scheme.ok()) return scheme.status();
  absl::StatusOr<bool> split = json_fields::Bool(json, "split", path, true);
  if (!split.ok()) return split.status();
  return std::make_unique<Metaspace>(*replacement, *scheme, *split);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> SequenceFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<std::vector<std::unique_ptr<PreTokenizer>>> steps =
      json_fields::ComponentList<PreTokenizer>(json, "pretokenizers", path,
                                               PreTokenizer::FromJson);
  if (!steps.ok()) return steps.status();
  return std::make_unique<Sequence>(std::move(*steps));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> CharSplitFromJson(
    absl::string_view type, const Json& json, absl::string_view path) {
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplit>(unicode::IsWhitespace,
                                       SplitBehavior::kRemoved);
  }
  if (type == "Digits") {
    absl::StatusOr<bool> individual =
        json_fields::Bool(json, "individual_digits", path, false);
    if (!individual.ok()) return individual.status();
    return std::make_unique<CharSplit>(
        unicode::IsNumeric,
        *individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  absl::StatusOr<SplitBehavior> behavior =
      ParseSplitBehavior(json, "behavior", path, SplitBehavior::kIsolated);
  if (!behavior.ok()) return behavior.status();
  return std::make_unique<CharSplit>(unicode::IsPunctuation, *behavior);
}

}  // namespace

absl::StatusOr<PrependScheme> ParsePrependScheme(const Json& json,
                                                 absl::string_view path) {
  absl::StatusOr<std::optional<std::string>> name =
      json_fields::OptionalString(json, "prepend_scheme", path);
  if (!name.ok()) return name.status();
  PrependScheme scheme = PrependScheme::kAlways;
  if (name->has_value()) {
    if (**name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (**name == "never") {
      scheme = PrependScheme::kNever;
    } else if (**name != "always") {
      return json_fields::Unsupported(
          "Metaspace prepend_scheme", **name,
          json_fields::Child(path, "prepend_scheme"));
    }
  }
  // The legacy add_prefix_space: false must agree with prepend_scheme
  // "never" (tokenizers refuses the file otherwise).
  const Json* legacy = json_fields::Find(json, "add_prefix_space");
  if (legacy != nullptr && legacy->is_boolean() && !legacy->get<bool>() &&
      scheme != PrependScheme::kNever) {
    return json_fields::Invalid(
        path, "add_prefix_space does not match declared prepend_scheme");
  }
  return scheme;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<std::string> type = json_fields::Type(json, path);
  if (!type.ok()) return type.status();
  if (*type == "Split") return SplitFromJson(json, path);
  if (*type == "ByteLevel") return ByteLevelFromJson(json, path);
  if (*type == "Metaspace") return MetaspaceFromJson(json, path);
  if (*type == "Sequence") return SequenceFromJson(json, path);
  if (*type == "WhitespaceSplit" || *type == "Digits" ||
      *type == "Punctuation") {
    return CharSplitFromJson(*type, json, path);
  }
  if (*type == "Whitespace") {
    absl::StatusOr<std::unique_ptr<Regex>> r =
        Regex::FromOniguruma(kWhitespacePattern);
    if (!r.ok()) return r.status();
    return std::make_unique<RegexSplit>(std::move(*r), SplitBehavior::kRemoved,
                                        /*invert=*/true);
  }
  return json_fields::Unsupported("pre_tokenizer", *type, path);
}

}  // namespace radixkv::model

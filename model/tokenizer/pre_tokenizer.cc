#include "model/tokenizer/pre_tokenizer.h"

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
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// GPT-2's pre-tokenization regex (Oniguruma syntax), tokenizers'
// pre_tokenizers/byte_level.rs.
constexpr absl::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

// tokenizers' Whitespace pre-tokenizer pattern (Oniguruma syntax).
constexpr absl::string_view kWhitespacePattern = "\\w+|[^\\w\\s]+";

absl::Status Segments(const Regex& regex, absl::string_view text,
                      std::vector<Segment>* out) {
  std::vector<Regex::Match> matches;
  absl::Status s = regex.FindAll(text, &matches);
  if (!s.ok()) return s;
  SegmentsFromMatches(matches, static_cast<uint32_t>(text.size()), out);
  return absl::OkStatus();
}

// Copies added-token pieces of `in` to `out` (their text is no longer
// needed, so they keep an empty range).
void CopyAddedPiece(const Piece& p, std::vector<Piece>* out) {
  Piece copy = p;
  copy.begin = copy.end = 0;
  out->push_back(copy);
}

// Pre-tokenizers that only cut pieces: the text buffer is unchanged.
class SplittingPreTokenizer : public PreTokenizer {
 public:
  SplittingPreTokenizer(SplitBehavior behavior, bool invert)
      : behavior_(behavior), invert_(invert) {}

  absl::Status PreTokenize(PieceList* pieces) const final {
    std::vector<Piece> out;
    out.reserve(pieces->pieces.size());
    std::vector<Segment> segments;
    Ranges kept;
    for (const Piece& p : pieces->pieces) {
      if (p.token_id >= 0) {
        out.push_back(p);
        continue;
      }
      segments.clear();
      absl::Status s = FindSegments(pieces->View(p), &segments);
      if (!s.ok()) return s;
      if (invert_) {
        for (Segment& seg : segments) seg.is_match = !seg.is_match;
      }
      kept.clear();
      ApplySplitBehavior(segments, behavior_, &kept);
      for (const auto& [begin, end] : kept) {
        AppendSlice(p, p.begin, begin, end, &out);
      }
    }
    pieces->pieces = std::move(out);
    return absl::OkStatus();
  }

 protected:
  virtual absl::Status FindSegments(absl::string_view text,
                                    std::vector<Segment>* out) const = 0;

 private:
  SplitBehavior behavior_;
  bool invert_;
};

class RegexSplit : public SplittingPreTokenizer {
 public:
  RegexSplit(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : SplittingPreTokenizer(behavior, invert), regex_(std::move(regex)) {}

 protected:
  absl::Status FindSegments(absl::string_view text,
                            std::vector<Segment>* out) const override {
    return Segments(*regex_, text, out);
  }

 private:
  std::unique_ptr<Regex> regex_;
};

// Splits on single characters a predicate selects (Digits, Punctuation,
// WhitespaceSplit).
class CharSplit : public SplittingPreTokenizer {
 public:
  CharSplit(bool (*pred)(char32_t), SplitBehavior behavior)
      : SplittingPreTokenizer(behavior, false), pred_(pred) {}

 protected:
  absl::Status FindSegments(absl::string_view text,
                            std::vector<Segment>* out) const override {
    SegmentsFromChars(text, pred_, out);
    return absl::OkStatus();
  }

 private:
  bool (*pred_)(char32_t);
};

// Appends a rewritten piece's slices to `out`, each encoded by `append`.
template <typename AppendFn>
void AppendRewrittenSlices(const Piece& parent, absl::string_view rewritten,
                           const Ranges& kept, AppendFn append,
                           PieceList* out) {
  for (const auto& [begin, end] : kept) {
    if (begin >= end) continue;
    Piece np;
    np.begin = static_cast<uint32_t>(out->text.size());
    append(rewritten.substr(begin, end - begin), &out->text);
    np.end = static_cast<uint32_t>(out->text.size());
    np.at_origin = begin == 0 && parent.at_origin && parent.head_aligned;
    out->pieces.push_back(np);
  }
}

// ByteLevel: optional leading space, optional GPT-2 split, then every byte
// written as its byte-level character.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  absl::Status PreTokenize(PieceList* pieces) const override {
    PieceList out;
    out.text.reserve(pieces->text.size() + pieces->text.size() / 2);
    out.pieces.reserve(pieces->pieces.size());
    std::string prefixed;
    std::vector<Segment> segments;
    Ranges kept;
    for (const Piece& p : pieces->pieces) {
      if (p.token_id >= 0) {
        CopyAddedPiece(p, &out.pieces);
        continue;
      }
      absl::string_view text = pieces->View(p);
      if (add_prefix_space_ && text[0] != ' ') {
        prefixed.assign(" ");
        prefixed.append(text.data(), text.size());
        text = prefixed;
      }
      kept.clear();
      if (regex_ != nullptr) {
        segments.clear();
        absl::Status s = Segments(*regex_, text, &segments);
        if (!s.ok()) return s;
        ApplySplitBehavior(segments, SplitBehavior::kIsolated, &kept);
      } else {
        kept.push_back({0, static_cast<uint32_t>(text.size())});
      }
      AppendRewrittenSlices(p, text, kept, byte_level::AppendEncoded, &out);
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null: use_regex false
};

enum class PrependScheme { kAlways, kFirst, kNever };

// Metaspace: spaces become the replacement character, which is prepended
// per the scheme; then optionally split before each replacement character.
class Metaspace : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    utf8::Append(replacement, &replacement_utf8_);
  }

  absl::Status PreTokenize(PieceList* pieces) const override {
    PieceList out;
    std::string rewritten;
    std::vector<Segment> segments;
    Ranges kept;
    for (const Piece& p : pieces->pieces) {
      if (p.token_id >= 0) {
        CopyAddedPiece(p, &out.pieces);
        continue;
      }
      Rewrite(pieces->View(p), p.at_origin, &rewritten);
      kept.clear();
      if (split_) {
        segments.clear();
        const char32_t r = replacement_;
        SegmentsFromChars(rewritten, [r](char32_t c) { return c == r; },
                          &segments);
        ApplySplitBehavior(segments, SplitBehavior::kMergedWithNext, &kept);
      } else {
        kept.push_back({0, static_cast<uint32_t>(rewritten.size())});
      }
      AppendRewrittenSlices(
          p, rewritten, kept,
          [](absl::string_view s, std::string* o) { o->append(s.data(), s.size()); }, &out);
    }
    *pieces = std::move(out);
    return absl::OkStatus();
  }

 private:
  void Rewrite(absl::string_view text, bool at_origin,
               std::string* out) const {
    out->clear();
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
    const bool prepend =
        !out->empty() && !starts_with_replacement &&
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
  absl::Status PreTokenize(PieceList* pieces) const override {
    for (const auto& step : steps_) {
      absl::Status s = step->PreTokenize(pieces);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
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
  absl::StatusOr<std::optional<std::string>> scheme_name =
      json_fields::OptionalString(json, "prepend_scheme", path);
  if (!scheme_name.ok()) return scheme_name.status();
  PrependScheme scheme = PrependScheme::kAlways;
  if (scheme_name->has_value()) {
    if (**scheme_name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (**scheme_name == "never") {
      scheme = PrependScheme::kNever;
    } else if (**scheme_name != "always") {
      return json_fields::Unsupported("Metaspace prepend_scheme", **scheme_name,
                                      json_fields::Child(path, "prepend_scheme"));
    }
  }
  // The legacy add_prefix_space: false must agree with prepend_scheme
  // "never" (tokenizers refuses the file otherwise).
  const Json* legacy = json_fields::Find(json, "add_prefix_space");
  if (legacy != nullptr && legacy->is_boolean() && !legacy->get<bool>()) {
    if (scheme != PrependScheme::kNever) {
      return json_fields::Invalid(
          path, "add_prefix_space does not match declared prepend_scheme");
    }
  }
  absl::StatusOr<bool> split = json_fields::Bool(json, "split", path, true);
  if (!split.ok()) return split.status();
  return std::make_unique<Metaspace>(*replacement, scheme, *split);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> SequenceFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<const Json*> list =
      json_fields::Array(json, "pretokenizers", path);
  if (!list.ok()) return list.status();
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    absl::StatusOr<std::unique_ptr<PreTokenizer>> step =
        PreTokenizer::FromJson(
            (**list)[i],
            json_fields::Element(json_fields::Child(path, "pretokenizers"), i));
    if (!step.ok()) return step.status();
    steps.push_back(std::move(*step));
  }
  return std::make_unique<Sequence>(std::move(steps));
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
        unicode::IsNumeric, *individual ? SplitBehavior::kIsolated
                                        : SplitBehavior::kContiguous);
  }
  absl::StatusOr<SplitBehavior> behavior =
      ParseSplitBehavior(json, "behavior", path, SplitBehavior::kIsolated);
  if (!behavior.ok()) return behavior.status();
  return std::make_unique<CharSplit>(unicode::IsPunctuation, *behavior);
}

}  // namespace

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

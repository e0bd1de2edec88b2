#include "model/tokenizer/decoder.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/pattern.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

using json_fields::Json;

// All tokens to bytes, then one lossy UTF-8 string.
class ByteLevelDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) byte_level::AppendDecoded(t, &bytes);
    std::string text;
    text.reserve(bytes.size());
    utf8::AppendLossy(bytes, &text);
    tokens->assign(1, std::move(text));
    return absl::OkStatus();
  }
};

// The replacement character becomes a space; in the first token it is
// dropped unless prepend_scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool drop_in_first)
      : drop_in_first_(drop_in_first) {
    utf8::Append(replacement, &replacement_);
  }
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      out.reserve(t.size());
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && drop_in_first_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      t = std::move(out);
    }
    return absl::OkStatus();
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(ParsedPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      std::string out;
      bool head_removed = false;
      absl::Status s =
          AppendReplaced(*pattern_.regex, t, content_, &out, &head_removed);
      if (!s.ok()) return s;
      t = std::move(out);
    }
    return absl::OkStatus();
  }

 private:
  ParsedPattern pattern_;
  std::string content_;
};

// "<0xXX>" -> the byte, as tokenizers parses it: six bytes, "<0x" ... ">",
// and two characters u8::from_str_radix(.., 16) accepts (which allows a
// leading '+').
int ByteFallbackValue(absl::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    c = absl::ascii_tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  const int hi = hex(t[3]);
  const int lo = hex(t[4]);
  if (lo < 0) return -1;
  if (t[3] == '+') return lo;
  return hi < 0 ? -1 : hi * 16 + lo;
}

// Runs of <0xXX> tokens become their UTF-8 text, or one U+FFFD per byte when
// the run is not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (utf8::IsValid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) {
          out.emplace_back(utf8::kReplacementChar);
        }
      }
      pending.clear();
    };
    for (std::string& t : *tokens) {
      const int byte = ByteFallbackValue(t);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    *tokens = std::move(out);
    return absl::OkStatus();
  }
};

class FuseDecoder : public Decoder {
 public:
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::string joined = absl::StrJoin(*tokens, "");
    tokens->assign(1, std::move(joined));
    return absl::OkStatus();
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters
// from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<char32_t> chars;
    for (std::string& t : *tokens) {
      chars.clear();
      for (size_t pos = 0; pos < t.size();) {
        chars.push_back(utf8::DecodeValid(t, &pos));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < std::min(start_, chars.size()); ++i) {
        if (chars[i] != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < std::min(stop_, chars.size() - start_cut); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      std::string out;
      for (size_t i = start_cut; i < stop_cut; ++i)
        utf8::Append(chars[i], &out);
      t = std::move(out);
    }
    return absl::OkStatus();
  }

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  absl::Status DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) {
      absl::Status s = step->DecodeChain(tokens);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

absl::StatusOr<std::unique_ptr<Decoder>> MetaspaceFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<char32_t> replacement =
      json_fields::Char(json, "replacement", path);
  if (!replacement.ok()) return replacement.status();
  absl::StatusOr<PrependScheme> scheme = ParsePrependScheme(json, path);
  if (!scheme.ok()) return scheme.status();
  return std::make_unique<MetaspaceDecoder>(*replacement,
                                            *scheme != PrependScheme::kNever);
}

absl::StatusOr<std::unique_ptr<Decoder>> StripFromJson(const Json& json,
                                                       absl::string_view path) {
  absl::StatusOr<char32_t> content = json_fields::Char(json, "content", path);
  if (!content.ok()) return content.status();
  absl::StatusOr<int64_t> start =
      json_fields::Count(json, "start", path, 0, 1 << 20);
  if (!start.ok()) return start.status();
  absl::StatusOr<int64_t> stop =
      json_fields::Count(json, "stop", path, 0, 1 << 20);
  if (!stop.ok()) return stop.status();
  return std::make_unique<StripDecoder>(*content, *start, *stop);
}

absl::StatusOr<std::unique_ptr<Decoder>> ReplaceFromJson(
    const Json& json, absl::string_view path) {
  ParsedPattern pattern;
  std::string content;
  absl::Status s = ParseReplace(json, path, &pattern, &content);
  if (!s.ok()) return s;
  if (pattern.is_regex) {
    return json_fields::Unsupported("Replace decoder with pattern", "Regex",
                                    json_fields::Child(path, "pattern"));
  }
  return std::make_unique<ReplaceDecoder>(std::move(pattern),
                                          std::move(content));
}

absl::StatusOr<std::unique_ptr<Decoder>> SequenceFromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<std::vector<std::unique_ptr<Decoder>>> steps =
      json_fields::ComponentList<Decoder>(json, "decoders", path,
                                          Decoder::FromJson);
  if (!steps.ok()) return steps.status();
  return std::make_unique<SequenceDecoder>(std::move(*steps));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::FromJson(
    const Json& json, absl::string_view path) {
  absl::StatusOr<std::string> type = json_fields::Type(json, path);
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (*type == "Metaspace") return MetaspaceFromJson(json, path);
  if (*type == "Replace") return ReplaceFromJson(json, path);
  if (*type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (*type == "Fuse") return std::make_unique<FuseDecoder>();
  if (*type == "Strip") return StripFromJson(json, path);
  if (*type == "Sequence") return SequenceFromJson(json, path);
  return json_fields::Unsupported("decoder", *type, path);
}

}  // namespace radixkv::model

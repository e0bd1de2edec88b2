#include "model/chat/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "absl/status/status.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/string_literal.h"

namespace radixkv::model::chat {
namespace {

constexpr std::string_view kOperators[] = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
    "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) CHAT_RETURN_IF_ERROR(LexRoot());
    Push(TokenKind::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  SourcePos PosAt(size_t offset) const {
    const auto it =
        std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_start = *(it - 1);
    SourcePos pos;
    pos.line = static_cast<int>(it - line_starts_.begin());
    pos.column = static_cast<int>(CodePointCount(
                     src_.substr(line_start, offset - line_start))) +
                 1;
    return pos;
  }

  absl::Status Error(size_t offset, std::string_view message) const {
    return absl::InvalidArgumentError(
        Cat(FormatPos(PosAt(offset)), ": ", message));
  }

  Token& Push(TokenKind kind, std::string text, size_t offset) {
    Token token;
    token.kind = kind;
    token.text = std::move(text);
    token.pos = PosAt(offset);
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  bool StartsWith(size_t at, std::string_view s) const {
    return src_.substr(at, s.size()) == s;
  }

  // The code point at `at` (valid UTF-8) and its byte length.
  char32_t CodePointAt(size_t at, size_t* length) const {
    size_t end = at + 1;
    while (end < src_.size() &&
           (static_cast<unsigned char>(src_[end]) & 0xC0) == 0x80) {
      ++end;
    }
    *length = end - at;
    return DecodeUtf8(src_.substr(at, end - at))[0];
  }

  // Python `\s` at `at`: the byte length of the whitespace character, 0 if
  // there is none.
  size_t SpaceLength(size_t at) const {
    if (at >= src_.size()) return 0;
    const unsigned char c = static_cast<unsigned char>(src_[at]);
    if (c < 0x80) return PyIsSpace(c) ? 1 : 0;
    size_t length = 0;
    return PyIsSpace(CodePointAt(at, &length)) ? length : 0;
  }

  size_t SkipSpaces(size_t at) const {
    while (size_t n = SpaceLength(at)) at += n;
    return at;
  }

  static void RightStrip(std::string* text) {
    std::u32string cps = DecodeUtf8(*text);
    while (!cps.empty() && PyIsSpace(cps.back())) cps.pop_back();
    *text = EncodeUtf8(cps);
  }

  // Whitespace control on the data before a tag (jinja2's OptionalLStrip).
  void StripBefore(std::string* text, char sign, bool is_variable) const {
    if (sign == '-') {
      RightStrip(text);
      return;
    }
    if (sign == '+' || is_variable) return;
    const size_t newline = text->rfind('\n');
    const size_t line_pos = newline == std::string::npos ? 0 : newline + 1;
    if ((line_pos == 0 && !line_starting_) || line_pos >= text->size()) return;
    std::string_view tail = std::string_view(*text).substr(line_pos);
    for (char32_t c : DecodeUtf8(tail)) {
      if (!PyIsSpace(c)) return;
    }
    text->resize(line_pos);
  }

  void EmitData(std::string text, size_t offset) {
    if (!text.empty()) Push(TokenKind::kData, std::move(text), offset);
  }

  // The end of `{%[-+] raw [-]%}` at `tag`, or 0 when it is another tag.
  size_t RawBeginEnd(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = SkipSpaces(p);
    if (!StartsWith(p, "raw")) return 0;
    p = SkipSpaces(p + 3);
    if (StartsWith(p, "-%}")) return SkipSpaces(p + 3);
    if (StartsWith(p, "%}")) return p + 2;
    return 0;
  }

  absl::Status LexRoot() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string_view::npos || tag + 1 >= src_.size()) {
        EmitData(std::string(src_.substr(pos_)), pos_);
        pos_ = src_.size();
        return absl::OkStatus();
      }
      const char kind = src_[tag + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++tag;
    }
    const char kind = src_[tag + 1];
    const char sign =
        tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
            ? src_[tag + 2]
            : 0;
    const size_t raw_end = kind == '%' ? RawBeginEnd(tag) : 0;
    std::string text(src_.substr(pos_, tag - pos_));
    StripBefore(&text, sign, kind == '{');
    EmitData(std::move(text), pos_);
    const size_t body = tag + 2 + (sign != 0 ? 1 : 0);
    if (raw_end != 0) {
      line_starting_ = src_[raw_end - 1] == '\n';
      return LexRawBody(tag, raw_end);
    }
    if (kind == '#') return SkipComment(tag, body);
    Push(kind == '%' ? TokenKind::kBlockBegin : TokenKind::kVariableBegin,
         kind == '%' ? "{%" : "{{", tag);
    return LexTag(kind == '%', tag, body);
  }

  // Sets pos_ after a tag end that matched [start, end).
  void FinishTag(size_t end) {
    pos_ = end;
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  // The end of a block-style closing delimiter `close` ("%}" or "#}") at `p`
  // with its whitespace control, 0 if none is there.
  size_t MatchBlockClose(size_t p, std::string_view close) const {
    if (src_[p] == '+' && StartsWith(p + 1, close)) return p + 3;
    if (src_[p] == '-' && StartsWith(p + 1, close)) return SkipSpaces(p + 3);
    if (StartsWith(p, close)) {
      const size_t end = p + 2;
      return end < src_.size() && src_[end] == '\n' ? end + 1 : end;
    }
    return 0;
  }

  absl::Status SkipComment(size_t tag, size_t body) {
    for (size_t p = body; p < src_.size(); ++p) {
      const size_t end = MatchBlockClose(p, "#}");
      if (end != 0) {
        FinishTag(end);
        return absl::OkStatus();
      }
    }
    return Error(tag, "Missing end of comment tag");
  }

  absl::Status LexRawBody(size_t tag, size_t start) {
    for (size_t p = src_.find("{%", start); p != std::string_view::npos;
         p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      const char sign =
          q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign != 0) ++q;
      q = SkipSpaces(q);
      if (!StartsWith(q, "endraw")) continue;
      q = SkipSpaces(q + 6);
      const size_t end = q < src_.size() ? MatchBlockClose(q, "%}") : 0;
      if (end == 0) continue;
      std::string text(src_.substr(start, p - start));
      StripBefore(&text, sign, false);
      EmitData(std::move(text), start);
      FinishTag(end);
      return absl::OkStatus();
    }
    return Error(tag, "Missing end of raw directive");
  }

  // The end of the tag's closing delimiter at `p`, 0 if none is there.
  size_t MatchTagEnd(bool is_block, size_t p) const {
    if (is_block) return MatchBlockClose(p, "%}");
    if (StartsWith(p, "-}}")) return SkipSpaces(p + 3);
    if (StartsWith(p, "}}")) return p + 2;
    return 0;
  }

  absl::Status LexTag(bool is_block, size_t tag, size_t p) {
    balance_.clear();
    while (true) {
      if (p >= src_.size()) {
        return Error(tag, is_block ? "unexpected end of template, expected "
                                     "end of statement block '%}'"
                                   : "unexpected end of template, expected "
                                     "end of print statement '}}'");
      }
      if (balance_.empty()) {
        const size_t end = MatchTagEnd(is_block, p);
        if (end != 0) {
          Push(is_block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd,
               is_block ? "%}" : "}}", p);
          FinishTag(end);
          return absl::OkStatus();
        }
      }
      if (size_t n = SpaceLength(p)) {
        p += n;
        continue;
      }
      CHAT_ASSIGN_OR_RETURN(p, LexTagToken(p));
    }
  }

  // One name, number, string or operator token at `p`; returns its end.
  absl::StatusOr<size_t> LexTagToken(size_t p) {
    const char c = src_[p];
    if (IsDigit(c)) return LexNumber(p);
    if (IsNameStart(c)) {
      size_t end = p;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Push(TokenKind::kName, std::string(src_.substr(p, end - p)), p);
      return end;
    }
    if (c == '\'' || c == '"') return LexString(p);
    for (std::string_view op : kOperators) {
      if (StartsWith(p, op)) {
        CHAT_RETURN_IF_ERROR(Balance(op, p));
        Push(TokenKind::kOperator, std::string(op), p);
        return p + op.size();
      }
    }
    size_t length = 0;
    if (static_cast<unsigned char>(c) >= 0x80 &&
        PyIsWordChar(CodePointAt(p, &length))) {
      return Error(p, "non-ASCII identifiers are not supported");
    }
    CodePointAt(p, &length);
    return Error(
        p, Cat("unexpected char '", std::string(src_.substr(p, length)), "'"));
  }

  absl::Status Balance(std::string_view op, size_t p) {
    if (op == "(" || op == "[" || op == "{") {
      balance_.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
    } else if (op == ")" || op == "]" || op == "}") {
      if (balance_.empty()) return Error(p, Cat("unexpected '", op, "'"));
      const char expected = balance_.back();
      balance_.pop_back();
      if (expected != op[0]) {
        return Error(p, Cat("unexpected '", op, "', expected '",
                            std::string(1, expected), "'"));
      }
    }
    return absl::OkStatus();
  }

  // Python's `(\d+_)*\d+`: the end of the digit run at `p`, or `p`.
  size_t ScanDigits(size_t p) const {
    size_t q = p;
    while (q < src_.size() && IsDigit(src_[q])) ++q;
    if (q == p) return p;
    while (q + 1 < src_.size() && src_[q] == '_' && IsDigit(src_[q + 1])) {
      q += 2;
      while (q < src_.size() && IsDigit(src_[q])) ++q;
    }
    return q;
  }

  // The end of an exponent `e[+-]?D` at `p`, 0 if none is there.
  size_t ScanExponent(size_t p) const {
    if (p >= src_.size() || (src_[p] != 'e' && src_[p] != 'E')) return 0;
    size_t q = p + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    const size_t end = ScanDigits(q);
    return end == q ? 0 : end;
  }

  // jinja2's float_re: D((\.D)?e[+-]?D | \.D), not right after a '.'.
  size_t ScanFloat(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return 0;
    const size_t int_end = ScanDigits(p);
    size_t frac_end = 0;
    if (int_end < src_.size() && src_[int_end] == '.') {
      const size_t q = ScanDigits(int_end + 1);
      if (q > int_end + 1) frac_end = q;
    }
    if (frac_end != 0) {
      const size_t exp_end = ScanExponent(frac_end);
      return exp_end != 0 ? exp_end : frac_end;
    }
    return ScanExponent(int_end);
  }

  // jinja2's integer_re: 0b/0o/0x forms, [1-9](_?\d)*, 0(_?0)*.
  size_t ScanInteger(size_t p, int* base) const {
    *base = 10;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char x = src_[p + 1] | 0x20;
      const int prefix_base =
          x == 'b' ? 2 : (x == 'o' ? 8 : (x == 'x' ? 16 : 0));
      if (prefix_base != 0) {
        size_t q = p + 2;
        while (true) {
          const size_t d = q < src_.size() && src_[q] == '_' ? q + 1 : q;
          if (d >= src_.size() || !IsBaseDigit(src_[d], prefix_base)) break;
          q = d + 1;
        }
        if (q > p + 2) {
          *base = prefix_base;
          return q;
        }
      }
    }
    const char want = src_[p] == '0' ? '0' : 0;
    size_t q = p + 1;
    while (true) {
      const size_t d = q < src_.size() && src_[q] == '_' ? q + 1 : q;
      if (d >= src_.size() || !IsDigit(src_[d]) || (want && src_[d] != want)) {
        break;
      }
      q = d + 1;
    }
    return q;
  }

  static bool IsBaseDigit(char c, int base) {
    if (base == 2) return c == '0' || c == '1';
    if (base == 8) return c >= '0' && c <= '7';
    return IsDigit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
  }

  absl::StatusOr<size_t> LexNumber(size_t p) {
    const size_t float_end = ScanFloat(p);
    if (float_end != 0) {
      std::string text;
      for (char c : src_.substr(p, float_end - p)) {
        if (c != '_') text.push_back(c);
      }
      Push(TokenKind::kFloat, text, p).float_value =
          std::strtod(text.c_str(), nullptr);
      return float_end;
    }
    int base = 10;
    const size_t end = ScanInteger(p, &base);
    std::string digits;
    for (char c : src_.substr(p + (base == 10 ? 0 : 2),
                              end - p - (base == 10 ? 0 : 2))) {
      if (c != '_') digits.push_back(c);
    }
    errno = 0;
    const unsigned long long value =
        std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || value > static_cast<unsigned long long>(
                                       std::numeric_limits<int64_t>::max())) {
      return Error(p, "integer literal beyond 64 bits is not supported");
    }
    Push(TokenKind::kInteger, std::string(src_.substr(p, end - p)), p)
        .int_value = static_cast<int64_t>(value);
    return end;
  }

  absl::StatusOr<size_t> LexString(size_t p) {
    const char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size()) return Error(p, "unterminated string literal");
    auto decoded = DecodeStringLiteral(src_.substr(p + 1, q - p - 1));
    if (!decoded.ok()) return Error(p, std::string(decoded.status().message()));
    Push(TokenKind::kString, std::move(*decoded), p);
    return q + 1;
  }

  std::string_view src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<size_t> line_starts_;
  std::vector<char> balance_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string FormatPos(SourcePos pos) {
  return Cat("line ", pos.line, ", column ", pos.column);
}

std::string NormalizeTemplateSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  return Lexer(source).Run();
}

}  // namespace radixkv::model::chat

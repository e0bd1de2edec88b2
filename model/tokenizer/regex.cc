#include "model/tokenizer/regex.h"

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

constexpr absl::string_view kWordClass = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr absl::string_view kSpaceClass = "\\s\\x{85}";
constexpr absl::string_view kHexClass = "0-9a-fA-F";

absl::Status Unsupported(absl::string_view what, absl::string_view pattern) {
  return absl::InvalidArgumentError(
      absl::StrCat("regex construct ", what,
                   " is not supported (its Oniguruma meaning has no exact "
                   "PCRE2 equivalent) in pattern '",
                   pattern, "'"));
}

// Scans Oniguruma source and writes PCRE2 source.
class PatternTranslator {
 public:
  explicit PatternTranslator(absl::string_view pattern) : p_(pattern) {}

  absl::StatusOr<std::string> Run() {
    while (i_ < p_.size()) {
      absl::Status s = Step();
      if (!s.ok()) return s;
    }
    if (in_class_) return Unsupported("unterminated '['", p_);
    return out_;
  }

 private:
  absl::Status Step() {
    const char c = p_[i_];
    if (c == '\\') return Escape();
    if (in_class_) return ClassChar();
    if (c == '[') {
      in_class_ = true;
      out_.push_back('[');
      ++i_;
      if (i_ < p_.size() && p_[i_] == '^') {
        out_.push_back('^');
        ++i_;
      }
      if (i_ < p_.size() && p_[i_] == ']') {
        return Unsupported("']' first in a class", p_);
      }
      return absl::OkStatus();
    }
    if (c == '(' && Peek(1) == '?') return GroupOpen();
    if (c == '{' && Peek(1) == ',') return Unsupported("'{,n}'", p_);
    out_.push_back(c);
    ++i_;
    return absl::OkStatus();
  }

  absl::Status ClassChar() {
    const char c = p_[i_];
    if (c == '[') {
      return Unsupported(
          Peek(1) == ':' ? "POSIX bracket class" : "nested character class",
          p_);
    }
    if (c == '&' && Peek(1) == '&') return Unsupported("class '&&'", p_);
    if (c == ']') in_class_ = false;
    out_.push_back(c);
    ++i_;
    return absl::OkStatus();
  }

  absl::Status GroupOpen() {
    // "(?" followed by a group kind PCRE2 reads the same way, or options.
    const char k = Peek(2);
    if (k == ':' || k == '=' || k == '!' || k == '>' || k == '<' || k == '#') {
      out_.append("(?");
      i_ += 2;
      return absl::OkStatus();
    }
    size_t j = i_ + 2;
    while (j < p_.size() && (p_[j] == 'i' || p_[j] == '-')) ++j;
    if (j == i_ + 2 || j >= p_.size() || (p_[j] != ':' && p_[j] != ')')) {
      return Unsupported(
          absl::StrCat("'", p_.substr(i_, std::min<size_t>(4, p_.size() - i_)),
                       "' (inline options other than i)"),
          p_);
    }
    out_.append(p_.data() + i_, j - i_);
    i_ = j;
    return absl::OkStatus();
  }

  absl::Status Escape() {
    if (i_ + 1 >= p_.size()) return Unsupported("trailing '\\'", p_);
    const char d = p_[i_ + 1];
    i_ += 2;
    switch (d) {
      case 's':
        return Class(kSpaceClass, false);
      case 'S':
        return Class(kSpaceClass, true);
      case 'w':
        return Class(kWordClass, false);
      case 'W':
        return Class(kWordClass, true);
      case 'h':
        return Class(kHexClass, false);
      case 'H':
        return Class(kHexClass, true);
      case 'v':
        out_.append("\\x{0B}");
        return absl::OkStatus();
      case 'b':
        if (!in_class_) return Unsupported("\\b (word boundary)", p_);
        out_.append("\\x{08}");
        return absl::OkStatus();
      case 'u':
        return UnicodeEscape();
      case 'x':
        return HexEscape();
      case 'p':
      case 'P':
      case 'd':
      case 'D':
      case 'n':
      case 'r':
      case 't':
      case 'f':
      case 'a':
      case 'e':
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        out_.push_back('\\');
        out_.push_back(d);
        return absl::OkStatus();
      default:
        break;
    }
    if (std::isalnum(static_cast<unsigned char>(d)) &&
        !(d >= '0' && d <= '9')) {
      return Unsupported(absl::StrCat("'\\", std::string(1, d), "'"), p_);
    }
    out_.push_back('\\');
    out_.push_back(d);
    return absl::OkStatus();
  }

  // A shorthand class: its members spliced into an enclosing class, or a
  // class of its own.
  absl::Status Class(absl::string_view members, bool negated) {
    if (in_class_) {
      if (negated) {
        return Unsupported("a negated shorthand (\\S \\W \\H) inside a class",
                           p_);
      }
      out_.append(members.data(), members.size());
      return absl::OkStatus();
    }
    absl::StrAppend(&out_, negated ? "[^" : "[", members, "]");
    return absl::OkStatus();
  }

  absl::Status UnicodeEscape() {
    if (i_ + 4 > p_.size()) return Unsupported("short \\u escape", p_);
    for (size_t k = 0; k < 4; ++k) {
      if (!std::isxdigit(static_cast<unsigned char>(p_[i_ + k]))) {
        return Unsupported("malformed \\u escape", p_);
      }
    }
    absl::StrAppend(&out_, "\\x{", p_.substr(i_, 4), "}");
    i_ += 4;
    return absl::OkStatus();
  }

  absl::Status HexEscape() {
    if (Peek(0) == '{') {  // \x{H...}: a code point in both engines
      out_.append("\\x");
      return absl::OkStatus();
    }
    size_t n = 0;
    while (n < 2 && i_ + n < p_.size() &&
           std::isxdigit(static_cast<unsigned char>(p_[i_ + n]))) {
      ++n;
    }
    if (n == 0) return Unsupported("malformed \\x escape", p_);
    const unsigned value =
        std::stoul(std::string(p_.substr(i_, n)), nullptr, 16);
    if (value >= 0x80) {
      return Unsupported("\\xHH above 7F (a raw byte in Oniguruma)", p_);
    }
    absl::StrAppend(&out_, "\\x{", p_.substr(i_, n), "}");
    i_ += n;
    return absl::OkStatus();
  }

  char Peek(size_t ahead) const {
    return i_ + ahead < p_.size() ? p_[i_ + ahead] : '\0';
  }

  absl::string_view p_;
  size_t i_ = 0;
  bool in_class_ = false;
  std::string out_;
};

// Per-thread match state: one ovector pair (only the whole match is read)
// and a JIT stack large enough for long runs of repeated groups.
struct MatchScratch {
  MatchScratch() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match_data);
  }
  pcre2_match_data* match_data;
  pcre2_match_context* context;
  pcre2_jit_stack* jit_stack;
};

MatchScratch& ThreadScratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

absl::StatusOr<std::string> OnigurumaToPcre2(absl::string_view pattern) {
  return PatternTranslator(pattern).Run();
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern,
                                                      uint32_t options) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                    pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", pattern, "' does not compile at offset ",
                     offset, ": ", reinterpret_cast<const char*>(message)));
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Regex>(new Regex(code, jit));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::FromOniguruma(
    absl::string_view pattern) {
  absl::StatusOr<std::string> translated = OnigurumaToPcre2(pattern);
  if (!translated.ok()) return translated.status();
  return FromPcre2(*translated);
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::FromLiteral(
    absl::string_view literal) {
  return Compile(literal, PCRE2_UTF | PCRE2_LITERAL);
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::FromPcre2(
    absl::string_view pattern) {
  // Ruby syntax: ^ and $ are line anchors.
  return Compile(pattern, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE);
}

Regex::~Regex() { pcre2_code_free(code_); }

absl::Status Regex::FindAll(absl::string_view text,
                            std::vector<Match>* out) const {
  return ForEachMatch(text, [out](Match m) {
    out->push_back(m);
    return absl::OkStatus();
  });
}

absl::Status Regex::ForEachMatch(
    absl::string_view text, absl::FunctionRef<absl::Status(Match)> fn) const {
  MatchScratch& scratch = ThreadScratch();
  if (scratch.match_data == nullptr) {
    return absl::ResourceExhaustedError("PCRE2 match data allocation failed");
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_end = SIZE_MAX;
  while (pos <= text.size()) {
    const int rc =
        jit_ ? pcre2_jit_match(code_, subject, text.size(), pos, 0,
                               scratch.match_data, scratch.context)
             : pcre2_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                           scratch.match_data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::ResourceExhaustedError(absl::StrCat(
          "regex match failed: ", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match_data);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (begin == end && end == last_end) {
      if (pos >= text.size()) break;
      pos += utf8::SequenceLength(static_cast<unsigned char>(text[pos]));
      continue;
    }
    pos = end;
    last_end = end;
    absl::Status s =
        fn(Match{static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace radixkv::model

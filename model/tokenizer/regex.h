// Regular expressions with Hugging Face tokenizers' semantics, on PCRE2.
//
// tokenizers compiles the patterns of tokenizer.json (Split, Replace) with
// Oniguruma (its `SysRegex`, Ruby syntax, UTF-8) and iterates matches like
// the `onig` crate's `find_iter`. PCRE2 in UTF + UCP mode accepts the same
// syntax for what real tokenizers use (lookahead, `(?i:...)`, `\p{L}`), but a
// few escapes mean different things; OnigurumaToPcre2 rewrites those and
// refuses what it cannot express exactly. Each pattern is compiled once, with
// the JIT when available; matching is thread-safe (per-thread match data).
#ifndef RADIXKV_MODEL_TOKENIZER_REGEX_H_
#define RADIXKV_MODEL_TOKENIZER_REGEX_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct pcre2_real_code_8;

namespace radixkv::model {

// Rewrites an Oniguruma (Ruby syntax) pattern into an equivalent PCRE2 one:
//   \s -> [\s\x{85}]  (Oniguruma's \s includes NEL; PCRE2's does not)
//   \S -> [^\s\x{85}]
//   \w -> [\p{L}\p{M}\p{N}\p{Pc}]  (Oniguruma's Unicode word characters)
//   \W -> [^\p{L}\p{M}\p{N}\p{Pc}]
//   \h, \H -> hexadecimal digits (Oniguruma), \v -> U+000B, \uHHHH -> \x{HHHH}
// INVALID_ARGUMENT naming the construct for what would not match the same:
// \b and \B outside a class, \S \W \H inside a class, \xHH above 7F (a raw
// byte in Oniguruma), class intersection `&&`, nested or POSIX classes,
// `{,n}`, inline options other than i, and unknown letter escapes.
absl::StatusOr<std::string> OnigurumaToPcre2(absl::string_view pattern);

// A compiled pattern; immutable, const methods callable concurrently.
class Regex {
 public:
  // One match: byte offsets [begin, end) into the searched text.
  struct Match {
    uint32_t begin;
    uint32_t end;
  };

  // Compiles an Oniguruma pattern (see OnigurumaToPcre2). INVALID_ARGUMENT
  // with PCRE2's message and offset if it does not compile.
  static absl::StatusOr<std::unique_ptr<Regex>> FromOniguruma(
      absl::string_view pattern);

  // Matches `literal` exactly (tokenizers escapes String patterns).
  static absl::StatusOr<std::unique_ptr<Regex>> FromLiteral(
      absl::string_view literal);

  // Compiles a PCRE2 pattern as is (UTF, UCP, multiline).
  static absl::StatusOr<std::unique_ptr<Regex>> FromPcre2(
      absl::string_view pattern);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls `fn` with the successive non-overlapping matches in `text` (valid
  // UTF-8), as the onig crate's find_iter: leftmost first, an empty match
  // right where the previous match ended is skipped by one character. Stops
  // at the first error `fn` returns. RESOURCE_EXHAUSTED if PCRE2's match
  // limit is hit.
  absl::Status ForEachMatch(absl::string_view text,
                            absl::FunctionRef<absl::Status(Match)> fn) const;

  // ForEachMatch collecting the matches into *out.
  absl::Status FindAll(absl::string_view text, std::vector<Match>* out) const;

 private:
  Regex(pcre2_real_code_8* code, bool jit) : code_(code), jit_(jit) {}
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(
      absl::string_view pattern, uint32_t options);

  pcre2_real_code_8* code_;
  bool jit_;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_REGEX_H_

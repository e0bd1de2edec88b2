// tokenizer.json pattern objects, `{"String": "..."}` or `{"Regex": "..."}`,
// shared by the Split pre-tokenizer and the Replace normalizer and decoder,
// and replace-all over a compiled pattern.
#ifndef RADIXKV_MODEL_TOKENIZER_PATTERN_H_
#define RADIXKV_MODEL_TOKENIZER_PATTERN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/regex.h"

namespace radixkv::model {

// A parsed pattern object.
struct ParsedPattern {
  std::unique_ptr<Regex> regex;
  bool is_regex = false;  // "Regex" (else a literal "String")
};

// Compiles the pattern object at `path`. INVALID_ARGUMENT if it is neither
// form or the regex is refused (see OnigurumaToPcre2).
absl::StatusOr<ParsedPattern> ParsePattern(const json_fields::Json& pattern,
                                           absl::string_view path);

// Parses a Replace component (normalizer or decoder): its "pattern" and
// "content". A Regex pattern with '$' in the content is refused: tokenizers
// expands capture groups there (Rust regex syntax), which is not
// implemented.
absl::Status ParseReplace(const json_fields::Json& obj, absl::string_view path,
                          ParsedPattern* pattern, std::string* content);

// Appends `text` with every match of `regex` replaced by `content`. Sets
// *head_removed when a match at offset 0 was replaced by nothing.
absl::Status AppendReplaced(const Regex& regex, absl::string_view text,
                            absl::string_view content, std::string* out,
                            bool* head_removed);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_PATTERN_H_

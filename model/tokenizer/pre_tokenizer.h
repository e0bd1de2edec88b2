// tokenizer.json "pre_tokenizer": Split, ByteLevel, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit and Sequence, with tokenizers'
// semantics (tokenizers/src/pre_tokenizers/*.rs). Anything else is refused.
#ifndef RADIXKV_MODEL_TOKENIZER_PRE_TOKENIZER_H_
#define RADIXKV_MODEL_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/pipeline.h"

namespace radixkv::model {

// Immutable after construction; PreTokenize may be called concurrently.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;

  // Splits (and, for ByteLevel and Metaspace, rewrites) the non-empty
  // piece `text` and passes the resulting pieces, in order, to `sink`
  // (empty ones are dropped). `at_origin`: see TextSink. Returns the first
  // error of `sink`, or RESOURCE_EXHAUSTED from the regex engine.
  virtual absl::Status PreTokenize(absl::string_view text, bool at_origin,
                                   TextSink sink) const = 0;

  // Builds the pre-tokenizer described by `json` at `path`. INVALID_ARGUMENT
  // naming the type and path for an unsupported or malformed component.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(
      const json_fields::Json& json, absl::string_view path);
};

// Metaspace's "prepend_scheme" (pre-tokenizer and decoder): where the
// replacement character is put in front of a piece.
enum class PrependScheme {
  kAlways,  // every piece
  kFirst,   // only the piece at the start of the input
  kNever,
};

// Reads "prepend_scheme" (default "always") from a Metaspace object and
// checks the legacy "add_prefix_space" against it. INVALID_ARGUMENT for an
// unknown scheme or add_prefix_space false with a scheme other than never.
absl::StatusOr<PrependScheme> ParsePrependScheme(const json_fields::Json& json,
                                                 absl::string_view path);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_PRE_TOKENIZER_H_

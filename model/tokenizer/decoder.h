// tokenizer.json "decoder": ByteLevel, Metaspace, Replace (String
// patterns), ByteFallback, Fuse, Strip and Sequence, with tokenizers'
// `decode_chain` semantics (tokenizers/src/decoders/*.rs and the decoders in
// pre_tokenizers/{byte_level,metaspace}.rs, normalizers/replace.rs).
#ifndef RADIXKV_MODEL_TOKENIZER_DECODER_H_
#define RADIXKV_MODEL_TOKENIZER_DECODER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/json_fields.h"

namespace radixkv::model {

// Immutable; thread-safe.
class Decoder {
 public:
  virtual ~Decoder() = default;

  // Transforms the token strings in place (tokenizers' decode_chain; the
  // decoded text is their concatenation). The strings may be merged into
  // fewer. RESOURCE_EXHAUSTED from the regex engine.
  virtual absl::Status DecodeChain(std::vector<std::string>* tokens) const = 0;

  // Builds the decoder at `path`. INVALID_ARGUMENT naming the type and path
  // for an unsupported or malformed component (including a Replace decoder
  // with a Regex pattern: tokenizers runs those on Rust's regex crate, whose
  // syntax and classes are not reproduced).
  static absl::StatusOr<std::unique_ptr<Decoder>> FromJson(
      const json_fields::Json& json, absl::string_view path);
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_DECODER_H_

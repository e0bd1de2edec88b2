// tokenizer.json "normalizer": NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// Prepend, Replace and Sequence, with tokenizers' semantics
// (tokenizers/src/normalizers/*.rs). Anything else is refused at load.
#ifndef RADIXKV_MODEL_TOKENIZER_NORMALIZER_H_
#define RADIXKV_MODEL_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/json_fields.h"

namespace radixkv::model {

// Immutable after construction; Normalize may be called concurrently.
class Normalizer {
 public:
  virtual ~Normalizer() = default;

  // Replaces *text (valid UTF-8) by its normalized form. Sets *head_moved
  // when leading characters were removed (the first remaining byte no longer
  // comes from the start of the input). Errors: INTERNAL / RESOURCE_EXHAUSTED
  // from ICU or the regex engine.
  virtual absl::Status Normalize(std::string* text, bool* head_moved) const = 0;

  // Builds the normalizer described by `json` (an object with "type") found
  // at `path`. INVALID_ARGUMENT naming the type and path for an unsupported
  // or malformed component.
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(
      const json_fields::Json& json, absl::string_view path);
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_NORMALIZER_H_

// tokenizer.json "post_processor" for single sequences: TemplateProcessing
// (its "single" template), BertProcessing and RobertaProcessing ([cls] A
// [sep]), ByteLevel (offsets only: ids unchanged) and Sequence, as
// tokenizers/src/processors/*.rs. Applied only when special tokens are
// requested, like tokenizers' encode(..., add_special_tokens).
#ifndef RADIXKV_MODEL_TOKENIZER_POST_PROCESSOR_H_
#define RADIXKV_MODEL_TOKENIZER_POST_PROCESSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/json_fields.h"

namespace radixkv::model {

// Immutable; thread-safe.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;

  // Rewrites the ids of one encoded sequence (adds the template's special
  // tokens around it).
  virtual void Process(std::vector<int32_t>* ids) const = 0;

  // Builds the post-processor at `path`. Every special token id must be in
  // [0, id_bound). INVALID_ARGUMENT naming the type and path otherwise, for
  // a template whose single sequence is not exactly one $A, or a special
  // token missing from "special_tokens".
  static absl::StatusOr<std::unique_ptr<PostProcessor>> FromJson(
      const json_fields::Json& json, absl::string_view path, int32_t id_bound);
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_POST_PROCESSOR_H_

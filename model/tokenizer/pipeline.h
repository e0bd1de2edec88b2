// What flows between the stages of HfTokenizer::Encode. The text is pushed
// through the stages one piece at a time (depth first): each stage hands the
// pieces it makes to the next stage's sink, so memory stays proportional to
// the largest piece, not to the text. This is equivalent to tokenizers'
// stage-by-stage PreTokenizedString because every stage treats each piece
// independently.
#ifndef RADIXKV_MODEL_TOKENIZER_PIPELINE_H_
#define RADIXKV_MODEL_TOKENIZER_PIPELINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace radixkv::model {

// Receives one non-empty text piece. `at_origin`: the piece starts at offset
// 0 of the original input (tokenizers' `offsets_original().0 == 0`, which
// Metaspace's prepend_scheme "first" reads). The view is valid only during
// the call.
using TextSink =
    absl::FunctionRef<absl::Status(absl::string_view text, bool at_origin)>;

// A string buffer borrowed from a per-thread pool for the life of the
// object. Stages nest (a sink runs the next stage), so each borrows its own;
// buffers keep their capacity between calls unless they grew large.
class ScratchString {
 public:
  ScratchString();
  ~ScratchString();
  ScratchString(const ScratchString&) = delete;
  ScratchString& operator=(const ScratchString&) = delete;

  std::string& get() { return *buffer_; }

 private:
  std::string* buffer_;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_PIPELINE_H_

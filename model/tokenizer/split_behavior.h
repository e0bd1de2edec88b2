// How a pre-tokenizer cuts a piece around the matches of its pattern:
// tokenizers' `Pattern::find_matches` (segments covering the piece, each a
// match or not) followed by `NormalizedString::split` with a
// SplitDelimiterBehavior (tokenizers/src/tokenizer/{pattern,normalizer}.rs),
// computed as a stream with one pending segment instead of lists.
#ifndef RADIXKV_MODEL_TOKENIZER_SPLIT_BEHAVIOR_H_
#define RADIXKV_MODEL_TOKENIZER_SPLIT_BEHAVIOR_H_

#include <cstdint>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {

enum class SplitBehavior {
  kRemoved,             // drop the matches
  kIsolated,            // each match is a piece of its own
  kMergedWithPrevious,  // a match joins the piece before it
  kMergedWithNext,      // a match joins the piece after it
  kContiguous,          // consecutive matches form one piece
};

// Reads member `key` ("Removed", "Isolated", ...); `default_value` if absent
// (INVALID_ARGUMENT if absent without one, or unknown).
absl::StatusOr<SplitBehavior> ParseSplitBehavior(
    const json_fields::Json& obj, absl::string_view key, absl::string_view path,
    std::optional<SplitBehavior> default_value);

// Receives the kept byte ranges [begin, end) of a piece, in order, never
// empty.
using RangeSink = absl::FunctionRef<absl::Status(uint32_t, uint32_t)>;

// Takes the segments of one piece in order (matches and the gaps between
// them, together covering the piece) and emits the ranges the behavior
// keeps. `invert` swaps matches and gaps first (Split's "invert").
class SegmentSplitter {
 public:
  SegmentSplitter(SplitBehavior behavior, bool invert, RangeSink emit)
      : behavior_(behavior), invert_(invert), emit_(emit) {}

  absl::Status Add(uint32_t begin, uint32_t end, bool is_match);

  // Emits what is still pending; call once after the last Add.
  absl::Status Finish();

 private:
  absl::Status Emit(uint32_t begin, uint32_t end) {
    return begin < end ? emit_(begin, end) : absl::OkStatus();
  }

  SplitBehavior behavior_;
  bool invert_;
  RangeSink emit_;
  bool has_pending_ = false;
  uint32_t pending_begin_ = 0;
  uint32_t pending_end_ = 0;
  bool pending_match_ = false;
  bool previous_match_ = false;
};

// Feeds `splitter` the segments of `text` for `regex` and finishes it.
absl::Status SplitOnRegex(const Regex& regex, absl::string_view text,
                          SegmentSplitter* splitter);

// Feeds `splitter` the segments of `text` where every character `pred`
// accepts is a one-character match (tokenizers' Pattern for Fn(char)), and
// finishes it.
template <typename Pred>
absl::Status SplitOnChars(absl::string_view text, Pred pred,
                          SegmentSplitter* splitter) {
  uint32_t gap_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t begin = static_cast<uint32_t>(pos);
    const char32_t c = utf8::DecodeValid(text, &pos);
    if (!pred(c)) continue;
    absl::Status s;
    if (gap_start < begin) s = splitter->Add(gap_start, begin, false);
    if (s.ok()) s = splitter->Add(begin, static_cast<uint32_t>(pos), true);
    if (!s.ok()) return s;
    gap_start = static_cast<uint32_t>(pos);
  }
  if (gap_start < text.size()) {
    absl::Status s =
        splitter->Add(gap_start, static_cast<uint32_t>(text.size()), false);
    if (!s.ok()) return s;
  }
  return splitter->Finish();
}

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_SPLIT_BEHAVIOR_H_

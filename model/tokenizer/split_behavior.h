// How a pre-tokenizer cuts a piece around the matches of its pattern:
// tokenizers' `Pattern::find_matches` (segments covering the piece, each a
// match or not) and `NormalizedString::split` with a SplitDelimiterBehavior
// (tokenizers/src/tokenizer/{pattern,normalizer}.rs).
#ifndef RADIXKV_MODEL_TOKENIZER_SPLIT_BEHAVIOR_H_
#define RADIXKV_MODEL_TOKENIZER_SPLIT_BEHAVIOR_H_

#include <cstdint>
#include <utility>
#include <vector>

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

// Reads member `key` ("Removed", "Isolated", ...); `default_value` if absent.
absl::StatusOr<SplitBehavior> ParseSplitBehavior(
    const json_fields::Json& obj, absl::string_view key,
    absl::string_view path, std::optional<SplitBehavior> default_value);

// One segment of a piece: [begin, end) and whether it is a match.
struct Segment {
  uint32_t begin;
  uint32_t end;
  bool is_match;
};

// Segments of a piece of `length` bytes from regex matches (in order,
// non-overlapping): matches and the gaps between them, in order.
void SegmentsFromMatches(const std::vector<Regex::Match>& matches,
                         uint32_t length, std::vector<Segment>* out);

// Segments from a character predicate: every character for which `pred` is
// true is a one-character match.
template <typename Pred>
void SegmentsFromChars(absl::string_view text, Pred pred,
                       std::vector<Segment>* out) {
  uint32_t gap_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t begin = static_cast<uint32_t>(pos);
    const char32_t c = utf8::DecodeValid(text, &pos);
    if (!pred(c)) continue;
    if (gap_start < begin) out->push_back({gap_start, begin, false});
    out->push_back({begin, static_cast<uint32_t>(pos), true});
    gap_start = static_cast<uint32_t>(pos);
  }
  if (gap_start < text.size()) {
    out->push_back({gap_start, static_cast<uint32_t>(text.size()), false});
  }
}

// Appends to *kept the ranges `behavior` keeps from `segments` (empty ranges
// included; callers drop them).
void ApplySplitBehavior(const std::vector<Segment>& segments,
                        SplitBehavior behavior,
                        std::vector<std::pair<uint32_t, uint32_t>>* kept);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_SPLIT_BEHAVIOR_H_

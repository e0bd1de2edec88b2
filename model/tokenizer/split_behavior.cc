#include "model/tokenizer/split_behavior.h"

#include <string>

namespace radixkv::model {

absl::StatusOr<SplitBehavior> ParseSplitBehavior(
    const json_fields::Json& obj, absl::string_view key, absl::string_view path,
    std::optional<SplitBehavior> default_value) {
  absl::StatusOr<std::optional<std::string>> name =
      json_fields::OptionalString(obj, key, path);
  if (!name.ok()) return name.status();
  if (!name->has_value()) {
    if (default_value.has_value()) return *default_value;
    return json_fields::Invalid(json_fields::Child(path, key), "missing");
  }
  const std::string& n = **name;
  if (n == "Removed") return SplitBehavior::kRemoved;
  if (n == "Isolated") return SplitBehavior::kIsolated;
  if (n == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (n == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (n == "Contiguous") return SplitBehavior::kContiguous;
  return json_fields::Unsupported("split behavior", n,
                                  json_fields::Child(path, key));
}

// Each case is the forward, one-pending-segment form of the fold tokenizers
// runs over the segment list in NormalizedString::split.
absl::Status SegmentSplitter::Add(uint32_t begin, uint32_t end, bool is_match) {
  if (invert_) is_match = !is_match;
  absl::Status s;
  switch (behavior_) {
    case SplitBehavior::kIsolated:
      return Emit(begin, end);
    case SplitBehavior::kRemoved:
      return is_match ? absl::OkStatus() : Emit(begin, end);
    case SplitBehavior::kContiguous:
      if (has_pending_ && is_match == pending_match_) {
        pending_end_ = end;
        return absl::OkStatus();
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      if (has_pending_ && is_match && !previous_match_) {
        pending_end_ = end;
        previous_match_ = is_match;
        return absl::OkStatus();
      }
      previous_match_ = is_match;
      break;
    case SplitBehavior::kMergedWithNext:
      // A pending segment is a match waiting for the gap after it.
      if (has_pending_) {
        has_pending_ = false;
        if (!is_match) return Emit(pending_begin_, end);
        s = Emit(pending_begin_, pending_end_);
        if (!s.ok()) return s;
      }
      if (!is_match) return Emit(begin, end);
      has_pending_ = true;
      pending_begin_ = begin;
      pending_end_ = end;
      return absl::OkStatus();
  }
  if (has_pending_) {
    s = Emit(pending_begin_, pending_end_);
    if (!s.ok()) return s;
  }
  has_pending_ = true;
  pending_begin_ = begin;
  pending_end_ = end;
  pending_match_ = is_match;
  return absl::OkStatus();
}

absl::Status SegmentSplitter::Finish() {
  if (!has_pending_) return absl::OkStatus();
  has_pending_ = false;
  return Emit(pending_begin_, pending_end_);
}

absl::Status SplitOnRegex(const Regex& regex, absl::string_view text,
                          SegmentSplitter* splitter) {
  uint32_t prev = 0;
  absl::Status s = regex.ForEachMatch(text, [&](Regex::Match m) {
    absl::Status added;
    if (prev != m.begin) added = splitter->Add(prev, m.begin, false);
    if (added.ok()) added = splitter->Add(m.begin, m.end, true);
    prev = m.end;
    return added;
  });
  if (!s.ok()) return s;
  if (prev != text.size()) {
    s = splitter->Add(prev, static_cast<uint32_t>(text.size()), false);
    if (!s.ok()) return s;
  }
  return splitter->Finish();
}

}  // namespace radixkv::model

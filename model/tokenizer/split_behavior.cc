#include "model/tokenizer/split_behavior.h"

#include <algorithm>
#include <string>

namespace radixkv::model {

absl::StatusOr<SplitBehavior> ParseSplitBehavior(
    const json_fields::Json& obj, absl::string_view key,
    absl::string_view path, std::optional<SplitBehavior> default_value) {
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

void SegmentsFromMatches(const std::vector<Regex::Match>& matches,
                         uint32_t length, std::vector<Segment>* out) {
  uint32_t prev = 0;
  for (const Regex::Match& m : matches) {
    if (prev != m.begin) out->push_back({prev, m.begin, false});
    out->push_back({m.begin, m.end, true});
    prev = m.end;
  }
  if (prev != length) out->push_back({prev, length, false});
}

void ApplySplitBehavior(const std::vector<Segment>& segments,
                        SplitBehavior behavior,
                        std::vector<std::pair<uint32_t, uint32_t>>* kept) {
  const size_t first = kept->size();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) kept->push_back({s.begin, s.end});
      return;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) kept->push_back({s.begin, s.end});
      }
      return;
    case SplitBehavior::kContiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && kept->size() > first) {
          kept->back().second = s.end;
        } else {
          kept->push_back({s.begin, s.end});
        }
        previous_match = s.is_match;
      }
      return;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && kept->size() > first) {
          kept->back().second = s.end;
        } else {
          kept->push_back({s.begin, s.end});
        }
        previous_match = s.is_match;
      }
      return;
    case SplitBehavior::kMergedWithNext:
      // Walks backwards: a match joins the piece after it.
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && kept->size() > first) {
          kept->back().first = it->begin;
        } else {
          kept->push_back({it->begin, it->end});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept->begin() + first, kept->end());
      return;
  }
}

}  // namespace radixkv::model

// The filter tables behind FindFilter (filters.h) and helpers shared by
// the string and sequence filters.
#ifndef RADIXKV_MODEL_CHAT_FILTERS_INTERNAL_H_
#define RADIXKV_MODEL_CHAT_FILTERS_INTERNAL_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/chat/filters.h"
#include "model/chat/value.h"

namespace radixkv::model::chat::filters_internal {

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

// filters_str.cc: text and number filters.
absl::Span<const FilterEntry> StringFilters();
// filters_seq.cc: filters over sequences and mappings.
absl::Span<const FilterEntry> SequenceFilters();

// jinja2's soft_str: a Markup value stays Markup, anything else is str().
absl::StatusOr<Value> SoftStr(Interpreter& interp, const Value& v);

}  // namespace radixkv::model::chat::filters_internal

#endif  // RADIXKV_MODEL_CHAT_FILTERS_INTERNAL_H_

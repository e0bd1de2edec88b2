#include "model/chat/filters.h"

#include "model/chat/filters_internal.h"
#include "model/chat/interpreter.h"

namespace radixkv::model::chat {
namespace {

// jinja2 filters this renderer refuses: random or HTML/text-layout output
// whose exact Python behaviour (pprint, textwrap, urllib) it does not model.
constexpr std::string_view kRefusedFilters[] = {
    "filesizeformat", "groupby", "pprint",   "random", "striptags",
    "urlencode",      "urlize",  "wordwrap", "xmlattr"};

}  // namespace

namespace filters_internal {

absl::StatusOr<Value> SoftStr(Interpreter& interp, const Value& v) {
  if (v.is_string()) return v;
  absl::StatusOr<std::string> s = interp.Str(v);
  if (!s.ok()) return s.status();
  return interp.MakeString(std::move(*s));
}

}  // namespace filters_internal

FilterFn FindFilter(std::string_view name) {
  for (auto table : {filters_internal::StringFilters(),
                     filters_internal::SequenceFilters()}) {
    for (const filters_internal::FilterEntry& entry : table) {
      if (entry.name == name) return entry.fn;
    }
  }
  return nullptr;
}

BuiltinStatus FilterStatus(std::string_view name) {
  if (FindFilter(name) != nullptr) return BuiltinStatus::kSupported;
  for (std::string_view refused : kRefusedFilters) {
    if (refused == name) return BuiltinStatus::kRefused;
  }
  return BuiltinStatus::kUnknown;
}

}  // namespace radixkv::model::chat

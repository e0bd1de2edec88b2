// Filters over sequences and mappings (see filters.h).
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "model/chat/arg_binder.h"
#include "model/chat/filters_internal.h"
#include "model/chat/interpreter.h"
#include "model/chat/operators.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat::filters_internal {
namespace {

using Getter = std::function<absl::StatusOr<Value>(const Value&)>;

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// jinja2's ignore_case postprocessor: strings lowercased.
Value IgnoreCase(const Value& v) {
  if (!v.is_string()) return v;
  return Value::String(PyLower(v.str()));
}

// The lookup path of jinja2's _prepare_attribute_parts.
std::vector<Value> AttributeParts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none()) return parts;
  if (!attribute.is_string()) {
    parts.push_back(attribute);
    return parts;
  }
  for (absl::string_view part : absl::StrSplit(attribute.str(), '.')) {
    bool digits = !part.empty();
    for (char c : part) digits = digits && c >= '0' && c <= '9';
    if (digits && part.size() < 18) {
      parts.push_back(Value::Int(std::stoll(std::string(part))));
    } else {
      parts.push_back(Value::String(std::string(part)));
    }
  }
  return parts;
}

// jinja2's make_attrgetter: item[part] for each part of the path.
Getter MakeAttrGetter(Interpreter& interp, const Value& attribute,
                      bool ignore_case, std::optional<Value> default_value) {
  std::vector<Value> parts = AttributeParts(attribute);
  return [&interp, parts = std::move(parts), ignore_case,
          default_value = std::move(default_value)](
             const Value& item) -> absl::StatusOr<Value> {
    Value v = item;
    for (const Value& part : parts) {
      CHAT_ASSIGN_OR_RETURN(v, interp.GetItem(v, part));
      if (default_value.has_value() && v.is_undefined()) v = *default_value;
    }
    return ignore_case ? IgnoreCase(v) : v;
  };
}

// jinja2's make_multi_attrgetter ("a,b.c"): the list of each path's value.
Getter MakeMultiAttrGetter(Interpreter& interp, const Value& attribute,
                           bool ignore_case) {
  if (!attribute.is_string()) {
    return MakeAttrGetter(interp, attribute, ignore_case, std::nullopt);
  }
  std::vector<Getter> getters;
  for (absl::string_view part : absl::StrSplit(attribute.str(), ',')) {
    getters.push_back(MakeAttrGetter(interp, Value::String(std::string(part)),
                                     ignore_case, std::nullopt));
  }
  return [&interp, getters](const Value& item) -> absl::StatusOr<Value> {
    std::vector<Value> keys;
    for (const Getter& g : getters) {
      CHAT_ASSIGN_OR_RETURN(Value k, g(item));
      keys.push_back(std::move(k));
    }
    return interp.MakeList(std::move(keys));
  };
}

// Stable merge sort of `items` by `keys` with Python's `<` (which may fail).
absl::Status SortByKeys(std::vector<Value>* items, std::vector<Value> keys,
                        bool reverse) {
  std::vector<size_t> order(items->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<size_t> buffer(order.size());
  absl::Status status;
  const auto less = [&](size_t a, size_t b) {
    if (!status.ok()) return false;
    absl::StatusOr<bool> lt = reverse ? PyCompare(Op::kLt, keys[b], keys[a])
                                      : PyCompare(Op::kLt, keys[a], keys[b]);
    if (!lt.ok()) {
      status = lt.status();
      return false;
    }
    return *lt;
  };
  for (size_t width = 1; width < order.size(); width *= 2) {
    for (size_t lo = 0; lo < order.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, order.size());
      const size_t hi = std::min(lo + 2 * width, order.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi)
        buffer[k++] = less(order[j], order[i]) ? order[j++] : order[i++];
      while (i < mid) buffer[k++] = order[i++];
      while (j < hi) buffer[k++] = order[j++];
    }
    order.swap(buffer);
    CHAT_RETURN_IF_ERROR(status);
  }
  std::vector<Value> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back((*items)[i]);
  *items = std::move(sorted);
  return absl::OkStatus();
}

absl::StatusOr<Value> Generator(Interpreter& interp, std::vector<Value> items) {
  return interp.MakeList(std::move(items), SequenceKind::kGenerator);
}

absl::StatusOr<Value> Length(Interpreter&, const Value& input,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("length", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(int64_t n, PyLen(input));
  return Value::Int(n);
}

absl::StatusOr<Value> List(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("list", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  return interp.MakeList(std::move(items));
}

absl::StatusOr<Value> Items(Interpreter& interp, const Value& input,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("items", args, {}).status());
  if (input.is_undefined()) return Generator(interp, {});
  if (!input.is_dict())
    return TypeError("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [k, v] : input.dict().entries())
    items.push_back(Value::Tuple({k, v}));
  return Generator(interp, std::move(items));
}

absl::StatusOr<Value> First(Interpreter& interp, const Value& input,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("first", args, {}).status());
  if (input.is_list() && input.kind() == SequenceKind::kGenerator) {
    ListObject& list = input.list();
    if (list.cursor < list.items.size()) return list.items[list.cursor++];
    return Value::Undefined("No first item, sequence was empty.");
  }
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  if (items.empty())
    return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<std::vector<Value>> Reversed(Interpreter& interp,
                                            const Value& input) {
  if (input.is_list() && input.kind() == SequenceKind::kGenerator) {
    return TypeError("'generator' object is not reversible");
  }
  if (!input.is_undefined() && !input.is_string() && !input.is_list() &&
      !input.is_dict()) {
    return TypeError(Cat("'", PyTypeName(input), "' object is not reversible"));
  }
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  std::reverse(items.begin(), items.end());
  return items;
}

absl::StatusOr<Value> Last(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("last", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, Reversed(interp, input));
  if (items.empty())
    return Value::Undefined("No last item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> Reverse(Interpreter& interp, const Value& input,
                              const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("reverse", args, {}).status());
  if (input.is_string()) {
    std::u32string cps = DecodeUtf8(input.str());
    std::reverse(cps.begin(), cps.end());
    return interp.MakeString(EncodeUtf8(cps), input.is_markup());
  }
  if (input.is_list() && input.kind() == SequenceKind::kGenerator) {
    CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
    std::reverse(items.begin(), items.end());
    return interp.MakeList(std::move(items));
  }
  absl::StatusOr<std::vector<Value>> items = Reversed(interp, input);
  if (!items.ok()) return TypeError("argument must be iterable");
  return Generator(interp, std::move(*items));
}

absl::StatusOr<Value> Join(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("join", args,
                                         {{"d", Value::String("")},
                                          {"attribute", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  CHAT_ASSIGN_OR_RETURN(std::string sep, interp.Str(a[0]));
  const Getter getter = a[1].is_none()
                            ? Getter()
                            : MakeAttrGetter(interp, a[1], false, std::nullopt);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (getter) {
      CHAT_ASSIGN_OR_RETURN(item, getter(item));
    }
    CHAT_ASSIGN_OR_RETURN(std::string text, interp.Str(item));
    if (i > 0) out += sep;
    out += text;
    if (out.size() > interp.limits().max_string_bytes) {
      return absl::ResourceExhaustedError("join result exceeds the limits");
    }
  }
  return interp.MakeString(std::move(out));
}

absl::StatusOr<Value> Map(Interpreter& interp, const Value& input,
                          const CallArgs& args) {
  if (!Truthy(input)) return Generator(interp, {});
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  Getter fn;
  if (args.positional.empty() && !args.keyword.empty()) {
    CHAT_ASSIGN_OR_RETURN(
        auto a,
        BindArgs("map", args, {{"attribute", {}}, {"default", Value::None()}}));
    std::optional<Value> default_value;
    if (!a[1].is_none()) default_value = a[1];
    fn = MakeAttrGetter(interp, a[0], false, default_value);
  } else {
    if (args.positional.empty())
      return TypeError("map requires a filter argument");
    CHAT_ASSIGN_OR_RETURN(std::string name, interp.Str(args.positional[0]));
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    fn = [&interp, name, rest](const Value& item) {
      return interp.ApplyFilter(name, item, rest);
    };
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    CHAT_ASSIGN_OR_RETURN(Value v, fn(item));
    out.push_back(std::move(v));
  }
  return Generator(interp, std::move(out));
}

// select, reject, selectattr, rejectattr.
template <bool kSelect, bool kAttr>
absl::StatusOr<Value> SelectOrReject(Interpreter& interp, const Value& input,
                                     const CallArgs& args) {
  if (!Truthy(input)) return Generator(interp, {});
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  size_t offset = 0;
  Getter transform;
  if (kAttr) {
    if (args.positional.empty())
      return TypeError("Missing parameter for attribute name");
    transform = MakeAttrGetter(interp, args.positional[0], false, std::nullopt);
    offset = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > offset) {
    CHAT_ASSIGN_OR_RETURN(test, interp.Str(args.positional[offset]));
    test_args.positional.assign(args.positional.begin() + offset + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (transform) {
      CHAT_ASSIGN_OR_RETURN(subject, transform(item));
    }
    bool passed;
    if (test.has_value()) {
      CHAT_ASSIGN_OR_RETURN(passed,
                            interp.ApplyTest(*test, subject, test_args));
    } else {
      passed = Truthy(subject);
    }
    if (passed == kSelect) out.push_back(item);
  }
  return Generator(interp, std::move(out));
}

absl::StatusOr<Value> Sort(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("sort", args,
                                 {{"reverse", Value::Bool(false)},
                                  {"case_sensitive", Value::Bool(false)},
                                  {"attribute", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  const Getter key = MakeMultiAttrGetter(interp, a[2], !Truthy(a[1]));
  std::vector<Value> keys;
  for (const Value& item : items) {
    CHAT_ASSIGN_OR_RETURN(Value k, key(item));
    keys.push_back(std::move(k));
  }
  CHAT_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), Truthy(a[0])));
  return interp.MakeList(std::move(items));
}

absl::StatusOr<Value> DictSort(Interpreter& interp, const Value& input,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("dictsort", args,
                                 {{"case_sensitive", Value::Bool(false)},
                                  {"by", Value::String("key")},
                                  {"reverse", Value::Bool(false)}}));
  if (!a[1].is_string() || (a[1].str() != "key" && a[1].str() != "value")) {
    return TypeError("You can only sort by either \"key\" or \"value\"");
  }
  if (!input.is_dict()) {
    return TypeError(
        Cat("'", PyTypeName(input), "' object has no attribute 'items'"));
  }
  const size_t pos = a[1].str() == "key" ? 0 : 1;
  std::vector<Value> items;
  std::vector<Value> keys;
  for (const auto& [k, v] : input.dict().entries()) {
    items.push_back(Value::Tuple({k, v}));
    const Value& sort_key = pos == 0 ? k : v;
    keys.push_back(Truthy(a[0]) ? sort_key : IgnoreCase(sort_key));
  }
  CHAT_RETURN_IF_ERROR(SortByKeys(&items, std::move(keys), Truthy(a[2])));
  return interp.MakeList(std::move(items));
}

absl::StatusOr<Value> Unique(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("unique", args,
                                 {{"case_sensitive", Value::Bool(false)},
                                  {"attribute", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  const Getter key = MakeAttrGetter(interp, a[1], !Truthy(a[0]), std::nullopt);
  DictObject seen;
  std::vector<Value> out;
  for (const Value& item : items) {
    CHAT_ASSIGN_OR_RETURN(Value k, key(item));
    if (!IsHashable(k)) {
      return TypeError(Cat("unhashable type: '", PyTypeName(k), "'"));
    }
    if (seen.Find(k) != nullptr) continue;
    CHAT_RETURN_IF_ERROR(seen.Set(k, Value::None()));
    out.push_back(item);
  }
  return Generator(interp, std::move(out));
}

template <bool kMax>
absl::StatusOr<Value> MinMax(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs(kMax ? "max" : "min", args,
                                 {{"case_sensitive", Value::Bool(false)},
                                  {"attribute", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  if (items.empty())
    return Value::Undefined("No aggregated item, sequence was empty.");
  const Getter key = MakeAttrGetter(interp, a[1], !Truthy(a[0]), std::nullopt);
  size_t best = 0;
  CHAT_ASSIGN_OR_RETURN(Value best_key, key(items[0]));
  for (size_t i = 1; i < items.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(Value k, key(items[i]));
    CHAT_ASSIGN_OR_RETURN(bool better, kMax ? PyCompare(Op::kGt, k, best_key)
                                            : PyCompare(Op::kLt, k, best_key));
    if (better) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

absl::StatusOr<Value> Sum(Interpreter& interp, const Value& input,
                          const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("sum", args,
                                         {{"attribute", Value::None()},
                                          {"start", Value::Int(0)}}));
  if (a[1].is_string()) {
    return TypeError("sum() can't sum strings [use ''.join(seq) instead]");
  }
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  const Getter getter = a[0].is_none()
                            ? Getter()
                            : MakeAttrGetter(interp, a[0], false, std::nullopt);
  Value total = a[1];
  for (const Value& item : items) {
    Value v = item;
    if (getter) {
      CHAT_ASSIGN_OR_RETURN(v, getter(item));
    }
    CHAT_ASSIGN_OR_RETURN(total, PyBinary(interp, Op::kAdd, total, v));
  }
  return total;
}

absl::StatusOr<Value> Batch(Interpreter& interp, const Value& input,
                            const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("batch", args,
                       {{"linecount", {}}, {"fill_with", Value::None()}}));
  if (!a[0].is_integral())
    return TypeError("batch linecount must be an integer");
  const int64_t linecount = a[0].int_value();
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, input));
  std::vector<Value> out;
  std::vector<Value> tmp;
  for (const Value& item : items) {
    if (static_cast<int64_t>(tmp.size()) == linecount) {
      CHAT_ASSIGN_OR_RETURN(Value chunk, interp.MakeList(std::move(tmp)));
      out.push_back(std::move(chunk));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!a[1].is_none()) {
      while (static_cast<int64_t>(tmp.size()) < linecount) tmp.push_back(a[1]);
    }
    CHAT_ASSIGN_OR_RETURN(Value chunk, interp.MakeList(std::move(tmp)));
    out.push_back(std::move(chunk));
  }
  return Generator(interp, std::move(out));
}

absl::StatusOr<Value> Slice(Interpreter& interp, const Value& input,
                            const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("slice", args, {{"slices", {}}, {"fill_with", Value::None()}}));
  if (!a[0].is_integral() || a[0].int_value() <= 0 ||
      a[0].int_value() > 100000) {
    return TypeError("slice count must be a positive integer");
  }
  const int64_t slices = a[0].int_value();
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> seq, PyIterate(interp, input));
  const int64_t length = static_cast<int64_t>(seq.size());
  const int64_t per_slice = length / slices;
  const int64_t with_extra = length % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t n = 0; n < slices; ++n) {
    const int64_t start = offset + n * per_slice;
    if (n < with_extra) ++offset;
    const int64_t end = offset + (n + 1) * per_slice;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (!a[1].is_none() && n >= with_extra) tmp.push_back(a[1]);
    CHAT_ASSIGN_OR_RETURN(Value chunk, interp.MakeList(std::move(tmp)));
    out.push_back(std::move(chunk));
  }
  return Generator(interp, std::move(out));
}

constexpr FilterEntry kSequenceFilters[] = {
    {"batch", Batch},
    {"count", Length},
    {"dictsort", DictSort},
    {"first", First},
    {"items", Items},
    {"join", Join},
    {"last", Last},
    {"length", Length},
    {"list", List},
    {"map", Map},
    {"max", MinMax<true>},
    {"min", MinMax<false>},
    {"reject", SelectOrReject<false, false>},
    {"rejectattr", SelectOrReject<false, true>},
    {"reverse", Reverse},
    {"select", SelectOrReject<true, false>},
    {"selectattr", SelectOrReject<true, true>},
    {"slice", Slice},
    {"sort", Sort},
    {"sum", Sum},
    {"unique", Unique},
};

}  // namespace

absl::Span<const FilterEntry> SequenceFilters() { return kSequenceFilters; }

}  // namespace radixkv::model::chat::filters_internal

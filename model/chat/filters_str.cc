// Text and number filters (see filters.h).
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "model/chat/arg_binder.h"
#include "model/chat/filters_internal.h"
#include "model/chat/interpreter.h"
#include "model/chat/json_dumps.h"
#include "model/chat/methods.h"
#include "model/chat/operators.h"
#include "model/chat/py_format.h"
#include "model/chat/py_str.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat::filters_internal {
namespace {

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// A filter over soft_str(input) with no arguments.
template <std::string (*F)(std::string_view)>
absl::StatusOr<Value> TextFilter(Interpreter& interp, const Value& input,
                                 const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("filter", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(Value s, SoftStr(interp, input));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(s.str().size()));
  return interp.MakeString(F(s.str()), s.is_markup());
}

// jinja2's do_title: words start after runs of [-\s({\[<].
std::string JinjaTitle(std::string_view s) {
  const std::u32string cps = DecodeUtf8(s);
  const auto is_separator = [](char32_t c) {
    return PyIsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' ||
           c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool separator = is_separator(cps[i]);
    while (j < cps.size() && is_separator(cps[j]) == separator) ++j;
    const std::u32string_view item = std::u32string_view(cps).substr(i, j - i);
    if (separator) {
      out += EncodeUtf8(item);
    } else {
      out += PyUpper(EncodeUtf8(item.substr(0, 1)));
      out += PyLower(EncodeUtf8(item.substr(1)));
    }
    i = j;
  }
  return out;
}

absl::StatusOr<Value> Title(Interpreter& interp, const Value& input,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("title", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(Value s, SoftStr(interp, input));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(s.str().size()));
  return interp.MakeString(JinjaTitle(s.str()));
}

absl::StatusOr<Value> Center(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("center", args, {{"width", Value::Int(80)}}));
  CHAT_ASSIGN_OR_RETURN(Value s, SoftStr(interp, input));
  if (!a[0].is_integral()) return TypeError("integer argument expected");
  if (a[0].int_value() >
      static_cast<int64_t>(interp.limits().max_string_bytes)) {
    return absl::ResourceExhaustedError("padding exceeds the limits");
  }
  return interp.MakeString(PyPad(s.str(), a[0].int_value(), " ", '^'),
                           s.is_markup());
}

absl::StatusOr<Value> Default(Interpreter&, const Value& input,
                              const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("default", args,
                                         {{"default_value", Value::String("")},
                                          {"boolean", Value::Bool(false)}}));
  if (input.is_undefined() || (Truthy(a[1]) && !Truthy(input))) return a[0];
  return input;
}

absl::StatusOr<Value> Escape(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("escape", args, {}).status());
  if (input.is_markup()) return input;
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(input));
  return interp.MakeString(HtmlEscape(s), /*markup=*/true);
}

absl::StatusOr<Value> ForceEscape(Interpreter& interp, const Value& input,
                                  const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("forceescape", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(input));
  return interp.MakeString(HtmlEscape(s), /*markup=*/true);
}

absl::StatusOr<Value> Safe(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("safe", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(input));
  return interp.MakeString(std::move(s), /*markup=*/true);
}

absl::StatusOr<Value> String(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("string", args, {}).status());
  return SoftStr(interp, input);
}

// Python's float(str): whitespace, sign, digits with single underscores, a
// fraction, an exponent, or inf/infinity/nan.
std::optional<double> ParsePyFloat(std::string_view text) {
  const std::string s = PyStrip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool between = i > 0 && i + 1 < s.size() &&
                           std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                           std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    if (static_cast<unsigned char>(s[i]) >= 0x80) return std::nullopt;
    clean.push_back(s[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = PyLower(clean);
  const size_t sign = lower[0] == '+' || lower[0] == '-' ? 1 : 0;
  const std::string word = lower.substr(sign);
  if (word == "inf" || word == "infinity" || word == "nan") {
    const double v = word == "nan" ? std::nan("") : HUGE_VAL;
    return lower[0] == '-' ? -v : v;
  }
  for (char c : word) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' &&
        c != '+' && c != '-') {
      return std::nullopt;
    }
  }
  if (word.empty() || word[0] == 'e' || word[0] == '+' || word[0] == '-') {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Python's int(str, base) for bases 2..36; nullopt when invalid. Values
// beyond 64 bits are reported through *overflow.
std::optional<int64_t> ParsePyInt(std::string_view text, int base,
                                  bool* overflow) {
  std::string s = PyStrip(text, std::nullopt, true, true);
  bool negative = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char x = s[i + 1] | 0x20;
    if ((x == 'x' && base == 16) || (x == 'o' && base == 8) ||
        (x == 'b' && base == 2)) {
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (i >= s.size()) return std::nullopt;
  unsigned __int128 value = 0;
  bool previous_digit = false;
  for (; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (!previous_digit || i + 1 >= s.size()) return std::nullopt;
      previous_digit = false;
      continue;
    }
    const char c = s[i] | 0x20;
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'z')
      d = c - 'a' + 10;
    if (d < 0 || d >= base) return std::nullopt;
    value = value * base + d;
    if (value >
        static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max()) +
            1) {
      *overflow = true;
      return std::nullopt;
    }
    previous_digit = true;
  }
  if (!negative && value > static_cast<unsigned __int128>(
                               std::numeric_limits<int64_t>::max())) {
    *overflow = true;
    return std::nullopt;
  }
  return negative ? -static_cast<int64_t>(value - 1) - 1
                  : static_cast<int64_t>(value);
}

absl::StatusOr<Value> Float(Interpreter&, const Value& input,
                            const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("float", args, {{"default", Value::Float(0.0)}}));
  if (input.is_undefined()) return UndefinedError(input);
  if (input.is_number()) return Value::Float(input.float_value());
  if (input.is_string()) {
    if (std::optional<double> v = ParsePyFloat(input.str()))
      return Value::Float(*v);
  }
  return a[0];
}

absl::StatusOr<Value> Int(Interpreter&, const Value& input,
                          const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("int", args,
                       {{"default", Value::Int(0)}, {"base", Value::Int(10)}}));
  if (input.is_undefined()) return UndefinedError(input);
  const auto from_float = [&](double d) -> absl::StatusOr<Value> {
    if (std::isnan(d)) return a[0];
    if (std::isinf(d))
      return TypeError("cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.2e18) {
      return TypeError("integer beyond 64 bits is not supported");
    }
    return Value::Int(static_cast<int64_t>(d));
  };
  if (input.is_integral()) return Value::Int(input.int_value());
  if (input.is_float()) return from_float(input.float_value());
  if (!input.is_string()) return a[0];
  const int base = a[1].is_integral() ? static_cast<int>(a[1].int_value()) : 10;
  if (base >= 2 && base <= 36) {
    bool overflow = false;
    if (std::optional<int64_t> v = ParsePyInt(input.str(), base, &overflow)) {
      return Value::Int(*v);
    }
    if (overflow) return TypeError("integer beyond 64 bits is not supported");
  }
  if (std::optional<double> d = ParsePyFloat(input.str()))
    return from_float(*d);
  return a[0];
}

absl::StatusOr<Value> Format(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return TypeError(
        "can't handle positional and keyword arguments at the same time");
  }
  CHAT_ASSIGN_OR_RETURN(Value fmt, SoftStr(interp, input));
  Value params = Value::Tuple(args.positional);
  if (!args.keyword.empty()) {
    params = Value::NewDict();
    for (const auto& [k, v] : args.keyword) params.dict().SetString(k, v);
  }
  CHAT_ASSIGN_OR_RETURN(std::string s,
                        PyPercentFormat(interp, fmt.str(), params));
  return interp.MakeString(std::move(s), fmt.is_markup());
}

absl::StatusOr<Value> Indent(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("indent", args,
                                         {{"width", Value::Int(4)},
                                          {"first", Value::Bool(false)},
                                          {"blank", Value::Bool(false)}}));
  if (input.is_undefined()) return UndefinedError(input);
  if (!input.is_string()) {
    return TypeError(Cat("unsupported operand type(s) for +=: '",
                         PyTypeName(input), "' and 'str'"));
  }
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].str();
  } else if (a[0].is_integral()) {
    indention.assign(
        std::max<int64_t>(0, std::min<int64_t>(a[0].int_value(), 4096)), ' ');
  } else {
    return TypeError("can't multiply sequence by non-int of type 'float'");
  }
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(input.str().size() * 2));
  const std::vector<std::string> lines =
      PySplitLines(input.str() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indent_line =
        i == 0 ? Truthy(a[1]) : (Truthy(a[2]) || !lines[i].empty());
    if (indent_line) out += indention;
    out += lines[i];
    if (out.size() > interp.limits().max_string_bytes) {
      return absl::ResourceExhaustedError("indent result exceeds the limits");
    }
  }
  return interp.MakeString(std::move(out), input.is_markup());
}

absl::StatusOr<Value> Replace(Interpreter& interp, const Value& input,
                              const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("replace", args,
                       {{"old", {}}, {"new", {}}, {"count", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(input));
  CHAT_ASSIGN_OR_RETURN(std::string old_text, interp.Str(a[0]));
  CHAT_ASSIGN_OR_RETURN(std::string new_text, interp.Str(a[1]));
  int64_t count = -1;
  if (!a[2].is_none()) {
    if (!a[2].is_integral()) return TypeError("'count' must be an integer");
    count = a[2].int_value();
  }
  Value receiver = Value::String(std::move(s));
  CHAT_ASSIGN_OR_RETURN(std::optional<Value> method,
                        LookupMethod(receiver, "replace"));
  CallArgs call;
  call.positional = {Value::String(std::move(old_text)),
                     Value::String(std::move(new_text)), Value::Int(count)};
  return interp.CallValue(*method, std::move(call));
}

absl::StatusOr<Value> Trim(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("trim", args, {{"chars", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(Value s, SoftStr(interp, input));
  std::optional<std::string> chars;
  if (!a[0].is_none()) {
    if (!a[0].is_string()) return TypeError("strip arg must be None or str");
    chars = a[0].str();
  }
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(s.str().size()));
  return interp.MakeString(PyStrip(s.str(), chars, true, true), s.is_markup());
}

absl::StatusOr<Value> Truncate(Interpreter& interp, const Value& input,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("truncate", args,
                                         {{"length", Value::Int(255)},
                                          {"killwords", Value::Bool(false)},
                                          {"end", Value::String("...")},
                                          {"leeway", Value::None()}}));
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(input));
  if (!a[0].is_integral() || !a[2].is_string() ||
      !(a[3].is_none() || a[3].is_integral())) {
    return TypeError(
        "truncate() expects (int length, bool, str end, int leeway)");
  }
  const int64_t length = a[0].int_value();
  const int64_t leeway = a[3].is_none() ? 5 : a[3].int_value();
  const int64_t end_len = static_cast<int64_t>(CodePointCount(a[2].str()));
  if (length < end_len) {
    return TypeError(Cat("expected length >= ", end_len, ", got ", length));
  }
  if (leeway < 0) return TypeError(Cat("expected leeway >= 0, got ", leeway));
  if (static_cast<int64_t>(CodePointCount(s)) <= length + leeway) {
    return interp.MakeString(std::move(s));
  }
  std::string head = PySubstring(s, 0, length - end_len);
  if (!Truthy(a[1])) head = PyRSplit(head, std::string(" "), 1)[0];
  return interp.MakeString(head + a[2].str());
}

absl::StatusOr<Value> WordCount(Interpreter& interp, const Value& input,
                                const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("wordcount", args, {}).status());
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(input));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(s.size()));
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(s)) {
    const bool word = PyIsWordChar(c);
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::Int(words);
}

absl::StatusOr<Value> Abs(Interpreter&, const Value& input,
                          const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("abs", args, {}).status());
  if (input.is_float()) return Value::Float(std::fabs(input.float_value()));
  if (input.is_integral()) {
    if (input.int_value() == std::numeric_limits<int64_t>::min()) {
      return TypeError("integer overflow: only 64-bit integers are supported");
    }
    return Value::Int(std::llabs(input.int_value()));
  }
  if (input.is_undefined()) return UndefinedError(input);
  return TypeError(
      Cat("bad operand type for abs(): '", PyTypeName(input), "'"));
}

// Python's round(i, n) for an int and n < 0: half to even at 10**-n.
int64_t RoundInt(int64_t x, int64_t n) {
  if (n < -18) return 0;
  int64_t scale = 1;
  for (int64_t i = 0; i < -n; ++i) scale *= 10;
  int64_t q = x / scale;
  int64_t r = x % scale;
  if (r < 0) {
    r += scale;
    --q;
  }
  if (2 * static_cast<__int128>(r) > scale ||
      (2 * static_cast<__int128>(r) == scale && (q & 1))) {
    ++q;
  }
  return q * scale;
}

// Python's round(x, n) for a float: correctly rounded, half to even.
double RoundFloat(double x, int64_t n) {
  if (!std::isfinite(x) || n > 300) return x;
  if (n >= 0) {
    char buf[1024];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(n), x);
    return std::strtod(buf, nullptr);
  }
  if (n < -308) return std::copysign(0.0, x);
  const double scale = std::pow(10.0, static_cast<double>(-n));
  const double y = x / scale;
  double z = std::nearbyint(y);  // half to even
  return z * scale;
}

absl::StatusOr<Value> Round(Interpreter&, const Value& input,
                            const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("round", args,
                                 {{"precision", Value::Int(0)},
                                  {"method", Value::String("common")}}));
  const std::string method = a[1].is_string() ? a[1].str() : "";
  if (method != "common" && method != "ceil" && method != "floor") {
    return TypeError("method must be common, ceil or floor");
  }
  if (input.is_undefined()) return UndefinedError(input);
  if (!input.is_number()) {
    return TypeError(
        Cat("type ", PyTypeName(input), " doesn't define __round__ method"));
  }
  if (!a[0].is_integral()) return TypeError("precision must be an integer");
  const int64_t precision = a[0].int_value();
  if (method == "common") {
    if (input.is_integral()) {
      return Value::Int(precision >= 0
                            ? input.int_value()
                            : RoundInt(input.int_value(), precision));
    }
    return Value::Float(RoundFloat(input.float_value(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = input.float_value() * scale;
  return Value::Float(
      (method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

absl::StatusOr<Value> ToJson(Interpreter& interp, const Value& input,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("tojson", args,
                                         {{"ensure_ascii", Value::Bool(false)},
                                          {"indent", Value::None()},
                                          {"separators", Value::None()},
                                          {"sort_keys", Value::Bool(false)}}));
  JsonDumpsOptions options;
  options.ensure_ascii = Truthy(a[0]);
  options.sort_keys = Truthy(a[3]);
  if (a[1].is_string()) {
    options.indent = a[1].str();
  } else if (a[1].is_integral()) {
    options.indent = std::string(
        std::max<int64_t>(0, std::min<int64_t>(a[1].int_value(), 4096)), ' ');
  } else if (!a[1].is_none()) {
    return TypeError("tojson indent must be None, an int or a str");
  }
  if (options.indent.has_value()) options.item_separator.assign(1, ',');
  if (!a[2].is_none()) {
    CHAT_ASSIGN_OR_RETURN(std::vector<Value> seps, PyIterate(interp, a[2]));
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      return TypeError("tojson separators must be two strings");
    }
    options.item_separator = seps[0].str();
    options.key_separator = seps[1].str();
  }
  CHAT_ASSIGN_OR_RETURN(
      std::string json,
      PyJsonDumps(input, options, interp.limits().max_string_bytes));
  return interp.MakeString(std::move(json));
}

absl::StatusOr<Value> Attr(Interpreter& interp, const Value& input,
                           const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("attr", args, {{"name", {}}}));
  if (!a[0].is_string()) return TypeError("attribute name must be string");
  if (input.is_undefined()) return UndefinedError(input);
  if (input.is_object()) return input.object().GetAttr(interp, a[0].str());
  CHAT_ASSIGN_OR_RETURN(std::optional<Value> method,
                        LookupMethod(input, a[0].str()));
  if (method.has_value()) return *method;
  return Value::Undefined(Cat("'", PyTypeName(input),
                              " object' has no attribute '", a[0].str(), "'"));
}

constexpr FilterEntry kStringFilters[] = {
    {"abs", Abs},
    {"attr", Attr},
    {"capitalize", TextFilter<PyCapitalize>},
    {"center", Center},
    {"d", Default},
    {"default", Default},
    {"e", Escape},
    {"escape", Escape},
    {"float", Float},
    {"forceescape", ForceEscape},
    {"format", Format},
    {"indent", Indent},
    {"int", Int},
    {"lower", TextFilter<PyLower>},
    {"replace", Replace},
    {"round", Round},
    {"safe", Safe},
    {"string", String},
    {"title", Title},
    {"tojson", ToJson},
    {"trim", Trim},
    {"truncate", Truncate},
    {"upper", TextFilter<PyUpper>},
    {"wordcount", WordCount},
};

}  // namespace

absl::Span<const FilterEntry> StringFilters() { return kStringFilters; }

}  // namespace radixkv::model::chat::filters_internal

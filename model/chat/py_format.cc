#include "model/chat/py_format.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "model/chat/interpreter.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

struct Spec {
  bool left = false;   // '-'
  bool plus = false;   // '+'
  bool space = false;  // ' '
  bool alt = false;    // '#'
  bool zero = false;   // '0'
  int width = 0;
  int precision = -1;
  char conversion = 's';
};

absl::Status FormatError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// Argument source: positional items or a mapping.
class Args {
 public:
  explicit Args(const Value& args) : args_(args) {
    if (args.is_list() && args.kind() == SequenceKind::kTuple) {
      items_ = &args.list().items;
    } else if (args.is_dict()) {
      mapping_ = true;
    }
  }

  absl::StatusOr<Value> Next() {
    if (items_ == nullptr) {
      if (single_used_)
        return FormatError("not enough arguments for format string");
      single_used_ = true;
      return args_;
    }
    if (index_ >= items_->size()) {
      return FormatError("not enough arguments for format string");
    }
    return (*items_)[index_++];
  }

  absl::StatusOr<Value> Key(std::string_view key) const {
    if (!mapping_) return FormatError("format requires a mapping");
    const Value* v = args_.dict().FindString(key);
    if (v == nullptr) return FormatError(Cat("KeyError: '", key, "'"));
    return *v;
  }

  absl::Status Finish() const {
    const bool leftover = items_ != nullptr ? index_ < items_->size()
                                            : (!single_used_ && !mapping_);
    if (leftover) {
      return FormatError(
          "not all arguments converted during string formatting");
    }
    return absl::OkStatus();
  }

 private:
  const Value& args_;
  const std::vector<Value>* items_ = nullptr;
  bool mapping_ = false;
  size_t index_ = 0;
  bool single_used_ = false;
};

std::string Pad(std::string body, const Spec& spec) {
  const int len = static_cast<int>(CodePointCount(body));
  if (len >= spec.width) return body;
  const std::string fill(spec.width - len, ' ');
  return spec.left ? body + fill : fill + body;
}

std::string FormatInteger(int64_t v, const Spec& spec) {
  const int base = spec.conversion == 'x' || spec.conversion == 'X'
                       ? 16
                       : (spec.conversion == 'o' ? 8 : 10);
  uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : v;
  std::string digits;
  const char* alphabet =
      spec.conversion == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
  do {
    digits.insert(digits.begin(), alphabet[magnitude % base]);
    magnitude /= base;
  } while (magnitude != 0);
  if (spec.precision > static_cast<int>(digits.size())) {
    digits.insert(0, spec.precision - digits.size(), '0');
  }
  std::string prefix =
      v < 0 ? "-" : (spec.plus ? "+" : (spec.space ? " " : ""));
  if (spec.alt && base != 10) {
    prefix += base == 16 ? (spec.conversion == 'X' ? "0X" : "0x") : "0o";
  }
  if (spec.zero && !spec.left) {
    const int pad =
        spec.width - static_cast<int>(prefix.size() + digits.size());
    if (pad > 0) digits.insert(0, pad, '0');
  }
  return Pad(prefix + digits, spec);
}

std::string FormatFloat(double v, const Spec& spec) {
  std::string fmt = "%";
  if (spec.left) fmt += '-';
  if (spec.plus) fmt += '+';
  if (spec.space) fmt += ' ';
  if (spec.alt) fmt += '#';
  if (spec.zero) fmt += '0';
  CatTo(&fmt, spec.width, ".", spec.precision < 0 ? 6 : spec.precision);
  fmt += spec.conversion;
  const int n = std::snprintf(nullptr, 0, fmt.c_str(), v);
  std::string out(n, '\0');
  std::snprintf(out.data(), n + 1, fmt.c_str(), v);
  return out;
}

absl::StatusOr<std::string> Convert(Interpreter& interp, const Spec& spec,
                                    const Value& arg) {
  switch (spec.conversion) {
    case 's':
    case 'r': {
      CHAT_ASSIGN_OR_RETURN(std::string text, spec.conversion == 's'
                                                  ? interp.Str(arg)
                                                  : interp.Repr(arg));
      if (spec.precision >= 0) {
        std::u32string cps = DecodeUtf8(text);
        if (static_cast<int>(cps.size()) > spec.precision) {
          cps.resize(spec.precision);
          text = EncodeUtf8(cps);
        }
      }
      return Pad(std::move(text), spec);
    }
    case 'd':
    case 'i':
    case 'u':
      if (arg.is_integral()) return FormatInteger(arg.int_value(), spec);
      if (arg.is_float() && std::isfinite(arg.float_value()) &&
          std::fabs(arg.float_value()) < 9.2e18) {
        return FormatInteger(static_cast<int64_t>(arg.float_value()), spec);
      }
      return FormatError(Cat("%", std::string(1, spec.conversion),
                             " format: a real number is required, not ",
                             PyTypeName(arg)));
    case 'x':
    case 'X':
    case 'o':
      if (arg.is_integral()) return FormatInteger(arg.int_value(), spec);
      return FormatError(Cat("%", std::string(1, spec.conversion),
                             " format: an integer is required, not ",
                             PyTypeName(arg)));
    case 'c':
      if (arg.is_string() && CodePointCount(arg.str()) == 1) {
        return Pad(arg.str(), spec);
      }
      if (arg.is_integral() && arg.int_value() >= 0 &&
          arg.int_value() <= 0x10FFFF &&
          (arg.int_value() < 0xD800 || arg.int_value() > 0xDFFF)) {
        std::string s;
        AppendUtf8(static_cast<char32_t>(arg.int_value()), &s);
        return Pad(std::move(s), spec);
      }
      return FormatError("%c requires int or char");
    default:
      if (arg.is_number()) return FormatFloat(arg.float_value(), spec);
      return FormatError(Cat("must be real number, not ", PyTypeName(arg)));
  }
}

// Reads a width or precision: digits, or `*` taken from the arguments.
absl::StatusOr<int> ReadCount(std::string_view format, size_t* i, Args& args) {
  if (*i < format.size() && format[*i] == '*') {
    ++*i;
    CHAT_ASSIGN_OR_RETURN(Value v, args.Next());
    if (!v.is_integral()) return FormatError("* wants int");
    return static_cast<int>(std::min<int64_t>(v.int_value(), 1 << 20));
  }
  int n = 0;
  while (*i < format.size() && format[*i] >= '0' && format[*i] <= '9') {
    n = std::min(n * 10 + (format[*i] - '0'), 1 << 20);
    ++*i;
  }
  return n;
}

// Parses one conversion after '%' and appends its text.
absl::Status FormatOne(Interpreter& interp, std::string_view format, size_t* i,
                       Args& args, std::string* out) {
  std::optional<Value> keyed;
  if (*i < format.size() && format[*i] == '(') {
    const size_t close = format.find(')', *i);
    if (close == std::string_view::npos)
      return FormatError("incomplete format key");
    CHAT_ASSIGN_OR_RETURN(keyed,
                          args.Key(format.substr(*i + 1, close - *i - 1)));
    *i = close + 1;
  }
  Spec spec;
  for (; *i < format.size(); ++*i) {
    const char f = format[*i];
    if (f == '-')
      spec.left = true;
    else if (f == '+')
      spec.plus = true;
    else if (f == ' ')
      spec.space = true;
    else if (f == '#')
      spec.alt = true;
    else if (f == '0')
      spec.zero = true;
    else
      break;
  }
  CHAT_ASSIGN_OR_RETURN(spec.width, ReadCount(format, i, args));
  if (*i < format.size() && format[*i] == '.') {
    ++*i;
    CHAT_ASSIGN_OR_RETURN(spec.precision, ReadCount(format, i, args));
  }
  while (*i < format.size() &&
         (format[*i] == 'h' || format[*i] == 'l' || format[*i] == 'L')) {
    ++*i;
  }
  if (*i >= format.size()) return FormatError("incomplete format");
  spec.conversion = format[(*i)++];
  if (spec.conversion == '%') {
    out->push_back('%');
    return absl::OkStatus();
  }
  if (std::string_view("diuxXocsreEfFgG").find(spec.conversion) ==
      std::string_view::npos) {
    return FormatError(Cat("unsupported format character '",
                           std::string(1, spec.conversion), "'"));
  }
  Value arg;
  if (keyed.has_value()) {
    arg = *keyed;
  } else {
    CHAT_ASSIGN_OR_RETURN(arg, args.Next());
  }
  CHAT_ASSIGN_OR_RETURN(std::string text, Convert(interp, spec, arg));
  out->append(text);
  if (out->size() > interp.limits().max_string_bytes) {
    return absl::ResourceExhaustedError("formatted string exceeds the limits");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PyPercentFormat(Interpreter& interp,
                                            std::string_view format,
                                            const Value& args) {
  Args source(args);
  std::string out;
  size_t i = 0;
  while (i < format.size()) {
    const size_t percent = format.find('%', i);
    if (percent == std::string_view::npos) {
      out.append(format.substr(i));
      break;
    }
    out.append(format.substr(i, percent - i));
    i = percent + 1;
    CHAT_RETURN_IF_ERROR(FormatOne(interp, format, &i, source, &out));
  }
  CHAT_RETURN_IF_ERROR(source.Finish());
  return out;
}

}  // namespace radixkv::model::chat

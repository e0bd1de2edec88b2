#include "model/chat/builtins.h"

#include <ctime>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "model/chat/arg_binder.h"
#include "model/chat/interpreter.h"
#include "model/chat/operators.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/value_repr.h"

namespace radixkv::model::chat {
namespace {

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::StatusOr<int64_t> RangeArg(const Value& v) {
  if (!v.is_integral()) {
    return TypeError(Cat("'", PyTypeName(v),
                         "' object cannot be interpreted as an integer"));
  }
  return v.int_value();
}

absl::StatusOr<Value> Range(Interpreter& interp, CallArgs args) {
  if (!args.keyword.empty())
    return TypeError("range() takes no keyword arguments");
  const size_t n = args.positional.size();
  if (n < 1 || n > 3) {
    return TypeError(Cat("range expected 1 to 3 arguments, got ", n));
  }
  int64_t start = 0, stop = 0, step = 1;
  if (n == 1) {
    CHAT_ASSIGN_OR_RETURN(stop, RangeArg(args.positional[0]));
  } else {
    CHAT_ASSIGN_OR_RETURN(start, RangeArg(args.positional[0]));
    CHAT_ASSIGN_OR_RETURN(stop, RangeArg(args.positional[1]));
    if (n == 3) {
      CHAT_ASSIGN_OR_RETURN(step, RangeArg(args.positional[2]));
    }
  }
  if (step == 0) return TypeError("range() arg 3 must not be zero");
  const __int128 span = static_cast<__int128>(stop) - start;
  __int128 count = 0;
  if ((step > 0 && span > 0) || (step < 0 && span < 0)) {
    count = (span + (step > 0 ? step - 1 : step + 1)) / step;
  }
  if (count > kMaxRange) {
    return TypeError(
        Cat("Range too big. The sandbox blocks ranges larger than MAX_RANGE (",
            kMaxRange, ")."));
  }
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    items.push_back(Value::Int(start + i * step));
  CHAT_ASSIGN_OR_RETURN(
      Value range, interp.MakeList(std::move(items), SequenceKind::kRange));
  range.list().range_start = start;
  range.list().range_stop = stop;
  range.list().range_step = step;
  return range;
}

// dict(*args, **kwargs) into `out`.
absl::Status FillDict(Interpreter& interp, std::string_view function,
                      const CallArgs& args, DictObject* out) {
  if (args.positional.size() > 1) {
    return TypeError(Cat(function, " expected at most 1 argument, got ",
                         args.positional.size()));
  }
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      for (const auto& [k, v] : source.dict().entries()) {
        CHAT_RETURN_IF_ERROR(out->Set(k, v));
      }
    } else {
      CHAT_ASSIGN_OR_RETURN(std::vector<Value> items,
                            PyIterate(interp, source));
      for (const Value& item : items) {
        CHAT_ASSIGN_OR_RETURN(std::vector<Value> pair, PyIterate(interp, item));
        if (pair.size() != 2) {
          return TypeError(
              "dictionary update sequence element has the wrong length; 2 is "
              "required");
        }
        CHAT_RETURN_IF_ERROR(out->Set(pair[0], pair[1]));
      }
    }
  }
  for (const auto& [k, v] : args.keyword) out->SetString(k, v);
  return absl::OkStatus();
}

absl::StatusOr<Value> MakeDict(Interpreter& interp, CallArgs args) {
  Value dict = Value::NewDict();
  CHAT_RETURN_IF_ERROR(FillDict(interp, "dict", args, &dict.dict()));
  return dict;
}

absl::StatusOr<Value> MakeNamespace(Interpreter& interp, CallArgs args) {
  auto ns = std::make_shared<NamespaceObject>();
  CHAT_RETURN_IF_ERROR(FillDict(interp, "namespace", args, &ns->attrs()));
  return Value::FromObject(std::move(ns));
}

// jinja2.utils.Cycler.
class CyclerObject : public Object {
 public:
  explicit CyclerObject(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "Cycler"; }

  absl::StatusOr<Value> GetAttr(Interpreter& interp,
                                std::string_view name) override {
    auto self = std::static_pointer_cast<CyclerObject>(shared_from_this());
    if (name == "current") return items_[pos_];
    if (name == "next") {
      return NativeFunction::Make("next", [self](Interpreter&, CallArgs) {
        const Value v = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return absl::StatusOr<Value>(v);
      });
    }
    if (name == "reset") {
      return NativeFunction::Make("reset", [self](Interpreter&, CallArgs) {
        self->pos_ = 0;
        return absl::StatusOr<Value>(Value::None());
      });
    }
    return Object::GetAttr(interp, name);
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

absl::StatusOr<Value> MakeCycler(Interpreter&, CallArgs args) {
  if (args.positional.empty()) {
    return TypeError("at least one item has to be provided");
  }
  return Value::FromObject(
      std::make_shared<CyclerObject>(std::move(args.positional)));
}

// jinja2.utils.Joiner: "" on the first call, the separator afterwards.
class JoinerObject : public Object {
 public:
  explicit JoinerObject(Value sep) : sep_(std::move(sep)) {}
  std::string_view type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  absl::StatusOr<Value> Call(Interpreter&, CallArgs) override {
    if (!used_) {
      used_ = true;
      return Value::String("");
    }
    return sep_;
  }

 private:
  Value sep_;
  bool used_ = false;
};

absl::StatusOr<Value> MakeJoiner(Interpreter&, CallArgs args) {
  CHAT_ASSIGN_OR_RETURN(
      std::vector<Value> bound,
      BindArgs("joiner", args, {{"sep", Value::String(", ")}}));
  return Value::FromObject(std::make_shared<JoinerObject>(bound[0]));
}

absl::StatusOr<Value> Lipsum(Interpreter&, CallArgs) {
  return TypeError("lipsum() is not supported: its text is random");
}

absl::StatusOr<Value> RaiseException(Interpreter& interp, CallArgs args) {
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> bound,
                        BindArgs("raise_exception", args, {{"message", {}}}));
  CHAT_ASSIGN_OR_RETURN(std::string message, interp.Str(bound[0]));
  return absl::InvalidArgumentError(Cat("raise_exception: ", message));
}

absl::StatusOr<Value> StrftimeNow(Interpreter& interp, CallArgs args) {
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> bound,
                        BindArgs("strftime_now", args, {{"format", {}}}));
  if (!bound[0].is_string()) {
    return TypeError(
        Cat("strftime() argument 1 must be str, not ", PyTypeName(bound[0])));
  }
  CHAT_ASSIGN_OR_RETURN(std::string text,
                        PyStrftime(bound[0].str(), interp.clock()()));
  return interp.MakeString(std::move(text));
}

}  // namespace

Value NativeFunction::Make(std::string name, Fn fn) {
  return Value::FromObject(
      std::make_shared<NativeFunction>(std::move(name), std::move(fn)));
}

absl::StatusOr<Value> NamespaceObject::GetAttr(Interpreter&,
                                               std::string_view name) {
  if (const Value* v = attrs_.FindString(name)) return *v;
  return Value::Undefined(
      Cat("'jinja2.utils.Namespace object' has no attribute '", name, "'"));
}

absl::StatusOr<std::string> NamespaceObject::Repr(size_t max_bytes, int depth) {
  auto copy = std::make_shared<DictObject>(attrs_);
  CHAT_ASSIGN_OR_RETURN(
      std::string dict,
      ToPyRepr(Value::FromDict(std::move(copy)), max_bytes, depth + 1));
  return Cat("<Namespace ", dict, ">");
}

std::vector<std::pair<std::string, Value>> TemplateGlobals() {
  std::vector<std::pair<std::string, Value>> globals;
  const auto add = [&](std::string name, NativeFunction::Fn fn) {
    globals.emplace_back(name, NativeFunction::Make(name, std::move(fn)));
  };
  add("range", Range);
  add("dict", MakeDict);
  add("namespace", MakeNamespace);
  add("cycler", MakeCycler);
  add("joiner", MakeJoiner);
  add("lipsum", Lipsum);
  add("raise_exception", RaiseException);
  add("strftime_now", StrftimeNow);
  return globals;
}

absl::StatusOr<std::string> PyStrftime(std::string_view format,
                                       const LocalDateTime& time) {
  std::string c_format;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      c_format.push_back(format[i]);
      continue;
    }
    const char ch = format[++i];
    if (ch == 'f') {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "%06d", time.microsecond);
      c_format += buf;
    } else if (ch != 'z' && ch != 'Z') {
      c_format.push_back('%');
      c_format.push_back(ch);
    }
  }
  std::tm tm = {};
  tm.tm_year = static_cast<int>(time.time.year() - 1900);
  tm.tm_mon = time.time.month() - 1;
  tm.tm_mday = time.time.day();
  tm.tm_hour = time.time.hour();
  tm.tm_min = time.time.minute();
  tm.tm_sec = time.time.second();
  tm.tm_wday = static_cast<int>(absl::GetWeekday(time.time)) == 6
                   ? 0
                   : static_cast<int>(absl::GetWeekday(time.time)) + 1;
  tm.tm_yday = absl::GetYearDay(time.time) - 1;
  tm.tm_isdst = -1;
  constexpr size_t kMaxBytes = 64 << 10;
  if (c_format.empty()) return std::string();
  for (size_t size = 256; size <= kMaxBytes; size *= 4) {
    std::string out(size, '\0');
    const size_t n = std::strftime(out.data(), size, c_format.c_str(), &tm);
    if (n > 0) {
      out.resize(n);
      return out;
    }
  }
  return std::string();
}

LocalClock SystemLocalClock() {
  return [] {
    const absl::Time now = absl::Now();
    const absl::TimeZone tz = absl::LocalTimeZone();
    LocalDateTime t;
    t.time = absl::ToCivilSecond(now, tz);
    const absl::Duration sub = now - absl::FromCivil(t.time, tz);
    t.microsecond = static_cast<int>(absl::ToInt64Microseconds(sub) % 1000000);
    return t;
  };
}

}  // namespace radixkv::model::chat

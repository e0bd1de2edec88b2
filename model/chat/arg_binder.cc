#include "model/chat/arg_binder.h"

#include "absl/status/status.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {

absl::StatusOr<std::vector<Value>> BindArgs(std::string_view function,
                                            const CallArgs& args,
                                            const std::vector<Param>& params,
                                            bool positional_only) {
  if (args.positional.size() > params.size()) {
    return absl::InvalidArgumentError(Cat(function, "() takes at most ",
                                          params.size(), " argument(s) (",
                                          args.positional.size(), " given)"));
  }
  if (positional_only && !args.keyword.empty()) {
    return absl::InvalidArgumentError(
        Cat(function, "() takes no keyword arguments"));
  }
  std::vector<std::optional<Value>> bound(params.size());
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = args.positional[i];
  }
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i].name != key) ++i;
    if (i == params.size()) {
      return absl::InvalidArgumentError(
          Cat(function, "() got an unexpected keyword argument '", key, "'"));
    }
    if (bound[i].has_value()) {
      return absl::InvalidArgumentError(
          Cat(function, "() got multiple values for argument '", key, "'"));
    }
    bound[i] = value;
  }
  std::vector<Value> out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i].has_value()) {
      out.push_back(std::move(*bound[i]));
    } else if (params[i].default_value.has_value()) {
      out.push_back(*params[i].default_value);
    } else {
      return absl::InvalidArgumentError(
          Cat(function, "() missing required argument '", params[i].name, "'"));
    }
  }
  return out;
}

}  // namespace radixkv::model::chat

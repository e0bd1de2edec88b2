#include "router/openai/openai_error.h"

#include <optional>

#include "nlohmann/json.hpp"

namespace radixkv::router::openai {
namespace {

constexpr char kParamPayload[] = "type.radixkv.dev/openai.param";

}  // namespace

absl::Status BadParam(absl::string_view param, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

OpenAiError ToOpenAiError(const absl::Status& status) {
  OpenAiError e;
  e.message = std::string(status.message());
  if (auto p = status.GetPayload(kParamPayload); p.has_value()) {
    e.param = std::string(*p);
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "invalid_request_error";
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      e.code = "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "overloaded";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "service_unavailable_error";
      break;
    default:
      e.http_status = 500;
      e.type = "internal_error";
  }
  return e;
}

std::string ErrorBody(const OpenAiError& e) {
  nlohmann::ordered_json error = {{"message", e.message},
                                  {"type", e.type},
                                  {"param", nullptr},
                                  {"code", nullptr}};
  if (!e.param.empty()) error["param"] = e.param;
  if (!e.code.empty()) error["code"] = e.code;
  // Invalid UTF-8 in a message (an echoed byte of a bad request) must not
  // make the error itself fail to serialize.
  return nlohmann::ordered_json{{"error", error}}.dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace radixkv::router::openai

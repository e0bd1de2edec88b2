// OpenAI-style error objects ({"error": {"message", "type", "param",
// "code"}}) and the HTTP status of each absl::Status code, as the OpenAI API
// and vLLM's OpenAI server answer them.
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_ERROR_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace radixkv::router::openai {

struct OpenAiError {
  int http_status = 500;
  std::string message;
  std::string type;   // "invalid_request_error", ...
  std::string param;  // the offending request field; "" = null
  std::string code;   // "invalid_api_key", "model_not_found", ...; "" = null
};

// INVALID_ARGUMENT naming the request field `param` (kept as a status
// payload, so that ToOpenAiError reports it in "param").
absl::Status BadParam(absl::string_view param, absl::string_view message);

// The error object of `status` (not OK): INVALID_ARGUMENT, OUT_OF_RANGE and
// FAILED_PRECONDITION 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, others 500.
OpenAiError ToOpenAiError(const absl::Status& status);

// {"error": {...}} as JSON text.
std::string ErrorBody(const OpenAiError& error);

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_ERROR_H_

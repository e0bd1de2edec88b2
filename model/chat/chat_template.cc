#include "model/chat/chat_template.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/chat/ast.h"
#include "model/chat/interpreter.h"
#include "model/chat/lexer.h"
#include "model/chat/parser.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/value_json.h"

namespace radixkv::model::chat {
namespace {

using Context = std::vector<std::pair<std::string, Value>>;

void SetVar(Context* context, std::string name, Value value) {
  for (auto& [n, v] : *context) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  context->emplace_back(std::move(name), std::move(value));
}

absl::StatusOr<Value> OptionalJson(
    const std::optional<nlohmann::ordered_json>& json) {
  if (!json.has_value()) return Value::None();
  return ValueFromJson(*json);
}

absl::Status Annotate(absl::Status status, std::string_view what) {
  return absl::Status(status.code(), Cat(what, ": ", status.message()));
}

// transformers' render(messages=..., tools=..., documents=...,
// add_generation_prompt=..., **special_tokens, **kwargs).
absl::StatusOr<Context> BuildContext(const ChatTemplateInputs& inputs) {
  if (!inputs.messages.is_array()) {
    return absl::InvalidArgumentError("messages must be a JSON array");
  }
  if (!inputs.extra.is_object()) {
    return absl::InvalidArgumentError(
        "extra template arguments must be a JSON object");
  }
  Context context;
  absl::StatusOr<Value> messages = ValueFromJson(inputs.messages);
  if (!messages.ok()) return Annotate(messages.status(), "messages");
  SetVar(&context, "messages", std::move(*messages));
  absl::StatusOr<Value> tools = OptionalJson(inputs.tools);
  if (!tools.ok()) return Annotate(tools.status(), "tools");
  SetVar(&context, "tools", std::move(*tools));
  absl::StatusOr<Value> documents = OptionalJson(inputs.documents);
  if (!documents.ok()) return Annotate(documents.status(), "documents");
  SetVar(&context, "documents", std::move(*documents));
  SetVar(&context, "add_generation_prompt",
         Value::Bool(inputs.add_generation_prompt));
  if (inputs.bos_token.has_value()) {
    if (!IsValidUtf8(*inputs.bos_token)) {
      return absl::InvalidArgumentError("bos_token is not valid UTF-8");
    }
    SetVar(&context, "bos_token", Value::String(*inputs.bos_token));
  }
  if (inputs.eos_token.has_value()) {
    if (!IsValidUtf8(*inputs.eos_token)) {
      return absl::InvalidArgumentError("eos_token is not valid UTF-8");
    }
    SetVar(&context, "eos_token", Value::String(*inputs.eos_token));
  }
  for (const auto& [key, json] : inputs.extra.items()) {
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      return absl::InvalidArgumentError(
          Cat("extra template argument '", key, "' duplicates a fixed input"));
    }
    absl::StatusOr<Value> v = ValueFromJson(json);
    if (!v.ok()) return Annotate(v.status(), key);
    SetVar(&context, key, std::move(*v));
  }
  return context;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source) {
  if (source.size() > kMaxSourceBytes) {
    return absl::InvalidArgumentError(Cat("chat template is ", source.size(),
                                          " bytes, more than the limit of ",
                                          kMaxSourceBytes));
  }
  if (!IsValidUtf8(source)) {
    return absl::InvalidArgumentError("chat template is not valid UTF-8");
  }
  const std::string normalized = NormalizeTemplateSource(source);
  CHAT_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(normalized));
  CHAT_ASSIGN_OR_RETURN(TemplateAst ast, ParseTemplate(std::move(tokens)));
  return ChatTemplate(std::make_shared<const TemplateAst>(std::move(ast)));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const ChatTemplateInputs& inputs) const {
  return Render(inputs, RenderOptions());
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const ChatTemplateInputs& inputs, const RenderOptions& options) const {
  CHAT_ASSIGN_OR_RETURN(Context context, BuildContext(inputs));
  Interpreter interpreter(options.limits,
                          options.clock ? options.clock : SystemLocalClock());
  return interpreter.Render(*ast_, std::move(context));
}

}  // namespace radixkv::model::chat

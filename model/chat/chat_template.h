// Hugging Face chat templates rendered in C++, byte for byte as
// transformers' `tokenizer.apply_chat_template(..., tokenize=False)` does.
//
// transformers compiles a template with jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) plus
// the loopcontrols extension ({% break %}, {% continue %}) and its
// AssistantTracker ({% generation %}), replaces `tojson` with
// json.dumps(ensure_ascii=False, ...), adds the globals raise_exception()
// and strftime_now(), and renders with messages, tools, documents,
// add_generation_prompt, the tokenizer's special tokens and the caller's
// extra keyword arguments (utils/chat_template_utils.py). This renderer
// implements that jinja2 subset; see model/chat/README.md for what is
// supported, what is refused by name and the limits.
//
// Example:
//   absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(jinja_source);
//   ChatTemplateInputs in;
//   in.messages = nlohmann::ordered_json::parse(R"([{"role": "user",
//                                                   "content": "Hi!"}])");
//   in.add_generation_prompt = true;
//   in.bos_token = "<|begin_of_text|>";
//   absl::StatusOr<std::string> prompt = t->Render(in);
#ifndef RADIXKV_MODEL_CHAT_CHAT_TEMPLATE_H_
#define RADIXKV_MODEL_CHAT_CHAT_TEMPLATE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat/render_options.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::chat {

struct TemplateAst;

// The variables of one render. JSON values become the Python objects
// json.loads would give (objects keep their key order).
struct ChatTemplateInputs {
  // `messages`: a JSON array of {"role": ..., "content": ...} objects;
  // `content` may be a string or a list of typed parts such as
  // {"type": "text", "text": ...}. Other keys (tool_calls, ...) pass through.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = false;
  // The tokenizer's special tokens; absent ones are undefined in the
  // template, as transformers passes only the tokens a tokenizer has.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // `tools` and `documents`; absent means None (transformers always passes
  // both names).
  std::optional<nlohmann::ordered_json> tools;
  std::optional<nlohmann::ordered_json> documents;
  // Extra keyword arguments (enable_thinking, date_string, other special
  // tokens, ...): a JSON object; its keys override bos_token/eos_token and
  // may not be messages, tools, documents or add_generation_prompt.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// How to render: limits and the clock of strftime_now.
struct RenderOptions {
  RenderLimits limits;
  LocalClock clock = SystemLocalClock();
};

// A parsed chat template. Immutable after Parse; Render may be called from
// several threads at once. Copies share the parsed tree.
class ChatTemplate {
 public:
  // Largest template source Parse accepts, in bytes.
  static constexpr size_t kMaxSourceBytes = size_t{4} << 20;

  // Parses a jinja template source. INVALID_ARGUMENT with "line L, column
  // C" for syntax errors, sources that are not UTF-8 or larger than
  // kMaxSourceBytes, unknown tags, filters and tests, and the features
  // refused by name (README.md).
  static absl::StatusOr<ChatTemplate> Parse(std::string source);

  // Renders with default options (RenderLimits defaults, the system clock
  // in the local time zone).
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs) const;

  // Renders the prompt text (UTF-8). INVALID_ARGUMENT with "line L, column
  // C" for everything jinja2 would raise on (undefined values used,
  // TypeErrors, raise_exception("msg") -> "raise_exception: msg") and for
  // bad inputs (messages not an array, reserved extra keys, integers beyond
  // 64 bits, invalid UTF-8); RESOURCE_EXHAUSTED when a limit is reached.
  absl::StatusOr<std::string> Render(const ChatTemplateInputs& inputs,
                                     const RenderOptions& options) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const TemplateAst> ast)
      : ast_(std::move(ast)) {}

  std::shared_ptr<const TemplateAst> ast_;
};

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_CHAT_TEMPLATE_H_

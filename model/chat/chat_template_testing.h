// Test support: render a template source with a fixed clock and small
// default inputs, and compare against expected texts or error messages.
#ifndef RADIXKV_MODEL_CHAT_CHAT_TEMPLATE_TESTING_H_
#define RADIXKV_MODEL_CHAT_CHAT_TEMPLATE_TESTING_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/chat/chat_template.h"

namespace radixkv::model::chat::testing {

// 2026-12-01 10:20:30.123456, the clock of jinja2_render.py.
RenderOptions FixedClockOptions();

// The inputs the expected texts of the unit tests were made with: a system,
// user and assistant message, add_generation_prompt, bos "<s>", eos "</s>".
ChatTemplateInputs DefaultInputs();

// Parses and renders `source` with `inputs` and the fixed clock.
absl::StatusOr<std::string> RenderSource(
    std::string_view source, const ChatTemplateInputs& inputs = DefaultInputs(),
    RenderOptions options = FixedClockOptions());

// One table row: `expected_text` when the render succeeds, otherwise
// `expected_error` must occur in the error message.
struct RenderCase {
  const char* source;
  const char* expected_text;
  const char* expected_error;
};

// Checks one row with gtest assertions.
void ExpectRender(const RenderCase& c);

// Checks every row of a table.
void ExpectRenders(absl::Span<const RenderCase> cases);

}  // namespace radixkv::model::chat::testing

#endif  // RADIXKV_MODEL_CHAT_CHAT_TEMPLATE_TESTING_H_

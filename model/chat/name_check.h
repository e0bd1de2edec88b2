// jinja2's compile-time check of filter and test names: an unknown name is
// a template error before rendering, except inside an `if` statement (its
// tests and bodies, up to the next loop, macro or block) or a conditional
// expression, where jinja2 defers the error to the moment the filter or
// test runs ("soft frames" in jinja2/compiler.py). Names jinja2 knows but
// this renderer refuses follow the same rule.
#ifndef RADIXKV_MODEL_CHAT_NAME_CHECK_H_
#define RADIXKV_MODEL_CHAT_NAME_CHECK_H_

#include "absl/status/status.h"
#include "model/chat/ast.h"

namespace radixkv::model::chat {

// INVALID_ARGUMENT with the position and name of the first filter or test
// outside a soft frame that is unknown or refused.
absl::Status CheckFilterAndTestNames(const TemplateAst& ast);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_NAME_CHECK_H_

// Early-return helpers for absl::Status / absl::StatusOr inside the chat
// template renderer (absl 20220623 does not ship public ones).
#ifndef RADIXKV_MODEL_CHAT_STATUS_MACROS_H_
#define RADIXKV_MODEL_CHAT_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CHAT_STATUS_CONCAT_INNER(a, b) a##b
#define CHAT_STATUS_CONCAT(a, b) CHAT_STATUS_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function if it is not OK.
#define CHAT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    const absl::Status chat_status_ = (expr);    \
    if (!chat_status_.ok()) return chat_status_; \
  } while (false)

// `lhs = *expr` when `expr` (a StatusOr) is OK, otherwise returns its status.
#define CHAT_ASSIGN_OR_RETURN(lhs, expr) \
  CHAT_ASSIGN_OR_RETURN_IMPL(CHAT_STATUS_CONCAT(chat_or_, __LINE__), lhs, expr)

#define CHAT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(*tmp)

#endif  // RADIXKV_MODEL_CHAT_STATUS_MACROS_H_

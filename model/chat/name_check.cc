#include "model/chat/name_check.h"

#include "model/chat/filters.h"
#include "model/chat/jinja_tests.h"
#include "model/chat/lexer.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

absl::Status CheckBody(const Body& body, bool soft);

absl::Status NameError(const Expr& e, std::string_view kind,
                       BuiltinStatus status) {
  const std::string message =
      status == BuiltinStatus::kRefused
          ? Cat("the '", e.name, "' ", kind, " is not supported")
          : Cat("No ", kind, " named '", e.name, "'");
  return absl::InvalidArgumentError(Cat(FormatPos(e.pos), ": ", message));
}

absl::Status CheckExpr(const Expr* e, bool soft) {
  if (e == nullptr) return absl::OkStatus();
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == ExprKind::kFilter) {
    const BuiltinStatus status = FilterStatus(e->name);
    if (status != BuiltinStatus::kSupported) {
      return NameError(*e, "filter", status);
    }
  }
  if (!soft && e->kind == ExprKind::kTest) {
    const BuiltinStatus status = TestStatus(e->name);
    if (status != BuiltinStatus::kSupported) {
      return NameError(*e, "test", status);
    }
  }
  for (const ExprPtr& child : e->children) {
    CHAT_RETURN_IF_ERROR(CheckExpr(child.get(), soft));
  }
  for (const auto& [name, value] : e->kwargs) {
    CHAT_RETURN_IF_ERROR(CheckExpr(value.get(), soft));
  }
  CHAT_RETURN_IF_ERROR(CheckExpr(e->dyn_args.get(), soft));
  return CheckExpr(e->dyn_kwargs.get(), soft);
}

absl::Status CheckMacro(const MacroDef& def) {
  for (const ExprPtr& d : def.defaults) {
    CHAT_RETURN_IF_ERROR(CheckExpr(d.get(), false));
  }
  return CheckBody(def.body, false);
}

// Statements; `soft` tells whether the enclosing frame is an if's.
absl::Status CheckStmt(const Stmt& stmt, bool soft) {
  switch (stmt.kind) {
    case StmtKind::kOutput:
      return CheckExpr(static_cast<const OutputStmt&>(stmt).expr.get(), soft);
    case StmtKind::kIf: {
      const auto& s = static_cast<const IfStmt&>(stmt);
      for (size_t i = 0; i < s.tests.size(); ++i) {
        CHAT_RETURN_IF_ERROR(CheckExpr(s.tests[i].get(), true));
        CHAT_RETURN_IF_ERROR(CheckBody(s.bodies[i], true));
      }
      return CheckBody(s.else_body, true);
    }
    case StmtKind::kFor: {
      const auto& s = static_cast<const ForStmt&>(stmt);
      CHAT_RETURN_IF_ERROR(CheckExpr(s.iter.get(), soft));
      CHAT_RETURN_IF_ERROR(CheckExpr(s.condition.get(), false));
      CHAT_RETURN_IF_ERROR(CheckBody(s.body, false));
      return CheckBody(s.else_body, false);
    }
    case StmtKind::kSet:
      return CheckExpr(static_cast<const SetStmt&>(stmt).value.get(), soft);
    case StmtKind::kSetBlock: {
      const auto& s = static_cast<const SetBlockStmt&>(stmt);
      CHAT_RETURN_IF_ERROR(CheckExpr(s.filter.get(), false));
      return CheckBody(s.body, false);
    }
    case StmtKind::kMacro:
      return CheckMacro(static_cast<const MacroStmt&>(stmt).def);
    case StmtKind::kCallBlock: {
      const auto& s = static_cast<const CallBlockStmt&>(stmt);
      CHAT_RETURN_IF_ERROR(CheckMacro(s.caller));
      return CheckExpr(s.call.get(), soft);
    }
    case StmtKind::kFilterBlock: {
      const auto& s = static_cast<const FilterBlockStmt&>(stmt);
      CHAT_RETURN_IF_ERROR(CheckExpr(s.filter.get(), false));
      return CheckBody(s.body, false);
    }
    case StmtKind::kWith: {
      const auto& s = static_cast<const WithStmt&>(stmt);
      for (const ExprPtr& v : s.values) {
        CHAT_RETURN_IF_ERROR(CheckExpr(v.get(), soft));
      }
      return CheckBody(s.body, false);
    }
    case StmtKind::kGeneration:
      return CheckBody(static_cast<const GenerationStmt&>(stmt).body, false);
    default:
      return absl::OkStatus();
  }
}

absl::Status CheckBody(const Body& body, bool soft) {
  for (const StmtPtr& stmt : body) CHAT_RETURN_IF_ERROR(CheckStmt(*stmt, soft));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFilterAndTestNames(const TemplateAst& ast) {
  return CheckBody(ast.body, false);
}

}  // namespace radixkv::model::chat

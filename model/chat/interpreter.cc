// Statement execution of the Interpreter (see interpreter.h).
#include "model/chat/interpreter.h"

#include <utility>

#include "absl/status/status.h"
#include "model/chat/builtins.h"
#include "model/chat/operators.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/template_objects.h"

namespace radixkv::model::chat {

Interpreter::Interpreter(const RenderLimits& limits, LocalClock clock)
    : limits_(limits), clock_(std::move(clock)) {}

Interpreter::~Interpreter() {
  for (const std::weak_ptr<Scope>& weak : closures_) {
    if (std::shared_ptr<Scope> scope = weak.lock()) scope->Clear();
  }
}

absl::StatusOr<std::string> Interpreter::Render(
    const TemplateAst& ast,
    std::vector<std::pair<std::string, Value>> context) {
  auto globals = std::make_shared<Scope>(nullptr);
  for (auto& [name, value] : TemplateGlobals()) globals->Set(name, value);
  auto root = std::make_shared<Scope>(globals);
  for (auto& [name, value] : context) root->Set(name, std::move(value));
  closures_.push_back(root);
  std::string out;
  out_ = &out;
  absl::StatusOr<Flow> flow = ExecBody(ast.body, root);
  out_ = nullptr;
  if (!flow.ok()) return flow.status();
  return out;
}

absl::Status Interpreter::Emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        Cat("rendered text exceeds max_output_bytes (",
            limits_.max_output_bytes, ")"));
  }
  CHAT_RETURN_IF_ERROR(ChargeWork(text.size()));
  out_->append(text);
  return absl::OkStatus();
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecBody(const Body& body,
                                                        const ScopePtr& scope) {
  for (const StmtPtr& stmt : body) {
    CHAT_RETURN_IF_ERROR(Step());
    absl::StatusOr<Flow> flow = ExecStmt(*stmt, scope);
    if (!flow.ok()) return Locate(flow.status(), stmt->pos);
    if (*flow != Flow::kNormal) return *flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecStmt(const Stmt& stmt,
                                                        const ScopePtr& scope) {
  switch (stmt.kind) {
    case StmtKind::kText:
      CHAT_RETURN_IF_ERROR(Emit(static_cast<const TextStmt&>(stmt).text));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      CHAT_ASSIGN_OR_RETURN(
          Value v, Eval(*static_cast<const OutputStmt&>(stmt).expr, *scope));
      CHAT_ASSIGN_OR_RETURN(std::string text, Str(v));
      CHAT_RETURN_IF_ERROR(Emit(text));
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      return ExecIf(static_cast<const IfStmt&>(stmt), scope);
    case StmtKind::kFor:
      return ExecFor(static_cast<const ForStmt&>(stmt), scope);
    case StmtKind::kSet: {
      const auto& set = static_cast<const SetStmt&>(stmt);
      CHAT_ASSIGN_OR_RETURN(Value v, Eval(*set.value, *scope));
      CHAT_RETURN_IF_ERROR(Assign(set.target, std::move(v), *scope));
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock:
      CHAT_RETURN_IF_ERROR(
          ExecSetBlock(static_cast<const SetBlockStmt&>(stmt), scope));
      return Flow::kNormal;
    case StmtKind::kMacro:
      CHAT_RETURN_IF_ERROR(
          ExecMacro(static_cast<const MacroStmt&>(stmt), scope));
      return Flow::kNormal;
    case StmtKind::kCallBlock:
      CHAT_RETURN_IF_ERROR(
          ExecCallBlock(static_cast<const CallBlockStmt&>(stmt), scope));
      return Flow::kNormal;
    case StmtKind::kFilterBlock:
      CHAT_RETURN_IF_ERROR(
          ExecFilterBlock(static_cast<const FilterBlockStmt&>(stmt), scope));
      return Flow::kNormal;
    case StmtKind::kWith:
      return ExecWith(static_cast<const WithStmt&>(stmt), scope);
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kGeneration: {
      CHAT_ASSIGN_OR_RETURN(
          std::string text,
          Capture(static_cast<const GenerationStmt&>(stmt).body, scope));
      CHAT_RETURN_IF_ERROR(Emit(text));
      return Flow::kNormal;
    }
  }
  return absl::InternalError("unknown statement kind");
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecIf(const IfStmt& stmt,
                                                      const ScopePtr& scope) {
  for (size_t i = 0; i < stmt.tests.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(Value test, Eval(*stmt.tests[i], *scope));
    if (Truthy(test)) return ExecBody(stmt.bodies[i], scope);
  }
  return ExecBody(stmt.else_body, scope);
}

absl::StatusOr<std::vector<Value>> Interpreter::LoopItems(
    const ForStmt& stmt, const ScopePtr& scope) {
  CHAT_ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.iter, *scope));
  absl::StatusOr<std::vector<Value>> items = PyIterate(*this, iterable);
  if (!items.ok()) return Locate(items.status(), stmt.iter->pos);
  if (stmt.condition == nullptr) return items;
  std::vector<Value> kept;
  for (Value& item : *items) {
    CHAT_RETURN_IF_ERROR(Step());
    Scope test_scope(scope);
    CHAT_RETURN_IF_ERROR(Assign(stmt.target, item, test_scope));
    CHAT_ASSIGN_OR_RETURN(Value keep, Eval(*stmt.condition, test_scope));
    if (Truthy(keep)) kept.push_back(std::move(item));
  }
  return kept;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const ForStmt& stmt,
                                                       const ScopePtr& scope) {
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, LoopItems(stmt, scope));
  if (items.empty()) {
    CHAT_ASSIGN_OR_RETURN(
        Flow flow, ExecBody(stmt.else_body, std::make_shared<Scope>(scope)));
    return flow == Flow::kNormal ? Flow::kNormal : flow;
  }
  auto loop = std::make_shared<LoopObject>(std::move(items));
  const Value loop_value = Value::FromObject(loop);
  for (size_t i = 0; i < loop->items().size(); ++i) {
    CHAT_RETURN_IF_ERROR(Step());
    auto iteration = std::make_shared<Scope>(scope);
    loop->set_index0(i);
    iteration->Set("loop", loop_value);
    CHAT_RETURN_IF_ERROR(Assign(stmt.target, loop->items()[i], *iteration));
    CHAT_ASSIGN_OR_RETURN(Flow flow, ExecBody(stmt.body, iteration));
    if (flow == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

absl::Status Interpreter::Assign(const Target& target, Value value,
                                 Scope& scope) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope.Set(target.name, std::move(value));
      return absl::OkStatus();
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope.Find(target.name);
      NamespaceObject* object =
          ns != nullptr && ns->is_object()
              ? dynamic_cast<NamespaceObject*>(&ns->object())
              : nullptr;
      if (object == nullptr) {
        return Locate(absl::InvalidArgumentError(
                          "cannot assign attribute on non-namespace object"),
                      target.pos);
      }
      object->attrs().SetString(target.attr, std::move(value));
      return absl::OkStatus();
    }
    case Target::Kind::kTuple:
      break;
  }
  absl::StatusOr<std::vector<Value>> items = PyIterate(*this, value);
  if (!items.ok()) {
    return Locate(absl::InvalidArgumentError(Cat("cannot unpack non-iterable ",
                                                 PyTypeName(value), " object")),
                  target.pos);
  }
  if (items->size() != target.items.size()) {
    const std::string message =
        items->size() < target.items.size()
            ? Cat("not enough values to unpack (expected ", target.items.size(),
                  ", got ", items->size(), ")")
            : Cat("too many values to unpack (expected ", target.items.size(),
                  ")");
    return Locate(absl::InvalidArgumentError(message), target.pos);
  }
  for (size_t i = 0; i < items->size(); ++i) {
    CHAT_RETURN_IF_ERROR(
        Assign(target.items[i], std::move((*items)[i]), scope));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Capture(const Body& body,
                                                 const ScopePtr& parent) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  absl::StatusOr<Flow> flow = ExecBody(body, std::make_shared<Scope>(parent));
  out_ = saved;
  if (!flow.ok()) return flow.status();
  return buffer;
}

absl::StatusOr<Value> Interpreter::FilterBlockText(const Expr& filter,
                                                   std::string input,
                                                   const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(const Value text, MakeString(std::move(input)));
  const Value* saved = block_input_;
  block_input_ = &text;
  absl::StatusOr<Value> result = Eval(filter, scope);
  block_input_ = saved;
  return result;
}

absl::Status Interpreter::ExecSetBlock(const SetBlockStmt& stmt,
                                       const ScopePtr& scope) {
  CHAT_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, scope));
  Value value;
  if (stmt.filter != nullptr) {
    CHAT_ASSIGN_OR_RETURN(
        value, FilterBlockText(*stmt.filter, std::move(text), *scope));
  } else {
    CHAT_ASSIGN_OR_RETURN(value, MakeString(std::move(text)));
  }
  return Assign(stmt.target, std::move(value), *scope);
}

absl::Status Interpreter::ExecMacro(const MacroStmt& stmt,
                                    const ScopePtr& scope) {
  closures_.push_back(scope);
  scope->Set(stmt.def.name, Value::FromObject(std::make_shared<MacroObject>(
                                &stmt.def, scope)));
  return absl::OkStatus();
}

absl::Status Interpreter::ExecCallBlock(const CallBlockStmt& stmt,
                                        const ScopePtr& scope) {
  closures_.push_back(scope);
  const Value caller =
      Value::FromObject(std::make_shared<MacroObject>(&stmt.caller, scope));
  CHAT_ASSIGN_OR_RETURN(Value callee, Eval(*stmt.call->children[0], *scope));
  CHAT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(*stmt.call, *scope, 1));
  args.keyword.emplace_back("caller", caller);
  absl::StatusOr<Value> result = CallValue(callee, std::move(args));
  if (!result.ok()) return Locate(result.status(), stmt.call->pos);
  CHAT_ASSIGN_OR_RETURN(std::string text, Str(*result));
  return Emit(text);
}

absl::Status Interpreter::ExecFilterBlock(const FilterBlockStmt& stmt,
                                          const ScopePtr& scope) {
  CHAT_ASSIGN_OR_RETURN(std::string text, Capture(stmt.body, scope));
  CHAT_ASSIGN_OR_RETURN(Value v,
                        FilterBlockText(*stmt.filter, std::move(text), *scope));
  CHAT_ASSIGN_OR_RETURN(std::string out, Str(v));
  return Emit(out);
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecWith(const WithStmt& stmt,
                                                        const ScopePtr& scope) {
  auto inner = std::make_shared<Scope>(scope);
  for (size_t i = 0; i < stmt.targets.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*stmt.values[i], *scope));
    CHAT_RETURN_IF_ERROR(Assign(stmt.targets[i], std::move(v), *inner));
  }
  return ExecBody(stmt.body, inner);
}

}  // namespace radixkv::model::chat

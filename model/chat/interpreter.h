// The tree-walking evaluator of a parsed chat template, with the semantics
// of jinja2's ImmutableSandboxedEnvironment as Hugging Face transformers
// configures it: sandboxed attribute access (no `_` attributes, no methods
// that mutate lists or dicts), jinja2's scoping, Undefined, loop variables,
// macros and loop controls.
//
// One Interpreter renders one template once; it is not thread-safe (make
// one per render). Filters, tests, methods and objects call back into it for
// attribute access, calls and the allocation limits.
#ifndef RADIXKV_MODEL_CHAT_INTERPRETER_H_
#define RADIXKV_MODEL_CHAT_INTERPRETER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/render_options.h"
#include "model/chat/scope.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, LocalClock clock);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `ast` with `context` as the template's variables. Errors carry
  // "line L, column C" of the failing node: INVALID_ARGUMENT for template
  // errors (undefined values used, type errors, raise_exception, refused
  // features), RESOURCE_EXHAUSTED for the limits.
  absl::StatusOr<std::string> Render(
      const TemplateAst& ast,
      std::vector<std::pair<std::string, Value>> context);

  // jinja2's sandboxed `obj.name`: a Python attribute (a method) first, then
  // the item `obj["name"]`; undefined when neither exists. Error when `obj`
  // is undefined.
  absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
  // jinja2's sandboxed `obj[key]`: the item first, then, for a string key,
  // the attribute; undefined when neither exists.
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  // `callee(args)`.
  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs args);
  // `input|name(args)` and `input is name(args)` by name (for map, select).
  absl::StatusOr<Value> ApplyFilter(std::string_view name, const Value& input,
                                    const CallArgs& args);
  absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input,
                                 const CallArgs& args);
  // Calls a macro (or a call block's caller) defined in `closure`.
  absl::StatusOr<Value> InvokeMacro(const MacroDef& def,
                                    const std::shared_ptr<Scope>& closure,
                                    CallArgs args);

  // A string value of at most max_string_bytes, charged to the work budget.
  absl::StatusOr<Value> MakeString(std::string s, bool markup = false);
  // A list value, its slots charged to the work budget.
  absl::StatusOr<Value> MakeList(std::vector<Value> items,
                                 SequenceKind kind = SequenceKind::kList);
  // Charges `bytes` of work (allocation or scanning).
  absl::Status ChargeWork(uint64_t bytes);
  // Python str() / repr() of a value within max_string_bytes.
  absl::StatusOr<std::string> Str(const Value& v);
  absl::StatusOr<std::string> Repr(const Value& v);

  const RenderLimits& limits() const { return limits_; }
  const LocalClock& clock() const { return clock_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using ScopePtr = std::shared_ptr<Scope>;

  // Statements (interpreter.cc).
  absl::StatusOr<Flow> ExecBody(const Body& body, const ScopePtr& scope);
  absl::StatusOr<Flow> ExecStmt(const Stmt& stmt, const ScopePtr& scope);
  absl::StatusOr<Flow> ExecIf(const IfStmt& stmt, const ScopePtr& scope);
  absl::StatusOr<Flow> ExecFor(const ForStmt& stmt, const ScopePtr& scope);
  absl::StatusOr<std::vector<Value>> LoopItems(const ForStmt& stmt,
                                               const ScopePtr& scope);
  absl::Status ExecSetBlock(const SetBlockStmt& stmt, const ScopePtr& scope);
  absl::Status ExecMacro(const MacroStmt& stmt, const ScopePtr& scope);
  absl::Status ExecCallBlock(const CallBlockStmt& stmt, const ScopePtr& scope);
  absl::Status ExecFilterBlock(const FilterBlockStmt& stmt,
                               const ScopePtr& scope);
  absl::StatusOr<Flow> ExecWith(const WithStmt& stmt, const ScopePtr& scope);
  absl::Status Assign(const Target& target, Value value, Scope& scope);
  // Binds a macro call's arguments into the macro's scope.
  absl::Status BindMacroArgs(const MacroDef& def, CallArgs& args, Scope& scope);
  absl::Status Emit(std::string_view text);
  // Runs `body` in a child scope of `parent` and returns its output.
  absl::StatusOr<std::string> Capture(const Body& body, const ScopePtr& parent);
  // Applies a filter chain over a kBlockInput to `input`.
  absl::StatusOr<Value> FilterBlockText(const Expr& filter, std::string input,
                                        const Scope& scope);

  // Expressions (interpreter_expr.cc).
  absl::StatusOr<Value> Eval(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalNode(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalName(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalGetItem(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalSlice(const Value& obj, const Expr& slice,
                                  const Scope& scope);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, const Scope& scope,
                                    size_t first);
  absl::StatusOr<Value> EvalCall(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalFilter(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalTest(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalUnary(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalCompare(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalConcat(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalCondExpr(const Expr& e, const Scope& scope);
  absl::StatusOr<Value> EvalCollection(const Expr& e, const Scope& scope);
  absl::Status Step();

  const RenderLimits limits_;
  LocalClock clock_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  uint64_t work_ = 0;
  int call_depth_ = 0;
  const Value* block_input_ = nullptr;  // the value of kBlockInput
  // Scopes captured by macros: cleared after the render to break cycles.
  std::vector<std::weak_ptr<Scope>> closures_;
};

// Prefixes `status` with "line L, column C: " unless an inner node already
// did; OK stays OK.
absl::Status Locate(absl::Status status, SourcePos pos);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_INTERPRETER_H_

// The syntax tree of a parsed chat template: jinja2's node types reduced to
// the statements and expressions chat templates use.
#ifndef RADIXKV_MODEL_CHAT_AST_H_
#define RADIXKV_MODEL_CHAT_AST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/chat/lexer.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

enum class ExprKind : uint8_t {
  kConst,
  kName,
  kGetAttr,     // children: {object}; name: attribute
  kGetItem,     // children: {object, index}
  kSlice,       // children: {start, stop, step}, each may be null
  kCall,        // children: {callee, positional...}; kwargs; dyn_args/kwargs
  kFilter,      // children: {input, positional...}; name; kwargs; dyn_*
  kTest,        // children: {input, positional...}; name; kwargs; dyn_*
  kUnary,       // children: {operand}; op: kNeg, kPos, kNot
  kBinary,      // children: {lhs, rhs}; op: kAdd ... kPow
  kAnd,         // children: {lhs, rhs}
  kOr,          // children: {lhs, rhs}
  kCompare,     // children: {first, operands...}; compare_ops
  kConcat,      // children: parts joined with `~`
  kCondExpr,    // children: {test, then, else (may be null)}
  kList,        // children: items
  kTuple,       // children: items
  kDict,        // children: key0, value0, key1, value1, ...
  kBlockInput,  // the rendered body of a filter block or block set
};

enum class Op : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kNeg,
  kPos,
  kNot,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kIn,
  kNotIn,
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  SourcePos pos;
  Value constant;    // kConst
  std::string name;  // kName, kGetAttr, kFilter, kTest
  Op op = Op::kAdd;  // kUnary, kBinary
  std::vector<Op> compare_ops;
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::unique_ptr<Expr> dyn_args;    // *args
  std::unique_ptr<Expr> dyn_kwargs;  // **kwargs
};

using ExprPtr = std::unique_ptr<Expr>;

// An assignment target: a name, a (nested) tuple of names, or `ns.attr`.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  SourcePos pos;
  std::string name;  // kName, and the namespace variable of kNamespaceAttr
  std::string attr;  // kNamespaceAttr
  std::vector<Target> items;  // kTuple
};

enum class StmtKind : uint8_t {
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kWith,
  kBreak,
  kContinue,
  kGeneration,
};

struct Stmt {
  explicit Stmt(StmtKind k) : kind(k) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  SourcePos pos;
};

using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt() : Stmt(StmtKind::kText) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt() : Stmt(StmtKind::kOutput) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  IfStmt() : Stmt(StmtKind::kIf) {}
  std::vector<ExprPtr> tests;  // if, elif...
  std::vector<Body> bodies;    // parallel to tests
  Body else_body;
};

struct ForStmt : Stmt {
  ForStmt() : Stmt(StmtKind::kFor) {}
  Target target;
  ExprPtr iter;
  ExprPtr condition;  // `for x in xs if cond`; may be null
  Body body;
  Body else_body;
};

struct SetStmt : Stmt {
  SetStmt() : Stmt(StmtKind::kSet) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  SetBlockStmt() : Stmt(StmtKind::kSetBlock) {}
  Target target;
  ExprPtr filter;  // filters over a kBlockInput; may be null
  Body body;
};

// A macro, or the body of a call block (the `caller`).
struct MacroDef {
  std::string name;
  SourcePos pos;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // parallel to params; null = required
  Body body;
  bool uses_caller = false;   // the body reads `caller`
  bool uses_varargs = false;  // ... `varargs`
  bool uses_kwargs = false;   // ... `kwargs`
};

struct MacroStmt : Stmt {
  MacroStmt() : Stmt(StmtKind::kMacro) {}
  MacroDef def;
};

struct CallBlockStmt : Stmt {
  CallBlockStmt() : Stmt(StmtKind::kCallBlock) {}
  MacroDef caller;
  ExprPtr call;  // a kCall
};

struct FilterBlockStmt : Stmt {
  FilterBlockStmt() : Stmt(StmtKind::kFilterBlock) {}
  ExprPtr filter;  // filters over a kBlockInput
  Body body;
};

struct WithStmt : Stmt {
  WithStmt() : Stmt(StmtKind::kWith) {}
  std::vector<Target> targets;
  std::vector<ExprPtr> values;
  Body body;
};

struct LoopControlStmt : Stmt {
  explicit LoopControlStmt(StmtKind k) : Stmt(k) {}
};

// transformers' {% generation %}: renders its body.
struct GenerationStmt : Stmt {
  GenerationStmt() : Stmt(StmtKind::kGeneration) {}
  Body body;
};

struct TemplateAst {
  Body body;
};

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_AST_H_

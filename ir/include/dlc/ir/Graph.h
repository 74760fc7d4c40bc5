//===- Graph.h - Values, nodes and graphs -----------------------*- C++ -*-===//
//
// A Graph is an ordered list of Nodes in SSA form. Values are produced by graph
// inputs, constants (initializers with data), trainable parameters (initial data
// that training updates, so never folded) or node results; every Value keeps its
// use list. The node order is a topological order (checked by the verifier).
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Attribute.h"
#include "dlc/ir/FusionGroup.h"
#include "dlc/ir/OpDef.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace dlc::ir {

class Graph;
class Node;

struct Use {
  Node *user;
  unsigned operandIndex;
  bool operator==(const Use &o) const { return user == o.user && operandIndex == o.operandIndex; }
};

class Value {
public:
  enum class Kind : uint8_t { Input, Constant, Parameter, Result };

  Kind kind() const { return kind_; }
  bool isInput() const { return kind_ == Kind::Input; }
  bool isConstant() const { return kind_ == Kind::Constant; }
  /// A variable: it has data (its initial value) like a constant, but a training
  /// step changes it (through the graph's updates), so no pass may fold through it.
  /// Trainable parameters (weights) get gradients; the others are state
  /// (optimizer moments, running statistics, the step count).
  bool isParameter() const { return kind_ == Kind::Parameter; }
  bool isTrainable() const { return isParameter() && trainable_; }
  /// Constants and parameters carry data.
  bool hasData() const { return isConstant() || isParameter(); }
  const std::string &name() const { return name_; }
  const TensorType &type() const { return type_; }
  void setType(TensorType t) { type_ = std::move(t); }
  DType dtype() const { return type_.dtype; }
  const Shape &shape() const { return type_.shape; }
  int64_t rank() const { return type_.rank(); }

  /// The node producing this value (null for inputs and constants).
  Node *definingNode() const { return def_; }
  unsigned resultIndex() const { return resultIndex_; }
  /// Constant data (a parameter's initial value); only valid when hasData().
  const Tensor &data() const { return data_; }

  const std::vector<Use> &uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  Graph *graph() const { return graph_; }

private:
  friend class Graph;
  friend class Node;
  Value(Graph *g, Kind k, std::string name, TensorType t)
      : graph_(g), kind_(k), name_(std::move(name)), type_(std::move(t)) {}
  void removeUse(Node *user, unsigned idx);

  Graph *graph_;
  Kind kind_;
  bool trainable_ = false;
  std::string name_;
  TensorType type_;
  Node *def_ = nullptr;
  unsigned resultIndex_ = 0;
  Tensor data_;
  std::vector<Use> uses_;
};

/// Location of a node in a source file (textual IR line/column, or ONNX node index).
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool valid() const { return line != 0; }
};

class Node {
public:
  OpKind kind() const { return kind_; }
  const OpDef &def() const { return opDef(kind_); }
  std::string_view opName() const { return ir::opName(kind_); }
  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  SourceLoc loc() const { return loc_; }
  void setLoc(SourceLoc l) { loc_ = l; }
  Graph *graph() const { return graph_; }

  unsigned numOperands() const { return static_cast<unsigned>(operands_.size()); }
  /// Operand i, or null when an optional operand is absent (or i is out of range).
  Value *operand(unsigned i) const { return i < operands_.size() ? operands_[i] : nullptr; }
  bool hasOperand(unsigned i) const { return operand(i) != nullptr; }
  llvm::ArrayRef<Value *> operands() const { return operands_; }
  void setOperand(unsigned i, Value *v);
  /// Appends an operand (or removes trailing ones with resizeOperands).
  void addOperand(Value *v);
  void resizeOperands(unsigned n);

  unsigned numResults() const { return static_cast<unsigned>(results_.size()); }
  Value *result(unsigned i = 0) const { return results_[i].get(); }

  const AttrMap &attrs() const { return attrs_; }
  bool hasAttr(std::string_view n) const { return attrs_.find(n) != attrs_.end(); }
  /// The attribute if set on the node, else the schema default, else null.
  const Attribute *attr(std::string_view n) const;
  void setAttr(std::string n, Attribute a) { attrs_[std::move(n)] = std::move(a); }
  void removeAttr(std::string_view n);

  // Typed accessors; the verifier guarantees presence (set or defaulted) and kind.
  int64_t attrInt(std::string_view n) const { return attr(n)->i(); }
  float attrFloat(std::string_view n) const { return attr(n)->f(); }
  const std::string &attrString(std::string_view n) const { return attr(n)->s(); }
  const std::vector<int64_t> &attrInts(std::string_view n) const { return attr(n)->ints(); }
  const std::vector<float> &attrFloats(std::string_view n) const { return attr(n)->floats(); }
  const std::vector<std::string> &attrStrings(std::string_view n) const {
    return attr(n)->strings();
  }
  const Tensor &attrTensor(std::string_view n) const { return attr(n)->tensor(); }

  /// "'name' (Conv)" or "(Conv)" for messages.
  std::string describe() const;

  /// The fusion group the node belongs to (Graph::fusionGroups), or null.
  const FusionGroup *fusionGroup() const { return group_; }

private:
  friend class Graph;
  Node(Graph *g, OpKind k) : graph_(g), kind_(k) {}

  Graph *graph_;
  OpKind kind_;
  std::string name_;
  SourceLoc loc_;
  std::vector<Value *> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  AttrMap attrs_;
  FusionGroup *group_ = nullptr;
  std::list<std::unique_ptr<Node>>::iterator self_;
};

/// The node producing `v` when it is an op of kind `k`, else null: how a pattern
/// matches the named ops it is about (MLIR's getDefiningOp<Op>()).
inline Node *definedBy(const Value *v, OpKind k) {
  Node *d = v ? v->definingNode() : nullptr;
  return d && d->kind() == k ? d : nullptr;
}

/// A result of the graph. An update (`variable` set) is not returned: its value
/// becomes the variable's value when the step ends (every read in the step sees
/// the old value). Its name is the variable's.
/// Outputs named kEvalOutputPrefix + NAME belong to a training package's evaluation
/// schedule (the model in inference mode, passes/Training.h): the code generator
/// runs them apart from the training step and exposes them as NAME.
inline constexpr std::string_view kEvalOutputPrefix = "dlc.eval.";
/// Variables whose name starts with this are ZeRO-1 optimizer state: each rank of a
/// data-parallel run holds its own shard (pkg::Variable::sharded).
inline constexpr std::string_view kShardedStatePrefix = "dlc.zero.";
/// Outputs named kGuardOutputPrefix + "NODE: WHAT" are guards: a bool scalar that
/// must be false when the run ends (a Loop unrolled to its --loop-bound that would run
/// further). The code generator turns each into a check word (the run fails with a
/// data error "node 'NODE': WHAT"); it is not an output of the package.
inline constexpr std::string_view kGuardOutputPrefix = "dlc.guard.";
/// In a guard's WHAT: the guard is a deferred branch of a run-time If (the importer
/// could not build it at the compiled shapes), as `dlc inspect` lists it.
inline constexpr std::string_view kDeferredBranchText = "cannot run at the shapes dlc compiled";

struct GraphOutput {
  std::string name;
  Value *value;
  Value *variable = nullptr;
  bool isUpdate() const { return variable != nullptr; }
  bool isEvaluation() const {
    return !variable &&
           std::string_view(name).substr(0, kEvalOutputPrefix.size()) == kEvalOutputPrefix;
  }
  bool isGuard() const {
    return !variable &&
           std::string_view(name).substr(0, kGuardOutputPrefix.size()) == kGuardOutputPrefix;
  }
};

class Graph {
public:
  using NodeList = std::list<std::unique_ptr<Node>>;

  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  Value *addInput(std::string name, TensorType type);
  Value *addConstant(std::string name, Tensor data);
  /// A variable (trainable, or state when `trainable` is false).
  Value *addParameter(std::string name, Tensor data, bool trainable = true);
  /// Turns a constant into a variable (same name, data and uses).
  void makeParameter(Value *constant, bool trainable = true);
  /// Turns a variable back into a constant (an initializer that is not trained).
  void makeConstant(Value *parameter);
  void setTrainable(Value *parameter, bool trainable) { parameter->trainable_ = trainable; }
  /// Adds an update: `variable` takes `value` at the end of each step.
  void addUpdate(Value *variable, Value *value) {
    outputs_.push_back({variable->name(), value, variable});
  }
  void addOutput(std::string name, Value *v) { outputs_.push_back({std::move(name), v}); }
  void setOutputValue(size_t i, Value *v) { outputs_[i].value = v; }
  void setOutputs(std::vector<GraphOutput> outputs) { outputs_ = std::move(outputs); }

  const std::vector<std::unique_ptr<Value>> &inputs() const { return inputs_; }
  const std::vector<std::unique_ptr<Value>> &constants() const { return constants_; }
  const std::vector<std::unique_ptr<Value>> &parameters() const { return parameters_; }
  /// The results and then-or-interleaved updates (GraphOutput::isUpdate).
  const std::vector<GraphOutput> &outputs() const { return outputs_; }
  /// Whether v is returned or is an update's value (either keeps it alive).
  bool isOutput(const Value *v) const;

  /// Iterates nodes in order; iterators stay valid while other nodes are erased.
  class NodeRange {
  public:
    struct iterator {
      NodeList::const_iterator it;
      Node &operator*() const { return **it; }
      Node *operator->() const { return it->get(); }
      iterator &operator++() { return ++it, *this; }
      bool operator!=(const iterator &o) const { return it != o.it; }
      bool operator==(const iterator &o) const { return it == o.it; }
    };
    explicit NodeRange(const NodeList &l) : l_(l) {}
    iterator begin() const { return {l_.begin()}; }
    iterator end() const { return {l_.end()}; }

  private:
    const NodeList &l_;
  };
  NodeRange nodes() const { return NodeRange(nodes_); }
  /// A snapshot of the node pointers, safe to iterate while the graph changes.
  std::vector<Node *> nodeList() const;
  /// The same, of the nodes of one op (a pass about that op).
  std::vector<Node *> nodesOf(OpKind k) const;
  size_t numNodes() const { return nodes_.size(); }

  /// Creates a node with the given result types, inserted before `before`
  /// (or at the end). Result names are fresh unless given in resultNames.
  Node *createNode(OpKind kind, std::vector<Value *> operands, std::vector<TensorType> resultTypes,
                   AttrMap attrs = {}, std::string name = "", Node *before = nullptr,
                   std::vector<std::string> resultNames = {});
  /// Creates a node whose result types come from the op's shape inference.
  llvm::Expected<Node *> createInferred(OpKind kind, std::vector<Value *> operands,
                                        AttrMap attrs = {}, unsigned numResults = 1,
                                        std::string name = "", Node *before = nullptr);
  /// Erases a node; its results must have no uses and not be graph outputs.
  void eraseNode(Node *n);
  /// Erases a constant that has no uses.
  void eraseConstant(Value *v);
  void eraseInput(Value *v);
  /// Erases constants with no uses that are not graph outputs. Returns the count.
  size_t removeUnusedConstants();
  void moveBefore(Node *n, Node *pos);
  /// Reorders nodes topologically (stable). Returns false if the graph has a cycle.
  bool topologicalSort();

  /// Replaces every use of `from` (including graph outputs) with `to`.
  void replaceAllUsesWith(Value *from, Value *to);

  /// Inputs of the source model bound to constants at compile time (`--bind`): no
  /// longer graph inputs, recorded so that the package can name them.
  struct BoundInput {
    std::string name;
    Tensor value;
  };
  void addBoundInput(std::string name, Tensor value) {
    bound_.push_back({std::move(name), std::move(value)});
  }
  const std::vector<BoundInput> &boundInputs() const { return bound_; }

  /// The fusion pass's decisions (FusionGroup.h), in the order they were added. A
  /// node belongs to at most one group; erasing a member, or a value a group names,
  /// dissolves the group.
  const FusionGroup *addFusionGroup(FusionGroup group);
  const std::vector<std::unique_ptr<FusionGroup>> &fusionGroups() const { return groups_; }
  void clearFusionGroups();

  /// A name not used by any value of the graph, derived from `hint`.
  std::string uniqueName(std::string_view hint = "");
  void renameValue(Value *v, std::string newName);
  Value *findValue(std::string_view name) const;

  std::unique_ptr<Graph> clone() const;

private:
  Value *registerValue(std::unique_ptr<Value> v, std::vector<std::unique_ptr<Value>> *owner);
  void dissolve(const FusionGroup *group);
  /// Dissolves the groups that name `v` (a GEMM epilogue's bias or residual).
  void dissolveGroupsNaming(const Value *v);

  std::string name_;
  std::vector<std::unique_ptr<Value>> inputs_;
  std::vector<std::unique_ptr<Value>> constants_;
  std::vector<std::unique_ptr<Value>> parameters_;
  NodeList nodes_;
  std::vector<GraphOutput> outputs_;
  std::vector<BoundInput> bound_;
  std::vector<std::unique_ptr<FusionGroup>> groups_;
  std::unordered_map<std::string, Value *> names_;
  uint64_t nextId_ = 0;
};

/// Verifies structure (use lists, def-before-use, outputs), schemas, op verifiers and
/// inferred types. Messages are prefixed with "file:line:col: " when nodes carry locations.
llvm::Error verifyGraph(const Graph &g, std::string_view fileName = "");
/// Verifies one node against the op table: operand count, attribute schema and the
/// op's own verifier. Does not look at result types.
llvm::Error verifyNodeSignature(const Node &n);
/// verifyNodeSignature plus: result types equal the op's inferred types.
llvm::Error verifyNode(const Node &n);

/// A user-facing error with a plain message.
inline llvm::Error makeError(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}
/// A user-facing error formatted with llvm::formatv ("{0} ... {1}").
template <class... Ts> llvm::Error errorf(const char *fmt, Ts &&...vals) {
  return makeError(llvm::formatv(fmt, std::forward<Ts>(vals)...).str());
}

} // namespace dlc::ir

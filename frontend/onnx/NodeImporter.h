//===- NodeImporter.h - The context handed to op handlers -------*- C++ -*-===//
#pragma once

#include "OnnxUtil.h"
#include "dlc/frontend/OnnxImporter.h"

#include <functional>
#include <set>
#include <unordered_map>

namespace dlc::frontend {

/// Maps ONNX value names to IR values; subgraphs (If branches) see their parents.
class Scope {
public:
  explicit Scope(Scope *parent = nullptr) : parent_(parent) {}
  ir::Value *lookup(const std::string &name) const;
  bool isPoisoned(const std::string &name) const;
  void bind(const std::string &name, ir::Value *v) { values_[name] = v; }
  /// Rebinds every name bound to `from` (in this scope and its parents) to `to`.
  void replaceValue(ir::Value *from, ir::Value *to);
  void poison(const std::string &name) { poisoned_.insert(name); }

private:
  Scope *parent_;
  std::unordered_map<std::string, ir::Value *> values_;
  std::set<std::string> poisoned_;
};

class Importer;

/// Everything a handler needs to translate one ONNX node.
class NodeImporter {
public:
  NodeImporter(Importer &imp, Scope &scope, const onnx::NodeProto &node, int64_t opset);

  const onnx::NodeProto &proto() const { return node_; }
  const std::string &opType() const { return node_.op_type(); }
  int64_t opset() const { return opset_; }
  ir::Graph &graph();
  Importer &importer() { return imp_; }
  Scope &scope() { return scope_; }

  // Inputs. Absent optional inputs (missing or named "") are null.
  size_t numInputs() const { return static_cast<size_t>(node_.input_size()); }
  ir::Value *input(size_t i) const;
  bool hasInput(size_t i) const { return input(i) != nullptr; }
  /// Data of input i when it is a compile-time constant, else null. A graph input
  /// listed in ImportOptions::specializable becomes a constant here.
  const ir::Tensor *constInput(size_t i);
  /// For an error about input i not being constant: when it is a graph input, how to
  /// bind it at compile time (" (it is the graph input ...: --bind ...)"), else "".
  std::string bindHint(size_t i) const;
  /// Input i as integers; it must be a constant ("what" names it in the error).
  llvm::Expected<std::vector<int64_t>> constInts(size_t i, const char *what);
  llvm::Expected<std::vector<float>> constFloats(size_t i, const char *what);

  // Attributes (with ONNX defaults given by the handler).
  const onnx::AttributeProto *attr(const std::string &name) const;
  bool hasAttr(const std::string &name) const { return attr(name) != nullptr; }
  int64_t attrInt(const std::string &name, int64_t dflt) const;
  float attrFloat(const std::string &name, float dflt) const;
  std::string attrString(const std::string &name, const std::string &dflt) const;
  std::vector<int64_t> attrInts(const std::string &name, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attrFloats(const std::string &name, std::vector<float> dflt = {}) const;
  std::vector<std::string> attrStrings(const std::string &name) const;
  llvm::Expected<ir::Tensor> attrTensor(const std::string &name) const;
  /// Converts the ONNX attributes listed in `names` (when present) to IR attributes,
  /// using the kinds of op `k`'s schema. Other attributes must be in `ignored`.
  llvm::Expected<ir::AttrMap> copyAttrs(ir::OpKind k,
                                        const std::vector<std::string> &ignored = {}) const;

  // Building. Nodes whose operands are all constants are folded on the spot.
  llvm::Expected<ir::Value *> op(ir::OpKind k, std::vector<ir::Value *> operands,
                                 ir::AttrMap attrs = {});
  llvm::Expected<std::vector<ir::Value *>> opMulti(ir::OpKind k, std::vector<ir::Value *> operands,
                                                   ir::AttrMap attrs, unsigned numResults);
  ir::Value *constant(ir::Tensor t, const std::string &hint = "");
  ir::Value *scalar(ir::DType dt, double v);
  ir::Value *ints(const std::vector<int64_t> &v);

  // Outputs.
  size_t numOutputs() const { return static_cast<size_t>(node_.output_size()); }
  bool wantsOutput(size_t i) const { return i < numOutputs() && !node_.output(i).empty(); }
  void setOutput(size_t i, ir::Value *v);

  /// The first attribute read with a type other than the one it holds (the accessors
  /// then return their default); the importer reports it as the node's error.
  const std::string &attrError() const { return attrError_; }

  // Errors; the importer prefixes file, node, op type and opset.
  llvm::Error error(const std::string &msg) const { return ir::makeError(msg); }
  llvm::Error unsupported(const std::string &what) const {
    return ir::makeError("unsupported: " + what);
  }

private:
  Importer &imp_;
  Scope &scope_;
  const onnx::NodeProto &node_;
  int64_t opset_;
  std::set<const ir::Value *> created_;
  mutable std::string attrError_;
  const onnx::AttributeProto *typedAttr(const std::string &name, int type) const;
};

using Handler = llvm::Error (*)(NodeImporter &);

/// The newest default-domain opset and IR version dlc imports.
constexpr int kMaxOpset = 23;
constexpr int64_t kMaxIrVersion = 11;
/// The newest opset the Debian ONNX library (1.12) knows: its checker, shape inference
/// and version converter run only on models up to it (and its IR version, 8).
constexpr int kLibraryMaxOpset = 17;
/// The contrib ops' domain version the handlers take (ONNX Runtime's is 1).
constexpr int kMaxContribOpset = 1;

/// ONNX Runtime's contrib operator domain.
inline constexpr const char *kMicrosoftDomain = "com.microsoft";

struct HandlerEntry {
  const char *opType;
  int sinceOpset; // inclusive, of the entry's domain
  int untilOpset; // inclusive
  Handler fn;
  const char *domain = ""; // "" is the default ONNX domain
  /// How many leading inputs must be present (-1: as the ONNX library's schema of the
  /// op says, where it has one). The importer checks them before the handler runs.
  int minInputs = -1;
};

/// Registration per op family (frontend/onnx/handlers/*.cpp).
void registerElementwiseHandlers(std::vector<HandlerEntry> &t);
void registerNnHandlers(std::vector<HandlerEntry> &t);
void registerShapeHandlers(std::vector<HandlerEntry> &t);
void registerReduceHandlers(std::vector<HandlerEntry> &t);
void registerControlHandlers(std::vector<HandlerEntry> &t);
void registerContribHandlers(std::vector<HandlerEntry> &t);
void registerAttentionHandlers(std::vector<HandlerEntry> &t);
void registerQuantHandlers(std::vector<HandlerEntry> &t);
void registerQLinearHandlers(std::vector<HandlerEntry> &t);

/// "node 'name' (OpType, opset N)" for messages.
std::string describeOnnxNode(const onnx::NodeProto &n, int64_t opset);

/// The handler entry for op type at opset of `domain` ("" or "ai.onnx": the default
/// domain), or null.
const HandlerEntry *findHandler(const std::string &domain, const std::string &opType,
                                int64_t opset);
/// Whether any opset of the op type in `domain` has a handler.
bool hasHandler(const std::string &domain, const std::string &opType);
/// Whether any op of `domain` has a handler.
bool knownDomain(const std::string &domain);
/// "" for the default domain's spellings ("" and "ai.onnx"), else the domain.
inline std::string canonicalDomain(const std::string &d) {
  return d == "ai.onnx" ? "" : d;
}
/// A reason when the op type is known to be out of scope (quantized, sequences, ...).
const char *outOfScopeReason(const std::string &opType);

/// State shared by all nodes of one import (implemented in Importer.cpp).
class Importer {
public:
  Importer(ir::Graph &g, const ImportOptions &opts, ExternalDataLoader &ext,
           std::unordered_map<std::string, int64_t> opsets)
      : g_(g), opts_(opts), ext_(ext), opsets_(std::move(opsets)) {}
  ir::Graph &graph() { return g_; }
  const ImportOptions &options() const { return opts_; }
  ExternalDataLoader &externalData() { return ext_; }
  int64_t opsetFor(const std::string &domain) const;

  /// Imports the nodes of a (sub)graph into the current graph; errors are collected,
  /// and outputs of failed nodes are poisoned so their users are skipped.
  void importNodes(const onnx::GraphProto &g, Scope &scope);
  /// Binds a subgraph's initializers in `scope`.
  /// Imports the graph's initializers as constants, taking their bytes out of `g`
  /// (the model's graph), or copying them (a subgraph).
  llvm::Error importInitializers(onnx::GraphProto &g, Scope &scope);
  llvm::Error importInitializers(const onnx::GraphProto &g, Scope &scope);
  /// What kind of problem an error of errors() is: an If branch whose every problem
  /// is of shapes or types can be deferred to run time (ControlHandlers.cpp).
  enum class ErrorKind { Unsupported, Structure, ShapeOrType };
  std::vector<std::string> &errors() { return errors_; }
  std::vector<ErrorKind> &errorKinds() { return errorKinds_; }
  /// Whether a constant was an INT4 or UINT4 initializer (read as i8 or u8).
  bool fourBit(const ir::Value *v) const { return fourBit_.count(v) != 0; }
  /// Guards and warnings of a branch that is dropped go with it: their counts now, and
  /// a rollback to them.
  size_t guardCount() const { return guards_.size(); }
  void dropGuardsFrom(size_t n) { guards_.resize(n); }
  /// The conditions under which the nodes being imported run (the taken sides of
  /// enclosing run-time Ifs, the gates of unrolled loop iterations): a guard added
  /// inside fails a run only when all of them hold.
  std::vector<ir::Value *> &runConditions() { return runConditions_; }
  /// Remarks the user must see (ImportResult::warnings).
  std::vector<std::string> &warnings() { return warnings_; }
  std::vector<std::string> &specialized() { return specialized_; }
  /// Guards (ir::kGuardOutputPrefix) that become outputs of the graph after the
  /// model's own.
  void addGuard(std::string name, ir::Value *v) { guards_.emplace_back(std::move(name), v); }
  const std::vector<std::pair<std::string, ir::Value *>> &guards() const { return guards_; }
  /// Charges one unrolled iteration of `body` against ImportOptions::maxUnrolledNodes:
  /// its nodes and initializers, and those of the subgraphs it imports with it (If
  /// branches; a nested Loop or Scan charges its own iterations). An error once the
  /// budget is spent.
  llvm::Error chargeUnrolled(const onnx::GraphProto &body);

private:
  int64_t bodyCost(const onnx::GraphProto &g);
  int64_t unrolledNodes_ = 0;
  std::unordered_map<const onnx::GraphProto *, int64_t> bodyCosts_;
  std::vector<std::pair<std::string, ir::Value *>> guards_;
  ir::Graph &g_;
  const ImportOptions &opts_;
  ExternalDataLoader &ext_;
  std::unordered_map<std::string, int64_t> opsets_;
  std::vector<std::string> errors_, warnings_;
  std::set<const ir::Value *> fourBit_;
  std::vector<ErrorKind> errorKinds_;
  std::vector<ir::Value *> runConditions_;
  std::vector<std::string> specialized_;
};

} // namespace dlc::frontend

//===- OpDef.h - The op table -----------------------------------*- C++ -*-===//
//
// One OpDef per op in ir/Ops.def, filled by the op's family file. The table is
// the single source of truth used by the verifier, the parser, the interpreter,
// the passes (fusion, precision, layout, autodiff, legalize) and code generation.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Attribute.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string_view>
#include <vector>

namespace dlc::ir {

class Node;
class Value;

enum class OpKind : uint16_t {
#define OP(NAME, FAMILY) NAME,
#include "dlc/ir/Ops.def"
};

inline constexpr size_t kNumOps = 0
#define OP(NAME, FAMILY) +1
#include "dlc/ir/Ops.def"
    ;

std::string_view opName(OpKind k);
std::optional<OpKind> opKindFromName(std::string_view name);

/// How one result dim of an injective op reads an operand: the operand's coordinate
/// along `dim` is start + step * c, c being the result coordinate (c mod `modulus`
/// when modulus > 0). dim < 0: this result dim does not index the operand (a
/// broadcast). Operand dims that no result dim reads are at coordinate 0.
struct DimAccess {
  int64_t dim = -1;
  int64_t start = 0, step = 1, modulus = 0;
};
/// An operand read at coordinates computed from the result element's: one DimAccess
/// per result dim.
struct OperandAccess {
  unsigned operand = 0;
  std::vector<DimAccess> dims;
  /// Result dim d reads operand dim d, unchanged (an operand of the result's rank).
  static OperandAccess identity(unsigned operand, int64_t rank);
};

/// Where an injective op's result element reads its operands (Fusibility::indexMap),
/// as a function of the element's coordinates. The code generator renders it as
/// index arithmetic in fused kernels; the reference kernels do not use it.
struct IndexMap {
  enum class Kind : uint8_t {
    Affine, // `access.operand` at `access`
    Gather, // operand 0 at `access`, whose dim `axis` is at the value of operand 1 read
            // at `indices` (negative values count from `axisSize`; values out of range
            // are a data error)
    Concat, // along result dim `axis`, piece k covers [start, start + size) and reads
            // its operand at its access
  };
  Kind kind = Kind::Affine;
  OperandAccess access;
  OperandAccess indices;
  int64_t axis = 0, axisSize = 0;
  struct Piece {
    int64_t start = 0, size = 0;
    OperandAccess access;
  };
  std::vector<Piece> pieces;
  /// An Affine map that permutes whole dims (Transpose): one operand element per
  /// result element and back, so an epilogue can map an index forwards.
  bool isPermutation() const;
};
using IndexMapFn = IndexMap (*)(const Node &);

/// What a library GEMM's epilogue (cuBLASLt) can apply of an element-wise op that
/// follows it: D = act(A*B + residual + bias).
enum class GemmEpilogueOp : uint8_t { None, Add, Relu, GeluTanh };
std::string_view gemmEpilogueOpName(GemmEpilogueOp op);
std::optional<GemmEpilogueOp> gemmEpilogueOpFromName(std::string_view name);

/// How an op takes part in fused kernels: the fusion pass and the code generator ask
/// this (ir::fusibility) and never an op's name. Multi-node patterns (attention, the
/// GEMM epilogue, update lanes) are in dlc/ir/FusionRules.h.
struct Fusibility {
  enum class Role : uint8_t {
    Unset,
    Opaque,      // kernels or library calls of its own; joins no group
    Metadata,    // the result is operand 0's bytes (a view): aliased, inlined for free
    Elementwise, // computes its element from its operands' elements at any index:
                 // OpDef::cudaExpr over numpy-broadcast operands (or operandAccess)
    Injective,   // reads one operand element at an index from its indexMap
    Anchor,      // a kernel template whose loads and stores take fused neighbours
  };
  Role role = Role::Unset;
  /// Injective: the index map.
  IndexMapFn indexMap = nullptr;
  /// Elementwise: operand k read at coordinates other than the numpy-broadcast ones
  /// (BatchNormalization's per-channel statistics); null or nullopt: broadcast.
  std::optional<OperandAccess> (*operandAccess)(const Node &, unsigned operand) = nullptr;
  /// Elementwise: the result is rounded to its storage type, as the op alone stores
  /// it; false keeps it in the compute type (FP32) inside the kernel (normalizations).
  bool roundsResult = true;
  /// Elementwise: what a library GEMM's epilogue applies of it.
  GemmEpilogueOp gemmEpilogue = GemmEpilogueOp::None;
  /// Anchor: its loads of the operands in prologueOperands (bit k: operand k) can be
  /// inlined producers; its stores can run element-wise consumers.
  bool prologue = false, epilogue = false;
  uint32_t prologueOperands = ~0u;
  /// Anchor: a library call that writes its result itself (a GEMM), so only the
  /// epilogue that the library applies (gemmEpilogue) joins it.
  bool libraryEpilogue = false;
  /// The node is opaque when this holds (null: never): BatchNormalization in
  /// training mode, an integer MatMul. Such an op needs a lowering of its own.
  bool (*opaqueWhen)(const Node &) = nullptr;
  /// Adjusts the capabilities for one node, never the role (null: the op's for every
  /// node): Gelu is a GEMM epilogue only in its tanh form.
  Fusibility (*refine)(const Node &) = nullptr;

  static Fusibility opaque() { return {Role::Opaque}; }
  static Fusibility metadata() { return {Role::Metadata}; }
  static Fusibility elementwise() { return {Role::Elementwise}; }
  static Fusibility injective(IndexMapFn map) {
    Fusibility f{Role::Injective};
    f.indexMap = map;
    return f;
  }
  static Fusibility anchor(bool prologue, bool epilogue) {
    Fusibility f{Role::Anchor};
    f.prologue = prologue;
    f.epilogue = epilogue;
    return f;
  }
  /// A kernel can compute the node's result at any index (metadata, element-wise,
  /// injective).
  bool inlinable() const {
    return role == Role::Metadata || role == Role::Elementwise || role == Role::Injective;
  }
  /// Whether node n (of this fusibility), inlined, reads operand k at the element it
  /// computes (a view's operand, or an element-wise operand of the result's shape
  /// without an access of its own).
  bool readsAtOwnIndex(const Node &n, unsigned k) const;
};
std::string_view fusionRoleName(Fusibility::Role r);
/// "elementwise", "anchor(prologue, epilogue)", ... for `dlc ops`.
std::string describeFusibility(const Fusibility &f);

/// What mixed-precision conversion may do with an op.
enum class Fp16Policy : uint8_t {
  Unset,
  Allow,   // safe and profitable in FP16 (kernels accumulate in FP32)
  Follow,  // no arithmetic: runs in whatever precision its inputs have
  Deny,    // numerically sensitive: keep FP32
  Convert, // a dtype conversion (Cast): reads any dtype, keeps its declared result; the
           // precision pass's own boundary op
};
std::string_view fp16PolicyName(Fp16Policy p);

/// What a node becomes when its data operands arrive in another layout (the
/// `layout` pass, NCHW -> NHWC). The pass offers a permutation `perm`: each data
/// operand is the logical tensor read through Transpose(perm) of the actual one.
struct LayoutRemap {
  enum class Operand : uint8_t {
    Actual,  // takes the actual (permuted) layout: the pass strips Transpose(perm), or
             // permutes a constant (rank-extended first when it broadcasts)
    AsIs,    // unchanged (a bias, a scalar)
    Permute, // gets Transpose(operandPerm) in front (a conv's weights to OHWI)
  };
  std::vector<Operand> operands;                  // one per operand
  std::vector<std::vector<int64_t>> operandPerms; // for Permute operands
  AttrMap attrs;                                  // attributes to set on the node
  /// The results are the logical ones read through Transpose(resultPerm).
  std::vector<int64_t> resultPerm;
};
/// Returns the remapped node for operands laid out by `perm`, or nullopt when the
/// op cannot work in that layout (the transpose then stays in front of it).
using LayoutRemapFn = std::optional<LayoutRemap> (*)(const Node &n,
                                                     const std::vector<int64_t> &perm);

/// How an op depends on the memory layout of its operands (for NCHW -> NHWC).
struct LayoutRule {
  enum Kind : uint8_t {
    Unset,
    Agnostic,    // element-wise: any layout, as long as operands agree
    ChannelAxis, // has a channel axis (`axis`); channels-last variants exist
    AxisAttrs,   // has axis/perm attributes that must be remapped with the layout
    Fixed,       // semantics tied to the logical row-major order (reshape, flatten)
  };
  Kind kind = Unset;
  int channelAxis = -1;
  /// The remap hook (null: the op is a layout barrier).
  LayoutRemapFn remap = nullptr;

  static LayoutRule agnostic();
  static LayoutRule channel(int axis, LayoutRemapFn remap = nullptr) {
    return {ChannelAxis, axis, remap};
  }
  static LayoutRule axisAttrs(LayoutRemapFn remap = nullptr) { return {AxisAttrs, -1, remap}; }
  static LayoutRule fixed() { return {Fixed, -1, nullptr}; }
};
/// The element-wise remap (LayoutRule::agnostic's hook): every operand of the
/// result's rank, or that broadcasts along a non-unit dim, takes the actual layout.
std::optional<LayoutRemap> remapElementwise(const Node &n, const std::vector<int64_t> &perm);
/// Transpose permutations between channels-first (N, C, D1..Dk) and channels-last
/// (N, D1..Dk, C) for a tensor of `rank`: Transpose(channelsLastPerm) of an NCHW
/// tensor is its NHWC form, and Transpose(channelsFirstPerm) of that is NCHW again.
std::vector<int64_t> channelsLastPerm(int64_t rank);
std::vector<int64_t> channelsFirstPerm(int64_t rank);
/// The inverse permutation.
std::vector<int64_t> inversePerm(const std::vector<int64_t> &perm);
inline LayoutRule LayoutRule::agnostic() {
  return {Agnostic, -1, &remapElementwise};
}
std::string_view layoutRuleName(LayoutRule::Kind k);

struct AttrSpec {
  std::string name;
  AttrKind kind;
  /// Default value; absent means the attribute is required.
  std::optional<Attribute> dflt;
};

/// Checks operand dtypes/ranks and attribute values (operand counts and attribute
/// names/kinds are checked generically from the schema first).
using VerifyFn = llvm::Error (*)(const Node &);
/// Computes result types from operand types, attributes and constant operands.
using InferFn = llvm::Expected<std::vector<TensorType>> (*)(const Node &);
/// Reference kernel: naive, obviously correct. `out` is pre-allocated with the result types.
using RefFn = llvm::Error (*)(const Node &, const std::vector<const Tensor *> &in,
                              std::vector<Tensor> &out);

class GradBuilder; // dlc/ir/GradBuilder.h
/// Gradient rule: builds the vector-Jacobian product of the node with the builder
/// (dlc/ir/GradBuilder.h); an error says the node's attributes are not supported.
using GradFn = llvm::Error (*)(GradBuilder &, const Node &);
/// Rewrites a node as simpler ops (built with the builder, appended to the graph)
/// and returns the values that replace its results. Autodiff decomposes an op that
/// has no gradient rule of its own; an error says which form is not supported.
using DecomposeFn = llvm::Expected<std::vector<Value *>> (*)(GradBuilder &, const Node &);
class Graph;
/// Puts a node into its training-mode form where that differs from inference
/// (BatchNormalization: batch statistics; its running statistics become state
/// variables that the step updates). May replace the node.
using TrainingFormFn = llvm::Error (*)(Graph &g, Node &n);
/// Builds a node's inference-mode form on `operands` (the evaluation schedule beside
/// a training step) where it differs from a copy: BatchNormalization on its running
/// statistics, Dropout the identity. Returns the values standing for the node's
/// results (null for a result the form does not have), or nullopt: copy the node.
using InferenceFormFn = std::optional<std::vector<Value *>> (*)(
    Graph &g, const Node &n, const std::vector<Value *> &operands);
/// Refines an op's FP16 policy for one node (e.g. Pow by a constant 2 is safe).
using Fp16RefineFn = Fp16Policy (*)(const Node &);

inline constexpr int kVariadic = -1;

struct OpDef {
  OpKind kind{};
  std::string_view name;
  int minOperands = 0;
  int maxOperands = 0; // kVariadic: unbounded
  int minResults = 1;
  int maxResults = 1; // kVariadic: decided by the node (Split)
  std::vector<AttrSpec> attrs;
  Fusibility fusibility;
  Fp16Policy fp16 = Fp16Policy::Unset;
  Fp16RefineFn fp16Refine = nullptr; // null: `fp16` for every node
  LayoutRule layout;
  VerifyFn verify = nullptr;
  InferFn infer = nullptr;
  RefFn reference = nullptr;
  /// Null: the op is not differentiable (autodiff reports it when a parameter's
  /// gradient would have to flow through it).
  GradFn gradient = nullptr;
  /// Null: the op is differentiated through its own rule or not at all.
  DecomposeFn decompose = nullptr;
  /// The op has no kernel of its own: the `legalize` pass (before fusion, at every
  /// -O level, after the precision and layout passes have settled its dtypes and
  /// layout) replaces each node by what this builds. Codegen never sees the op...
  DecomposeFn legalize = nullptr;
  /// ... except the nodes for which this says true: those the code generator has a
  /// kernel for (RMSNormalization in FP32/FP16/BF16 with an FP32 stash: row_norm).
  bool (*hasKernel)(const Node &) = nullptr;
  /// A faster equivalent form that the canonicalize pass substitutes for the node
  /// (ConvTranspose: a convolution, which the implicit-GEMM and tensor-core kernels
  /// run). An error leaves the node as it is; the hook decides before it builds.
  DecomposeFn canonical = nullptr;
  /// Training and inference forms, where an op has both (null: the same in both).
  TrainingFormFn trainingForm = nullptr;
  InferenceFormFn inferenceForm = nullptr;
  /// Float operands that are state, not weights: a constant used only there does
  /// not become a trainable parameter (BatchNormalization's running statistics).
  std::vector<unsigned> stateOperands;
  /// Element-wise CUDA expression template over operands $0, $1, ... and
  /// attributes ${name}, e.g. "tanhf($0)".
  const char *cudaExpr = nullptr;
  /// Operands (bit k: operand k) that are quantization parameters (a scale, a zero
  /// point): what computes only them stays FP32 under the precision pass, as the
  /// file computes them (DynamicQuantizeLinear's range, a QDQ multiplier), and a node
  /// that runs in reduced precision keeps them FP32 (MatMulNBits's scales).
  uint32_t fp32Operands = 0;
  /// Whether a node only moves its data operands' values or selects among them by
  /// order (a transpose, a slice, a concatenation, a max over windows that are never
  /// empty; views, the Metadata fusion role, always do): Op(DequantizeLinear(x), ...)
  /// is DequantizeLinear(Op(x, ...)) at one positive per-tensor scale, so quantized
  /// data passes through it (fold-qdq). Null: never. The data operands are those of
  /// the result's type; the others, if any, are not data.
  bool (*movesValues)(const Node &) = nullptr;
  /// A binary element-wise op's neutral element (x + 0, x * 1): a constant operand
  /// of it leaves the other operand unchanged (canonicalize drops the op); on the
  /// right only, unless `eitherSide` (x - 0, but not 0 - x).
  struct Neutral {
    double value;
    bool eitherSide;
  };
  std::optional<Neutral> neutral;
  /// Operand 0 chooses, element by element, between operands 1 and 2 (Where): under
  /// a single-element condition computed at run time, only the chosen side's
  /// producers need to run.
  bool selects = false;

  const AttrSpec *findAttr(std::string_view n) const;
};

const OpDef &opDef(OpKind k);
/// The fusibility of one node: its op's, refined for the node (Fusibility::refine);
/// a node whose results other than the first are in use is opaque (they need memory
/// of their own).
Fusibility fusibility(const Node &n);

/// Fluent helper used by the family files to fill an OpDef.
class OpBuilder {
public:
  explicit OpBuilder(OpDef &d) : d_(d) {}
  OpBuilder &operands(int min, int max) {
    return d_.minOperands = min, d_.maxOperands = max, *this;
  }
  OpBuilder &operands(int n) { return operands(n, n); }
  OpBuilder &results(int min, int max) { return d_.minResults = min, d_.maxResults = max, *this; }
  OpBuilder &results(int n) { return results(n, n); }
  OpBuilder &attr(std::string name, AttrKind kind, std::optional<Attribute> dflt = std::nullopt) {
    d_.attrs.push_back({std::move(name), kind, std::move(dflt)});
    return *this;
  }
  OpBuilder &fusible(Fusibility f) { return d_.fusibility = f, *this; }
  OpBuilder &fp16(Fp16Policy p) { return d_.fp16 = p, *this; }
  OpBuilder &fp16(Fp16Policy p, Fp16RefineFn refine) {
    return d_.fp16 = p, d_.fp16Refine = refine, *this;
  }
  OpBuilder &layout(LayoutRule r) { return d_.layout = r, *this; }
  OpBuilder &verify(VerifyFn f) { return d_.verify = f, *this; }
  OpBuilder &infer(InferFn f) { return d_.infer = f, *this; }
  OpBuilder &reference(RefFn f) { return d_.reference = f, *this; }
  OpBuilder &cudaExpr(const char *e) { return d_.cudaExpr = e, *this; }
  OpBuilder &fp32Operands(uint32_t mask) { return d_.fp32Operands = mask, *this; }
  OpBuilder &movesValues(bool (*when)(const Node &) = [](const Node &) { return true; }) {
    return d_.movesValues = when, *this;
  }
  OpBuilder &selects() { return d_.selects = true, *this; }
  OpBuilder &neutral(double value, bool eitherSide) {
    return d_.neutral = OpDef::Neutral{value, eitherSide}, *this;
  }
  OpBuilder &gradient(GradFn f) { return d_.gradient = f, *this; }
  OpBuilder &decompose(DecomposeFn f) { return d_.decompose = f, *this; }
  OpBuilder &canonical(DecomposeFn f) { return d_.canonical = f, *this; }
  OpBuilder &legalize(DecomposeFn f, bool (*hasKernel)(const Node &) = nullptr) {
    d_.legalize = f;
    d_.hasKernel = hasKernel;
    return *this;
  }
  OpBuilder &modes(TrainingFormFn training, InferenceFormFn inference) {
    return d_.trainingForm = training, d_.inferenceForm = inference, *this;
  }
  OpBuilder &stateOperands(std::vector<unsigned> ops) {
    return d_.stateOperands = std::move(ops), *this;
  }

private:
  OpDef &d_;
};

/// The table under construction, handed to each family's define function.
class OpTable {
public:
  OpBuilder def(OpKind k);
  OpDef &operator[](OpKind k) { return defs_[static_cast<size_t>(k)]; }
  const OpDef &operator[](OpKind k) const { return defs_[static_cast<size_t>(k)]; }

private:
  OpDef defs_[kNumOps];
};

#define FAMILY(F) void define##F##Ops(OpTable &table);
#define OP(N, F)
#include "dlc/ir/Ops.def"

} // namespace dlc::ir

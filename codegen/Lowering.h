//===- Lowering.h - IR nodes to kernels, library calls and buffers --------===//
//
// Lowering walks the graph in order. A fusion group (ir::FusionGroup, recorded by
// the fusion pass) is lowered by its kind's function, a node alone by its op's, both
// found in the LoweringRegistry that the emitters (emitters/*.cpp) fill; an
// inlinable node alone is a one-node group. An emitter asks the Lowering for operand
// and result buffers, instantiates kernel-library templates with generated functors
// (Library.h, Fused.h) and launches them, or adds library calls (GEMM), copies and
// memsets. The result is a Program: kernel instantiations plus a linear schedule
// over buffers.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/codegen/Compiler.h"
#include "dlc/ir/Graph.h"
#include "dlc/package/Package.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

namespace dlc::codegen {

/// A text stream with RAII indentation, for generated code.
class CodeStream {
public:
  CodeStream &line(const std::string &s = "") {
    if (!s.empty())
      os_ << std::string(2 * indent_, ' ') << s;
    os_ << '\n';
    return *this;
  }
  struct Indent {
    CodeStream &cs;
    explicit Indent(CodeStream &c) : cs(c) { ++cs.indent_; }
    ~Indent() { --cs.indent_; }
  };
  /// Opens "head {" and closes "}" when the returned guard dies.
  struct Block {
    CodeStream &cs;
    Block(CodeStream &c, const std::string &head) : cs(c) {
      cs.line(head + " {");
      ++cs.indent_;
    }
    ~Block() {
      --cs.indent_;
      cs.line("}");
    }
  };
  void indent() { ++indent_; }
  void unindent() { --indent_; }
  std::string str() const { return os_.str(); }

private:
  std::ostringstream os_;
  int indent_ = 0;
};

/// CUDA storage type of a dtype ("float", "__half", ...).
const char *cudaType(ir::DType t);
/// CUDA compute type: float for f32/f16/bf16, double for f64, long long for signed
/// integers, unsigned long long for unsigned, bool for bool (as the interpreter).
const char *computeType(ir::DType t);
pkg::DType toPkg(ir::DType t);
/// A C++ literal of the compute type of dt with value v (exact, hex floats).
std::string literal(ir::DType dt, double v);
std::string literalInt(int64_t v);

struct BufferDesc {
  pkg::Region region = pkg::Region::Arena;
  uint64_t bytes = 0;
  uint64_t offset = 0; // assigned by the memory plan
  std::string name;    // value name, for inspection
  int weightIndex = -1;
};

struct BufferRef {
  uint32_t buffer = 0;
  uint64_t offset = 0; // bytes
};

/// A launch's parameter buffer: bytes in the kernel's parameter ABI layout, and the
/// 8-byte slots where the runtime writes device addresses.
struct ParamBlob {
  std::vector<uint8_t> bytes;
  std::vector<std::pair<uint32_t, BufferRef>> relocs;
  /// Appends `n` bytes at an offset aligned to `align`.
  void raw(const void *data, size_t n, size_t align);
  void pointer(BufferRef r);
  void i64(int64_t v);
};

struct KernelDesc {
  std::string name;   // unique, readable (emu modules export kernels by this name)
  std::string symbol; // the function's name in GPU modules
  std::string source; // the definition (generated kernels) or explicit instantiation
  /// The emu entry point: a statement calling the kernel with its parameters read
  /// from `const char *p` (the launch's parameter buffer).
  std::string emuCall;
  std::string templateName;
  /// For a template instantiation: "&dlc::tmpl<...>", whose mangled name NVRTC gives.
  std::string nameExpr;
  /// The generated functors it uses (Program::functors).
  std::vector<std::string> functors;
  /// Identity of a library instantiation (template and arguments): equal keys, one kernel.
  std::string key;
  bool needsSync = false;
  bool cooperative = false;
  bool tensorCore = false, tf32 = false, integer = false, fp8 = false;
  uint32_t chunk = 0;
  std::string node;
};

struct LaunchStep {
  uint32_t kernel;
  uint32_t grid[3], block[3];
  uint32_t smem;
  ParamBlob params;
  uint64_t bytesRead = 0, bytesWritten = 0; // the cost model
  double flops = 0;
  /// (input, output) buffers the kernel reads and writes element for element at the
  /// same index: the output may take the input's memory where the input dies here.
  std::vector<std::pair<uint32_t, uint32_t>> inplace;
};
struct GemmStep {
  ir::DType dtype;
  bool transA = false, transB = false;
  int64_t m, n, k, batch = 1;
  BufferRef a, b, c;
  int64_t lda, ldb, ldc, strideA = 0, strideB = 0, strideC = 0;
  float alpha = 1, beta = 0;
  // Epilogue (cuBLASLt): D = act(alpha * AB + beta * Cin + bias); Cin = c if unset.
  std::optional<BufferRef> bias, cIn;
  pkg::GemmActivation activation = pkg::GemmActivation::None;
  /// cuBLASLt's workspace: arena memory planned like any temporary.
  BufferRef workspace;
  uint64_t workspaceBytes = 0;
  /// Bias and activation as a kernel over the output, for when no cuBLASLt algorithm
  /// applies the epilogue (the runtime then calls the GEMM without it).
  std::optional<LaunchStep> fallback;
  /// FP32 inputs rounded to TF32 on tensor cores (set by Lowering::addGemm).
  bool tf32 = false;
  /// Tactics: cuBLASLt's heuristic algorithm of this rank (pkg::Gemm::algo_rank).
  uint8_t algoRank = 0;
};

/// A convolution for cuDNN's graph API (pkg::CudnnConv): channels-last x, w and y of
/// one 16-bit dtype; the spatial vectors have 2 or 3 entries.
struct CudnnConvStep {
  ir::DType dtype;
  BufferRef x, w, y;
  int64_t n = 0, c = 0, k = 0, groups = 1;
  std::vector<int64_t> in, out, kernel, stride, dilation, padBegin, padEnd;
  BufferRef workspace;
  uint64_t workspaceBytes = 0;
  std::optional<BufferRef> bias; // [k], added by cuDNN
  bool relu = false;             // ... then ReLU
};

/// Attention for cuDNN's graph API (pkg::CudnnSdpa): [b, h, rows, cols] views at the
/// given element strides.
struct CudnnSdpaStep {
  ir::DType dtype;
  BufferRef q, k, v, o;
  int64_t b = 1, h = 1, sq = 0, sk = 0, d = 0, dv = 0;
  std::array<int64_t, 4> qStrides{}, kStrides{}, vStrides{}, oStrides{};
  float scale = 1;
  bool causal = false;
  BufferRef workspace;
  uint64_t workspaceBytes = 0;
};

struct CopyStep {
  BufferRef src, dst;
  uint64_t bytes;
};
struct MemsetStep {
  BufferRef dst;
  uint64_t bytes;
  uint8_t value;
};
/// A collective of data-parallel training (pkg::Collective): `sources` are copied
/// into `staging` at `offsets` when the step runs; an all-reduce averages staging in
/// place, a reduce-scatter or all-gather writes `output`, beside the following steps
/// until the bucket's CollectiveWaitStep; a shard copies this rank's share of staging
/// to `output` at once.
struct CollectiveStep {
  pkg::CollectiveOp op = pkg::CollectiveOp::AllReduce;
  uint32_t bucket = 0;
  ir::DType dtype = ir::DType::F32;
  BufferRef staging;
  uint64_t count = 0; // elements of staging
  std::vector<BufferRef> sources;
  std::vector<uint64_t> offsets, sizes; // bytes
  uint32_t ranks = 0;                   // reduce-scatter, all-gather, shard
  std::optional<BufferRef> output;      // reduce-scatter, all-gather, shard
  /// The buffer the step's readers read: staging, or the output.
  BufferRef result() const { return output ? *output : staging; }
};
struct CollectiveWaitStep {
  uint32_t bucket = 0;
  BufferRef staging;
  std::optional<BufferRef> output;
};
/// The schedules a step belongs to (pkg::Step::schedules).
enum ScheduleBits : uint8_t { kMainSchedule = 1, kEvalSchedule = 2 };

/// A step that runs only when a single-element bool condition has a value: it feeds
/// only one side of an If's Where (ir::selectsByRuntimeCondition).
struct StepPredicate {
  BufferRef cond;
  bool when = true;
};

struct StepDesc {
  std::variant<LaunchStep, GemmStep, CopyStep, MemsetStep, CollectiveStep, CollectiveWaitStep,
               CudnnConvStep, CudnnSdpaStep>
      op;
  std::string node;
  std::vector<std::string> archs; // empty: every architecture
  uint8_t schedules = kMainSchedule;
  std::optional<StepPredicate> predicate = std::nullopt;
  /// pkg::Step::alt_group and alt: 1 runs where the group's cooperative launch fits
  /// the device at once, 2 where it does not.
  uint32_t altGroup = 0;
  uint8_t alt = 0;
  /// Tactics (pkg::Step::tactic): who implements alternative `alt` of a timed group.
  pkg::TacticKind tactic = pkg::TacticKind::None;
  std::string tacticDesc = {};
};

struct TensorDesc {
  std::string name;
  ir::TensorType type;
  uint32_t buffer;
};

/// A variable (ir::Value::isParameter): a pinned arena buffer that the session
/// initializes from `initial` and that the schedule's update copies write.
struct VariableDesc {
  std::string name;
  ir::Tensor initial;
  uint32_t buffer;
  bool trainable;
  bool sharded = false; // ZeRO-1 optimizer state (ir::kShardedStatePrefix)
};

/// A launch's word of the check buffer (pkg::Check).
struct CheckDesc {
  uint64_t offset;
  std::string node, what;
};

/// The schedule of one point of a shape-range package other than its opt shape
/// (pkg::ShapeVariant): its own buffers and steps over the program's kernels and weights.
struct ScheduleVariant {
  std::vector<BufferDesc> buffers;
  std::vector<StepDesc> steps;
  std::vector<TensorDesc> inputs, outputs;
  uint64_t arenaBytes = 0, maxLiveBytes = 0;
  std::vector<CheckDesc> checks;
  uint32_t checkBuffer = 0;
};

/// Everything codegen produced for one graph.
struct Program {
  std::string modelName;
  std::vector<BufferDesc> buffers;
  std::vector<ir::Tensor> weights; // initial contents, indexed by BufferDesc::weightIndex
  std::vector<KernelDesc> kernels;
  std::vector<StepDesc> steps;
  std::vector<TensorDesc> inputs, outputs;
  /// A training package's evaluation schedule: its outputs (the model in inference
  /// mode, named without ir::kEvalOutputPrefix); its steps have kEvalSchedule.
  std::vector<TensorDesc> evalOutputs;
  std::vector<VariableDesc> variables;
  /// Inputs bound to constants at compile time (ir::Graph::boundInputs).
  std::vector<ir::Graph::BoundInput> boundInputs;
  /// The trailing steps that commit the graph's updates.
  uint32_t commitSteps = 0;
  uint64_t arenaBytes = 0, weightBytes = 0;
  /// The memory plan's figures (MemoryPlan.h).
  uint64_t naiveArenaBytes = 0, maxLiveBytes = 0;
  /// Check words (zeroed by the schedule's first step, read by the runtime after it).
  std::vector<CheckDesc> checks;
  uint32_t checkBuffer = 0;
  /// The complete CUDA translation unit (all kernels, plus the emu thunks under DLC_EMU).
  std::string source;
  /// The translation units compiled separately (and cached per chunk): each has its
  /// kernels' code and emu thunks.
  std::vector<std::string> chunkSources;
  /// Generated functors by name (content-derived, so shared across layers).
  std::map<std::string, std::string> functors;
  /// Shape-range packages: the ranges, and the schedules of the other shapes.
  std::vector<ShapeRangeDesc> shapeRanges;
  std::vector<ScheduleVariant> variants;
  /// Data-parallel training: the gradient buckets' size limit (0: not data parallel),
  /// and with ZeRO-1 the world size the optimizer state is sharded over.
  uint64_t bucketBytes = 0;
  uint32_t zeroRanks = 0;
};

/// Assigns the kernels to chunks and writes `source` and `chunkSources` (after
/// lowering, and again after kernels of other shape variants joined).
void buildTranslationUnits(Program &p);

class Lowering;
struct Functor;
struct Instantiation;
class LaunchArgs;

struct LoweringOptions {
  /// The GPU architectures kernels are planned for ("sm_80", ...); tile choices may
  /// differ per architecture. Empty: plan for sm_90.
  std::vector<std::string> archs;
  /// Recurrent layers run as one persistent kernel where they fit.
  bool persistentRnn = true;
  /// 64-bit indices everywhere (tests: the wide instantiations on small shapes).
  bool wideIndices = false;
  /// --conv-tile (and tests): every implicit-GEMM convolution takes the tile of this
  /// name ("BMxBN/WMxWN") where its family has one (empty: the model's choice).
  std::string convTile;
  /// --attention-kernel: "mma", "cuda-core", or "" (the model's choice).
  std::string attentionKernel;
  /// Vendor alternatives (cuDNN) beside our kernels (CompileOptions::vendorTactics).
  bool vendorTactics = true;
  /// Our second-best tile as another alternative (with vendorTactics, for packages
  /// with a cubin: emu always runs the first).
  bool secondTiles = false;
  /// --deterministic: floating-point scatter-adds (MaxPool's and Gather's gradients)
  /// give the same bits on every run (fixed-point sums), not atomic float adds.
  bool deterministic = false;
  /// FP32 GEMMs on tensor cores in TF32 (cuBLASLt's fast-TF32 compute), and FP32
  /// convolutions where the model prices TF32 faster (always with tf32Everywhere).
  bool tf32 = false, tf32Everywhere = false;
  /// INT8 convolutions on tensor cores whatever the model prices (tests).
  bool int8TensorCoresEverywhere = false;
};

class Lowering {
public:
  explicit Lowering(const ir::Graph &g, LoweringOptions opts = {});
  llvm::Expected<Program> run();

  // Buffers.
  BufferRef bufferOf(const ir::Value *v);
  /// Gives `result` its own new arena buffer.
  BufferRef allocate(const ir::Value *result);
  /// Makes `result` share `operand`'s memory (metadata-only ops such as Reshape).
  void alias(const ir::Value *result, const ir::Value *operand);
  /// The steps that commit the graph's updates at the end of the schedule: the
  /// update lanes' multi-tensor kernels, then a copy per other update.
  llvm::Error addUpdateSteps();
  /// Puts each all-reduce's wait right before the first later step that reads its
  /// bucket (or at the end).
  void addCollectiveWaits();
  /// Per node (in `nodes` order), the schedules whose outputs it reaches.
  std::vector<uint8_t> scheduleMasks(const std::vector<const ir::Node *> &nodes) const;
  /// Per node, the run-time condition its result is needed under: (cond, when) if it
  /// feeds only the `when` side of Where nodes selecting by the same condition
  /// (ir::selectsByRuntimeCondition), else none (always needed).
  std::vector<std::optional<std::pair<const ir::Value *, bool>>>
  predicates(const std::vector<const ir::Node *> &nodes) const;
  /// Binds a value to an existing buffer (e.g. a constant computed at compile time).
  void bind(const ir::Value *v, BufferRef r);
  /// A buffer for one node's steps (its lifetime is theirs: the memory plan reuses it).
  BufferRef temp(uint64_t bytes, const std::string &name);
  /// Lets the last launch write `out` over `in` (LaunchStep::inplace).
  void allowInPlace(uint32_t in, uint32_t out);
  /// A 32-bit check word for a launch of `n` that can meet bad data (`what`: what the
  /// runtime reports when the launch writes a nonzero code into it).
  BufferRef checkWord(const ir::Node &n, const std::string &what);
  BufferRef checkWord(const std::string &node, const std::string &what);
  uint64_t bufferBytes(uint32_t buffer) const { return p_.buffers[buffer].bytes; }
  BufferRef constantBuffer(const ir::Tensor &t, const std::string &name);

  // Steps.
  void addGemm(const GemmStep &g, const ir::Node &n);
  void addCopy(BufferRef src, BufferRef dst, uint64_t bytes, const ir::Node &n);
  void addMemset(BufferRef dst, uint64_t bytes, uint8_t v, const ir::Node &n);
  void addCollective(CollectiveStep s, const ir::Node &n);
  /// Records the data-parallel bucket size limit (Program::bucketBytes).
  void setBucketBytes(uint64_t bytes) { p_.bucketBytes = std::max(p_.bucketBytes, bytes); }
  /// Records the world size ZeRO-1 shards over (Program::zeroRanks).
  void setZeroRanks(uint32_t ranks) { p_.zeroRanks = ranks; }
  /// The next all-reduce's number (the runtime's key for its wait), in schedule order.
  uint32_t nextBucket() { return buckets_++; }

  // The kernel library (Library.h).
  /// Registers a functor's definition; returns its name (identical functors, one name).
  std::string functorName(const Functor &f);
  /// The kernel for an instantiation: one kernel per distinct instantiation.
  uint32_t instantiate(const Instantiation &inst);
  /// Whether an identical instantiation exists already (it would cost no compile time).
  bool instantiated(const Instantiation &inst) const;
  /// Appends a launch of a library kernel (`args` in its argument struct's order).
  void launch(const ir::Node &n, uint32_t kernel, LaunchArgs &args, uint32_t gridX, uint32_t block,
              uint32_t smem = 0, double flops = 0, uint32_t gridY = 1, uint32_t gridZ = 1,
              std::vector<std::string> archs = {});
  /// The launch step `launch` would append, without appending it (a GEMM's fallback).
  LaunchStep makeLaunch(uint32_t kernel, LaunchArgs &args, uint32_t gridX, uint32_t block,
                        uint32_t smem = 0, double flops = 0, uint32_t gridY = 1,
                        uint32_t gridZ = 1);

  const std::vector<std::string> &archs() const { return opts_.archs; }
  const LoweringOptions &options() const { return opts_; }
  /// A launch step named `stepName` (one that lowers no single node).
  void launch(const std::string &stepName, uint32_t kernel, LaunchArgs &args, uint32_t gridX,
              uint32_t block, double flops);
  /// The index type of a kernel whose indices stay below maxIndex: "dlc::idx32" (int)
  /// when they fit in 32 bits (with room for a grid-stride step), else "dlc::idx64".
  const char *indexType(int64_t maxIndex) const;

  /// Alternative schedules of one node (StepDesc::altGroup): a new group, the steps
  /// appended so far, and marking steps [from, now) as alternative `alt` of `group`.
  uint32_t newAltGroup() { return ++altGroups_; }
  size_t stepCount() const { return p_.steps.size(); }
  /// A step belongs to one group: a range that becomes a persistent kernel's per-step
  /// alternative (tactic None) keeps only alternative 1 (the default) of the tactic
  /// groups inside it.
  void markAlt(size_t from, uint32_t group, uint8_t alt,
               pkg::TacticKind tactic = pkg::TacticKind::None, const std::string &desc = "");
  /// Appends a cuDNN convolution or attention step (a vendor tactic).
  void addCudnnConv(const CudnnConvStep &c, const ir::Node &n);
  void addCudnnSdpa(const CudnnSdpaStep &a, const ir::Node &n);

  /// Plans something per target architecture (`plan(arch)`, a comparable value) and
  /// groups the architectures that get the same plan. With one group, its
  /// architecture list is empty: its steps run everywhere.
  template <class Plan, class F>
  std::vector<std::pair<Plan, std::vector<std::string>>> perArch(F plan) const {
    std::vector<std::pair<Plan, std::vector<std::string>>> groups;
    for (const std::string &a : opts_.archs) {
      Plan p = plan(a);
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const auto &g) { return g.first == p; });
      if (it == groups.end())
        groups.push_back({p, {a}});
      else
        it->second.push_back(a);
    }
    if (groups.size() == 1)
      groups[0].second.clear();
    return groups;
  }

  const ir::Graph &graph() const { return g_; }
  /// Graph inputs and outputs and their views: the caller may bind them to its own
  /// device memory, aligned to the element only (no vector loads there).
  bool isInterface(const ir::Value *v) const { return interface_.count(v) != 0; }
  /// The fusion group being lowered (null for a node alone): an anchor's emitter
  /// builds its load and store functors from it.
  const ir::FusionGroup *group() const { return group_; }
  /// Lowers a node alone: by its op's lowering, or as a one-node group when it is
  /// inlinable; an error names the node when there is neither.
  llvm::Error lowerNode(const ir::Node &n);

private:
  llvm::Error lowerGroup(const ir::FusionGroup &g);
  const ir::FusionGroup *group_ = nullptr;
  const ir::Graph &g_;
  LoweringOptions opts_;
  Program p_;
  uint32_t altGroups_ = 0;
  std::map<const ir::Value *, BufferRef> valueBuffers_;
  std::set<const ir::Value *> interface_;
  std::map<std::string, uint32_t> instances_;  // instantiation key -> kernel
  std::vector<const ir::FusionGroup *> lanes_; // the update lanes, lowered last
  uint32_t buckets_ = 0;
};

/// How each op and each kind of fusion group is lowered (TVM's FLegalize): every
/// emitter file registers its functions (register*Lowerings). The fusion pass has
/// decided the groups; a group's function reads its record and never re-matches.
using NodeLowering = llvm::Error (*)(Lowering &, const ir::Node &);
using GroupLowering = llvm::Error (*)(Lowering &, const ir::FusionGroup &);
class LoweringRegistry {
public:
  void op(ir::OpKind k, NodeLowering f);
  void group(ir::GroupKind k, GroupLowering f);
  NodeLowering forOp(ir::OpKind k) const { return ops_[static_cast<size_t>(k)]; }
  GroupLowering forGroup(ir::GroupKind k) const { return groups_[static_cast<size_t>(k)]; }

private:
  NodeLowering ops_[ir::kNumOps] = {};
  GroupLowering groups_[static_cast<size_t>(ir::GroupKind::UpdateLane) + 1] = {};
};
/// The registry, filled once by every emitter file.
const LoweringRegistry &loweringRegistry();
void registerLinalgLowerings(LoweringRegistry &r);
void registerConvLowerings(LoweringRegistry &r);
void registerPoolLowerings(LoweringRegistry &r);
void registerNormLowerings(LoweringRegistry &r);
void registerReduceLowerings(LoweringRegistry &r);
void registerMovementLowerings(LoweringRegistry &r);
void registerIndexLowerings(LoweringRegistry &r);
void registerResizeLowerings(LoweringRegistry &r);
void registerRecurrentLowerings(LoweringRegistry &r);
void registerLossLowerings(LoweringRegistry &r);
void registerCollectiveLowerings(LoweringRegistry &r);
void registerAttentionLowerings(LoweringRegistry &r);
void registerFusedLowerings(LoweringRegistry &r);

/// Kernels use 32-bit indices when every index they compute stays below this
/// (leaving room for a grid-stride step past the end).
inline constexpr int64_t kMax32BitIndex = (int64_t{1} << 31) - (int64_t{1} << 26);

/// Kernels are split into chunks of about this many, compiled separately (in
/// parallel, and cached per chunk), but never more than kMaxChunks.
inline constexpr size_t kKernelsPerChunk = 12;
inline constexpr size_t kMaxChunks = 8;

} // namespace dlc::codegen

//===- Pass.h - Passes, the pass manager and pipelines ----------*- C++ -*-===//
#pragma once

#include "dlc/ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace dlc::passes {

/// What the `precision` pass lowers to (dlc compile --fp16/--bf16).
struct PrecisionOptions {
  ir::DType reduced = ir::DType::F16; // F16 or BF16
  /// Graph inputs and outputs in the reduced dtype too (--io-dtype fp16).
  bool ioReduced = false;
  /// Op names (as `dlc ops` prints them) and node names forced to stay FP32.
  std::set<std::string, std::less<>> fp32Ops, fp32Nodes;
};

/// The `layout` pass's choice (dlc compile --layout): auto moves convolution
/// networks in FP16/BF16 to channels-last; nchw keeps the model's layout.
enum class LayoutMode { Auto, NCHW, NHWC };
/// "auto", "nchw" or "nhwc".
llvm::Expected<LayoutMode> parseLayoutMode(std::string_view s);
/// FP16/BF16 MatMuls by constant weights whose element-wise epilogue the GEMM library
/// cannot apply (`--gemm-epilogue`): where the cost model says (auto), always on
/// cuBLASLt plus a kernel for the epilogue (library), or always on the kernel library's
/// implicit GEMM with the epilogue fused (fused).
enum class GemmEpilogueMode { Auto, Library, Fused };
/// Parses "auto", "library" or "fused".
llvm::Expected<GemmEpilogueMode> parseGemmEpilogueMode(std::string_view s);

struct TrainingOptions; // dlc/passes/Training.h
struct TrainingSummary;

/// State shared by the passes of one pipeline run.
struct PassContext {
  /// Constant folding does not create constants with more elements than this.
  int64_t foldElementLimit = int64_t{1} << 22;
  PrecisionOptions precision;
  LayoutMode layout = LayoutMode::Auto;
  /// FP32 convolutions and GEMMs will run on tensor cores in TF32 (`--tf32`): the
  /// layout pass's auto mode then moves FP32 conv nets to channels-last too.
  bool tf32 = false;
  /// Where the layout pass rewrites such a MatMul as a 1x1 convolution (the kernel
  /// library's implicit GEMM, the epilogue fused): in auto mode, where `ownGemm` says
  /// an FP16/BF16 [rows, k] x [k, n] product runs faster so than as the library's GEMM
  /// plus a kernel for the epilogue (codegen::ownGemmIsFaster for the compile's
  /// targets; unset: never).
  GemmEpilogueMode gemmEpilogue = GemmEpilogueMode::Auto;
  std::function<bool(int64_t rows, int64_t k, int64_t n, ir::DType dt)> ownGemm;
  /// The training step's options (`dlc compile --train`): the training passes
  /// (Training.h) need them, and count what they did in `trainingSummary`.
  const TrainingOptions *training = nullptr;
  TrainingSummary *trainingSummary = nullptr;
  /// Errors a pass could not recover from; the pass manager stops and reports them.
  void fail(llvm::Error e) { errors.push_back(llvm::toString(std::move(e))); }
  std::vector<std::string> errors;
};

class Pass {
public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  /// Transforms the graph; returns whether anything changed.
  virtual bool run(ir::Graph &g, PassContext &ctx) = 0;
};

struct PassInfo {
  std::string_view name;
  std::string_view summary;
  std::unique_ptr<Pass> (*create)();
};
/// All registered passes, in Passes.def order.
const std::vector<PassInfo> &registeredPasses();
const PassInfo *findPass(std::string_view name);

/// How often a pipeline stage runs.
enum class Convergence { Once, UntilFixedPoint };

struct PipelineStage {
  std::vector<std::string> passes; // run in order; repeated as a group if UntilFixedPoint
  Convergence mode = Convergence::Once;
};
using Pipeline = std::vector<PipelineStage>;

/// The default graph-level pipeline at an optimization level (0: only what code
/// generation needs). With mixedPrecision, the `precision` pass (configured by
/// PassContext::precision) runs after the clean-up stage, followed by another
/// clean-up (cast chains fold). With layout, the `layout` pass (PassContext::layout)
/// and a clean-up follow (transpose chains cancel, permuted weights fold). Then, at
/// every level, `legalize`; from -O2, `fuse`.
Pipeline defaultPipeline(int optLevel, bool mixedPrecision = false, bool layout = false);
/// Whether a pipeline needs the layout stage for this mode (auto only acts on graphs whose
/// convolutions run on tensor cores: reduced precision, FP32 in TF32, or a quantized
/// model's INT8).
inline bool needsLayoutPass(LayoutMode m, bool mixedPrecision, bool tf32 = false,
                            bool quantized = false) {
  return m == LayoutMode::NHWC || (m == LayoutMode::Auto && (mixedPrecision || tf32 || quantized));
}
/// Parses "a,b,c" into one Once stage; unknown names are an error.
llvm::Expected<Pipeline> parsePipeline(std::string_view spec);

struct PassManagerOptions {
  bool verifyEach = false;
  bool printAfterAll = false;
  std::set<std::string, std::less<>> printAfter;
  std::string stopAfter;
  llvm::raw_ostream *printStream = nullptr; // default: llvm::errs()
  /// Stop a fixed-point stage after this many rounds (a rewrite cycle is a bug).
  int maxRounds = 16;
  /// A pass's error starts with "pass 'NAME' failed: " (dlc opt); a pipeline whose
  /// errors are about the user's model and options (the training step's) says them
  /// plainly.
  bool namePassInErrors = true;
};

class PassManager {
public:
  explicit PassManager(PassManagerOptions opts = {}) : opts_(std::move(opts)) {}
  llvm::Error run(ir::Graph &g, const Pipeline &pipeline, PassContext &ctx);
  /// Whether the pipeline stopped early because of stopAfter.
  bool stopped() const { return stopped_; }

private:
  llvm::Expected<bool> runOne(ir::Graph &g, const std::string &name, PassContext &ctx);
  PassManagerOptions opts_;
  bool stopped_ = false;
};

//===----------------------------------------------------------------------===//
// Pattern rewriting
//===----------------------------------------------------------------------===//

class PatternRewriter;

/// A local rewrite rooted at one node. matchAndRewrite must not change the graph
/// unless it returns true (match first, then mutate).
class RewritePattern {
public:
  virtual ~RewritePattern() = default;
  virtual std::string_view name() const = 0;
  /// The op kind the pattern is rooted at; nullopt for any.
  virtual std::optional<ir::OpKind> root() const = 0;
  virtual bool matchAndRewrite(ir::Node &n, PatternRewriter &rw) const = 0;
};

/// Graph mutations made by patterns, tracked so the driver revisits affected nodes.
class PatternRewriter {
public:
  explicit PatternRewriter(ir::Graph &g) : g_(g) {}
  ir::Graph &graph() { return g_; }

  /// Creates a node before `before` with inferred result types.
  llvm::Expected<ir::Node *> create(ir::OpKind kind, std::vector<ir::Value *> operands,
                                    ir::AttrMap attrs, ir::Node *before, unsigned numResults = 1);
  ir::Value *createConstant(const std::string &nameHint, ir::Tensor data);
  /// Replaces all uses of n's results with `values` and erases n. A replacement value
  /// created by this rewriter takes the old result's name, so printed IR stays stable.
  void replaceNode(ir::Node &n, llvm::ArrayRef<ir::Value *> values);
  void eraseNode(ir::Node &n);

  // Worklist used by the driver: nodes to (re)visit, each at most once in the queue.
  void push(ir::Node *n);
  /// Next node to visit, or null when done.
  ir::Node *pop();

private:
  void pushUsers(ir::Value *v);
  ir::Graph &g_;
  std::deque<ir::Node *> queue_;
  std::unordered_set<ir::Node *> pending_;
  std::unordered_set<ir::Value *> fresh_; // created since the last replaceNode
};

/// After a node's results `names` were replaced by `values` (a decomposition of the
/// node): each value the decomposition built takes the old name where it is free
/// (printed IR stays readable); one that is an operand passed through keeps its own.
void adoptResultNames(ir::Graph &g, llvm::ArrayRef<std::string> names,
                      llvm::ArrayRef<ir::Value *> operands, llvm::ArrayRef<ir::Value *> values);

/// Applies patterns until none matches (bounded). Returns whether anything changed.
bool applyPatternsGreedily(ir::Graph &g, const std::vector<std::unique_ptr<RewritePattern>> &pats,
                           PassContext &ctx, int maxRewrites = 1 << 20);

} // namespace dlc::passes

//===- Lowering.h - IR nodes to kernels, library calls and buffers --------===//
//
// Lowering walks the graph in order. Each node's family emitter (emitters/*.cpp)
// asks the Lowering for operand and result buffers, writes CUDA kernels through a
// KernelBuilder, or adds library calls (GEMM), copies and memsets. The result is a
// Program: kernel sources plus a linear schedule over buffers.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"
#include "dlc/package/Package.h"

#include <functional>
#include <map>
#include <optional>
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

/// A scalar kernel parameter of a generated kernel (legacy emitters).
struct KernelArg {
  enum Kind { Pointer, I64 } kind;
  BufferRef ref;
  int64_t i = 0;
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
  bool needsSync = false;
  bool cooperative = false;
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
};

/// A fused epilogue that the GEMM library call itself applies (see Lowering::lowerGroup).
struct GemmEpilogue {
  const ir::Value *bias = nullptr, *residual = nullptr;
  pkg::GemmActivation activation = pkg::GemmActivation::None;
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
struct StepDesc {
  std::variant<LaunchStep, GemmStep, CopyStep, MemsetStep> op;
  std::string node;
  std::vector<std::string> archs; // empty: every architecture
};

struct TensorDesc {
  std::string name;
  ir::TensorType type;
  uint32_t buffer;
};

/// Everything codegen produced for one graph.
struct Program {
  std::string modelName;
  std::vector<BufferDesc> buffers;
  std::vector<ir::Tensor> weights; // initial contents, indexed by BufferDesc::weightIndex
  std::vector<KernelDesc> kernels;
  std::vector<StepDesc> steps;
  std::vector<TensorDesc> inputs, outputs;
  uint64_t arenaBytes = 0, weightBytes = 0;
  /// The complete CUDA translation unit (all kernels, plus the emu thunks under DLC_EMU).
  std::string source;
  /// The translation units compiled separately (and cached per chunk): each has its
  /// kernels' code and emu thunks.
  std::vector<std::string> chunkSources;
};

class Lowering;
struct FusionGroup;

/// Builds one kernel: parameters, body and launch.
class KernelBuilder {
public:
  KernelBuilder(Lowering &l, const ir::Node &n, const std::string &suffix);
  /// Adds a pointer parameter ("p0", ...) bound to a buffer; returns its name.
  /// `bytes`: how much of the buffer the kernel touches (0: from `ref` to its end).
  std::string pointer(ir::DType dt, BufferRef ref, bool isConst, uint64_t bytes = 0);
  std::string pointerTo(const ir::Value *v); // const operand
  std::string outputPointer(const ir::Value *v);
  /// Adds a 64-bit integer parameter; relaunch() can change its value per launch.
  std::string int64Param(int64_t value);
  CodeStream &body() { return body_; }
  void setNeedsSync() { needsSync_ = true; }
  void setFlops(double f) { flops_ = f; }
  /// Finishes the kernel and appends its launch. The block size feeds __launch_bounds__.
  void launch(uint64_t gridX, uint32_t blockX, uint32_t smem = 0, uint32_t gridY = 1,
              uint32_t gridZ = 1);
  /// Finishes the kernel without launching it (launch it with relaunch()).
  void define(uint64_t gridX, uint32_t blockX, uint32_t smem = 0, uint32_t gridY = 1,
              uint32_t gridZ = 1);
  /// Launches the same kernel again with edited arguments (after launch()).
  void relaunch(const std::function<void(std::vector<KernelArg> &)> &edit);
  const std::string &name() const { return name_; }

private:
  Lowering &l_;
  const ir::Node &node_;
  std::string name_;
  std::vector<std::string> params_, types_;
  std::vector<KernelArg> args_;
  void finishLaunch(LaunchStep &ls) const;
  struct Access {
    BufferRef ref;
    uint64_t bytes;
    bool write;
  };
  std::vector<Access> accesses_; // per pointer parameter, for the cost model
  CodeStream body_;
  bool needsSync_ = false;
  double flops_ = 0;
  LaunchStep last_{};
};

class Lowering {
public:
  explicit Lowering(const ir::Graph &g);
  llvm::Expected<Program> run();

  // Buffers.
  BufferRef bufferOf(const ir::Value *v);
  /// Gives `result` its own new arena buffer.
  BufferRef allocate(const ir::Value *result);
  /// Makes `result` share `operand`'s memory (metadata-only ops such as Reshape).
  void alias(const ir::Value *result, const ir::Value *operand);
  /// Binds a value to an existing buffer (e.g. a constant computed at compile time).
  void bind(const ir::Value *v, BufferRef r);
  BufferRef temp(uint64_t bytes, const std::string &name);
  uint64_t bufferBytes(uint32_t buffer) const { return p_.buffers[buffer].bytes; }
  BufferRef constantBuffer(const ir::Tensor &t, const std::string &name);

  // Steps.
  void addGemm(const GemmStep &g, const ir::Node &n);
  void addCopy(BufferRef src, BufferRef dst, uint64_t bytes, const ir::Node &n);
  void addMemset(BufferRef dst, uint64_t bytes, uint8_t v, const ir::Node &n);

  /// A unique kernel name "k<index>_<Op>[_suffix]".
  std::string kernelName(const ir::Node &n, const std::string &suffix);
  /// Adds a kernel; returns its index.
  uint32_t addKernel(KernelDesc k);
  void addLaunch(LaunchStep l, const std::string &node);
  uint32_t lastKernelIndex() const { return static_cast<uint32_t>(p_.kernels.size() - 1); }
  const ir::Graph &graph() const { return g_; }
  /// The fusion group whose anchor is being lowered (null for a node alone).
  const FusionGroup *group() const { return group_; }
  /// For a GEMM anchor whose whole epilogue the library applies.
  const std::optional<GemmEpilogue> &gemmEpilogue() const { return gemmEpilogue_; }

private:
  llvm::Error lowerGroup(FusionGroup &g);
  /// Anchors whose result a library call writes to memory (GEMM): their epilogue
  /// is a separate kernel.
  bool anchorMaterializes(const ir::Node &anchor) const;
  std::optional<GemmEpilogue> libraryEpilogue(const FusionGroup &g) const;
  const FusionGroup *group_ = nullptr;
  std::optional<GemmEpilogue> gemmEpilogue_;
  const ir::Graph &g_;
  Program p_;
  std::map<const ir::Value *, BufferRef> valueBuffers_;
  std::map<std::string, int> nameCounts_;
};

/// The lowering function of each op family (emitters/<Family>.cpp).
using LowerFn = llvm::Error (*)(Lowering &, const ir::Node &);
#define FAMILY(F) llvm::Error lower##F(Lowering &l, const ir::Node &n);
#define OP(N, F)
#include "ir/Ops.def"
LowerFn lowerFnFor(ir::OpKind k);

/// Kernels are split into chunks of about this many, compiled separately (in
/// parallel, and cached per chunk), but never more than kMaxChunks.
inline constexpr size_t kKernelsPerChunk = 12;
inline constexpr size_t kMaxChunks = 8;

/// Grid-stride launch shape for n independent items.
void elementwiseLaunchShape(uint64_t n, uint64_t &grid, uint32_t &block);

} // namespace dlc::codegen

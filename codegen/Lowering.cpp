#include "Lowering.h"

#include "Fused.h"
#include "Library.h"
#include "MemoryPlan.h"
#include "dlc/ir/FusionRules.h"

#include "llvm/Support/Format.h"

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <set>

namespace dlc::codegen {

using namespace ir;

const char *cudaType(DType t) {
  switch (t) {
  case DType::F32:
    return "float";
  case DType::F16:
    return "__half";
  case DType::BF16:
    return "__nv_bfloat16";
  case DType::F64:
    return "double";
  case DType::I64:
    return "long long";
  case DType::I32:
    return "int";
  case DType::I16:
    return "short";
  case DType::I8:
    return "signed char";
  case DType::U8:
    return "unsigned char";
  case DType::U16:
    return "unsigned short";
  case DType::U32:
    return "unsigned";
  case DType::U64:
    return "unsigned long long";
  case DType::Bool:
    return "bool";
  case DType::F8E4M3:
    return "dlc::f8e4m3";
  case DType::F8E5M2:
    return "dlc::f8e5m2";
  }
  return "?";
}

const char *computeType(DType t) {
  if (t == DType::F64)
    return "double";
  if (isFloat(t) || isFloat8(t))
    return "float";
  if (isSignedInt(t))
    return "long long";
  if (isUnsignedInt(t))
    return "unsigned long long";
  return "bool";
}

pkg::DType toPkg(DType t) {
  return static_cast<pkg::DType>(static_cast<uint8_t>(t));
}

std::string literalInt(int64_t v) {
  if (v == INT64_MIN)
    return "(-9223372036854775807LL - 1)";
  return v < 0 ? "(" + std::to_string(v) + "LL)" : std::to_string(v) + "LL";
}

std::string literal(DType dt, double v) {
  if (dt == DType::Bool)
    return v != 0 ? "true" : "false";
  if (isSignedInt(dt))
    return literalInt(static_cast<int64_t>(v));
  if (isUnsignedInt(dt))
    return std::to_string(static_cast<uint64_t>(v)) + "ULL";
  bool isDouble = dt == DType::F64;
  if (std::isnan(v))
    return isDouble ? "(0.0 / 0.0)" : "(0.0f / 0.0f)";
  if (std::isinf(v))
    return std::string(v < 0 ? "-" : "") + (isDouble ? "(1.0 / 0.0)" : "(1.0f / 0.0f)");
  char buf[64];
  if (isDouble)
    std::snprintf(buf, sizeof(buf), "%a", v);
  else
    std::snprintf(buf, sizeof(buf), "%af", static_cast<double>(static_cast<float>(v)));
  return std::string("(") + buf + ")";
}

void ParamBlob::raw(const void *data, size_t n, size_t align) {
  bytes.resize((bytes.size() + align - 1) / align * align);
  const auto *p = static_cast<const uint8_t *>(data);
  bytes.insert(bytes.end(), p, p + n);
}

void ParamBlob::pointer(BufferRef r) {
  uint64_t zero = 0;
  raw(&zero, 8, 8);
  relocs.push_back({static_cast<uint32_t>(bytes.size() - 8), r});
}

void ParamBlob::i64(int64_t v) {
  raw(&v, 8, 8);
}

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

Lowering::Lowering(const Graph &g, LoweringOptions opts) : g_(g), opts_(std::move(opts)) {
  if (opts_.archs.empty())
    opts_.archs = {"sm_90"};
}

const char *Lowering::indexType(int64_t maxIndex) const {
  return opts_.wideIndices || maxIndex >= kMax32BitIndex ? "dlc::idx64" : "dlc::idx32";
}

void LoweringRegistry::op(OpKind k, NodeLowering f) {
  assert(!ops_[static_cast<size_t>(k)] && "an op's lowering is registered twice");
  ops_[static_cast<size_t>(k)] = f;
}

void LoweringRegistry::group(GroupKind k, GroupLowering f) {
  assert(!groups_[static_cast<size_t>(k)] && "a group kind's lowering is registered twice");
  groups_[static_cast<size_t>(k)] = f;
}

namespace {
/// Anchored and GEMM-epilogue groups: the anchor's own lowering, which builds its
/// load and store functors (or the library call's epilogue) from Lowering::group().
llvm::Error lowerAnchored(Lowering &l, const FusionGroup &g) {
  NodeLowering f = loweringRegistry().forOp(g.anchor->kind());
  if (!f)
    return errorf("{0} has no lowering", g.anchor->describe());
  return f(l, *g.anchor);
}
} // namespace

const LoweringRegistry &loweringRegistry() {
  static const LoweringRegistry registry = [] {
    LoweringRegistry r;
    for (void (*add)(LoweringRegistry &) :
         {registerLinalgLowerings, registerConvLowerings, registerPoolLowerings,
          registerNormLowerings, registerReduceLowerings, registerMovementLowerings,
          registerIndexLowerings, registerResizeLowerings, registerRecurrentLowerings,
          registerLossLowerings, registerCollectiveLowerings, registerAttentionLowerings,
          registerFusedLowerings})
      add(r);
    r.group(GroupKind::Anchored, lowerAnchored);
    r.group(GroupKind::GemmEpilogue, lowerAnchored);
    return r;
  }();
  return registry;
}

/// 48 bits of FNV-1a, in hex: content-derived names (stable across unrelated edits).
static std::string contentHash(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%012llx", static_cast<unsigned long long>(h >> 16));
  return buf;
}

std::string Lowering::functorName(const Functor &f) {
  std::string body = f.text("$");
  std::string name = "F_" + contentHash(body);
  p_.functors.emplace(name, f.text(name));
  return name;
}

static std::string instantiationKey(const Instantiation &inst) {
  std::string args;
  for (size_t i = 0; i < inst.targs.size(); ++i)
    args += (i ? ", " : "") + inst.targs[i];
  return inst.tmpl + "<" + args + ">";
}

bool Lowering::instantiated(const Instantiation &inst) const {
  return instances_.count(instantiationKey(inst)) != 0;
}

uint32_t Lowering::instantiate(const Instantiation &inst) {
  std::string full = instantiationKey(inst);
  auto it = instances_.find(full);
  if (it != instances_.end())
    return it->second;
  KernelDesc k;
  std::string shortName = inst.tmpl.substr(inst.tmpl.rfind(':') + 1);
  k.key = full;
  k.name = shortName + "_" + contentHash(full);
  k.symbol = k.name;
  k.templateName = inst.tmpl;
  k.nameExpr = "&" + full;
  k.source = "template __global__ void " + full + "(" + inst.argsType + ");\n";
  k.emuCall = full + "(*reinterpret_cast<const " + inst.argsType + " *>(p));";
  k.functors = inst.functors;
  k.needsSync = inst.needsSync || inst.cooperative;
  k.cooperative = inst.cooperative;
  k.tensorCore = inst.tensorCore;
  k.tf32 = inst.tf32;
  k.integer = inst.integer;
  k.fp8 = inst.fp8;
  p_.kernels.push_back(std::move(k));
  uint32_t index = static_cast<uint32_t>(p_.kernels.size() - 1);
  instances_[full] = index;
  return index;
}

void Lowering::launch(const Node &n, uint32_t kernel, LaunchArgs &args, uint32_t gridX,
                      uint32_t block, uint32_t smem, double flops, uint32_t gridY, uint32_t gridZ,
                      std::vector<std::string> archs) {
  p_.steps.push_back({makeLaunch(kernel, args, gridX, block, smem, flops, gridY, gridZ), n.name(),
                      std::move(archs)});
}

void Lowering::launch(const std::string &stepName, uint32_t kernel, LaunchArgs &args,
                      uint32_t gridX, uint32_t block, double flops) {
  p_.steps.push_back({makeLaunch(kernel, args, gridX, block, 0, flops), stepName, {}});
}

LaunchStep Lowering::makeLaunch(uint32_t kernel, LaunchArgs &args, uint32_t gridX, uint32_t block,
                                uint32_t smem, double flops, uint32_t gridY, uint32_t gridZ) {
  args.finishTraffic(*this);
  LaunchStep ls;
  ls.kernel = kernel;
  ls.grid[0] = gridX;
  ls.grid[1] = gridY;
  ls.grid[2] = gridZ;
  ls.block[0] = block;
  ls.block[1] = ls.block[2] = 1;
  ls.smem = smem;
  ls.params = std::move(args.blob);
  ls.bytesRead = args.bytesRead;
  ls.bytesWritten = args.bytesWritten;
  ls.flops = flops;
  return ls;
}

BufferRef Lowering::allocate(const Value *result) {
  // Values inside the fusion group being lowered live in registers; the group's
  // output is allocated once, before the anchor's emitter runs.
  if (group_ && group_->computes(result)) {
    auto it = valueBuffers_.find(group_->root()->result());
    if (result != group_->root()->result() || it != valueBuffers_.end())
      return it != valueBuffers_.end() ? it->second : BufferRef{};
  }
  BufferDesc b;
  b.region = pkg::Region::Arena;
  b.bytes = result->type().byteSize();
  b.name = result->name();
  p_.buffers.push_back(b);
  BufferRef r{static_cast<uint32_t>(p_.buffers.size() - 1), 0};
  valueBuffers_[result] = r;
  return r;
}

void Lowering::alias(const Value *result, const Value *operand) {
  valueBuffers_[result] = bufferOf(operand);
}

void Lowering::bind(const Value *v, BufferRef r) {
  valueBuffers_[v] = r;
}

BufferRef Lowering::temp(uint64_t bytes, const std::string &name) {
  BufferDesc b;
  b.bytes = bytes;
  b.name = name;
  p_.buffers.push_back(b);
  return {static_cast<uint32_t>(p_.buffers.size() - 1), 0};
}

BufferRef Lowering::checkWord(const Node &n, const std::string &what) {
  // Nodes of hand-written IR may be unnamed: the op and its result name it then.
  return checkWord(
      n.name().empty() ? std::string(n.opName()) + " -> %" + n.result()->name() : n.name(), what);
}

BufferRef Lowering::checkWord(const std::string &node, const std::string &what) {
  if (p_.checks.empty())
    p_.checkBuffer = temp(0, "checks").buffer;
  uint64_t offset = 4 * p_.checks.size();
  p_.checks.push_back({offset, node, what});
  p_.buffers[p_.checkBuffer].bytes = offset + 4;
  return {p_.checkBuffer, offset};
}

void Lowering::allowInPlace(uint32_t in, uint32_t out) {
  if (!p_.steps.empty())
    if (auto *l = std::get_if<LaunchStep>(&p_.steps.back().op))
      l->inplace.push_back({in, out});
}

BufferRef Lowering::constantBuffer(const Tensor &t, const std::string &name) {
  BufferDesc b;
  b.region = pkg::Region::Weights;
  b.bytes = t.byteSize();
  b.name = name;
  b.weightIndex = static_cast<int>(p_.weights.size());
  p_.weights.push_back(t);
  p_.buffers.push_back(b);
  return {static_cast<uint32_t>(p_.buffers.size() - 1), 0};
}

BufferRef Lowering::bufferOf(const Value *v) {
  auto it = valueBuffers_.find(v);
  if (it != valueBuffers_.end())
    return it->second;
  if (v->isConstant()) {
    BufferRef r = constantBuffer(v->data(), v->name());
    valueBuffers_[v] = r;
    return r;
  }
  // A result whose producer did not bind it: give it memory (emitters normally do).
  return allocate(v);
}

void Lowering::addGemm(const GemmStep &g0, const Node &n) {
  GemmStep g = g0;
  g.tf32 = opts_.tf32 && g.dtype == DType::F32;
  // cuBLASLt's workspace (split-K partial sums, mostly): four times the output, from
  // 64 KiB to the 32 MiB NVIDIA recommends for Hopper. The heuristic picks among the
  // algorithms that fit. A long reduction over a small output (a weight gradient: K =
  // batch x positions, 100k for ResNet's first stage, over a 64x64 output) runs on few
  // tiles unless it is split: room for FP32 partials of one split per 1024 of K, up to
  // 128 (measured on an H200: 150 us for that GEMM with 64 KiB).
  uint64_t out = static_cast<uint64_t>(g.m * g.n * g.batch) * dtypeSize(g.dtype);
  uint64_t splits = std::min<uint64_t>(static_cast<uint64_t>(g.k) / 1024, 128);
  uint64_t partials = static_cast<uint64_t>(g.m * g.n * g.batch) * 4 * splits;
  g.workspaceBytes = std::clamp<uint64_t>(std::max(4 * out, partials), 64 << 10, 32 << 20);
  g.workspace = temp(g.workspaceBytes, n.name() + ".workspace");
  if (g.bias || g.activation != pkg::GemmActivation::None) {
    // The epilogue as a kernel, for a GPU where no algorithm applies it.
    GemmEpilogueShape s{};
    s.total = g.m * g.n * g.batch;
    s.ldc = g.ldc;
    s.strideC = g.strideC;
    s.dCols = Divmod::make(g.n);
    s.dRows = Divmod::make(g.m);
    LaunchArgs a;
    a.shape(s);
    uint64_t dBytes = static_cast<uint64_t>(s.total) * dtypeSize(g.dtype);
    a.pointer(offsetof(GemmEpilogueShape, d), g.c, dBytes, true);
    if (g.bias)
      a.pointer(offsetof(GemmEpilogueShape, bias), *g.bias, g.n * dtypeSize(g.dtype), false);
    int act = g.activation == pkg::GemmActivation::Relu       ? 1
              : g.activation == pkg::GemmActivation::GeluTanh ? 2
                                                              : 0;
    int64_t maxIndex = (g.batch - 1) * g.strideC + g.m * g.ldc;
    uint32_t k = instantiate({"dlc::gemm_epilogue",
                              {std::to_string(act), indexType(maxIndex), cudaType(g.dtype)},
                              "dlc::GemmEpilogueShape",
                              {}});
    g.fallback = makeLaunch(k, a, gridFor(static_cast<uint64_t>(s.total), 256), 256, 0,
                            2.0 * static_cast<double>(s.total));
  }
  // Tactics: a GEMM large enough for the choice to matter carries cuBLASLt's first
  // kGemmAlgorithms heuristic algorithms as alternatives (the first is the default),
  // timed on the GPU when a session starts: the heuristic's first is not always the
  // fastest at a given shape.
  constexpr int kGemmAlgorithms = 3;
  constexpr double kGemmTacticFlops = double(1 << 26);
  const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch);
  if (!opts_.vendorTactics || flops < kGemmTacticFlops) {
    p_.steps.push_back({g, n.name(), {}});
    return;
  }
  const uint32_t group = newAltGroup();
  for (int r = 0; r < kGemmAlgorithms; ++r) {
    g.algoRank = static_cast<uint8_t>(r);
    const size_t from = p_.steps.size();
    p_.steps.push_back({g, n.name(), {}});
    markAlt(from, group, static_cast<uint8_t>(r + 1), pkg::TacticKind::CublasLt,
            "cuBLASLt heuristic algorithm #" + std::to_string(r + 1));
  }
}
void Lowering::markAlt(size_t from, uint32_t group, uint8_t alt, pkg::TacticKind tactic,
                       const std::string &desc) {
  if (tactic == pkg::TacticKind::None)
    p_.steps.erase(std::remove_if(p_.steps.begin() + static_cast<std::ptrdiff_t>(from),
                                  p_.steps.end(),
                                  [](const StepDesc &s) {
                                    return s.tactic != pkg::TacticKind::None && s.alt != 1;
                                  }),
                   p_.steps.end());
  for (size_t s = from; s < p_.steps.size(); ++s) {
    p_.steps[s].altGroup = group;
    p_.steps[s].alt = alt;
    p_.steps[s].tactic = tactic;
    p_.steps[s].tacticDesc = desc;
  }
}

void Lowering::addCudnnConv(const CudnnConvStep &c, const Node &n) {
  p_.steps.push_back({c, n.name(), {}});
}
void Lowering::addCudnnSdpa(const CudnnSdpaStep &a, const Node &n) {
  p_.steps.push_back({a, n.name(), {}});
}
void Lowering::addCopy(BufferRef src, BufferRef dst, uint64_t bytes, const Node &n) {
  p_.steps.push_back({CopyStep{src, dst, bytes}, n.name(), {}});
}
void Lowering::addMemset(BufferRef dst, uint64_t bytes, uint8_t v, const Node &n) {
  p_.steps.push_back({MemsetStep{dst, bytes, v}, n.name(), {}});
}
void Lowering::addCollective(CollectiveStep s, const Node &n) {
  p_.steps.push_back({std::move(s), n.name(), {}});
}

void Lowering::addCollectiveWaits() {
  std::vector<StepDesc> out;
  std::map<uint32_t, StepDesc> pending; // staging buffer -> its wait
  size_t commitFrom = p_.steps.size() - p_.commitSteps, waitsInCommit = 0;
  for (size_t i = 0; i < p_.steps.size(); ++i) {
    StepDesc &s = p_.steps[i];
    if (!pending.empty())
      forEachBufferRef(s, [&](const BufferRef &r) {
        auto it = pending.find(r.buffer);
        if (it == pending.end())
          return;
        out.push_back(std::move(it->second));
        waitsInCommit += i > commitFrom; // before the first commit step is not in the commit
        pending.erase(it);
      });
    // A shard is a copy on the calling stream: nothing to wait for.
    if (const auto *a = std::get_if<CollectiveStep>(&s.op); a && a->op != pkg::CollectiveOp::Shard)
      pending.emplace(a->result().buffer,
                      StepDesc{CollectiveWaitStep{a->bucket, a->staging, a->output}, s.node,
                               s.archs, s.schedules});
    out.push_back(std::move(s));
  }
  if (p_.commitSteps)
    waitsInCommit += pending.size();
  for (auto &[buffer, wait] : pending)
    out.push_back(std::move(wait));
  p_.steps = std::move(out);
  p_.commitSteps += static_cast<uint32_t>(waitsInCommit);
}

/// The emu entry points of the kernels of one chunk (see dlc/package/EmuAbi.h).
static std::string emuSection(const std::vector<const KernelDesc *> &kernels) {
  CodeStream cs;
  cs.line("#ifdef DLC_EMU");
  cs.line("thread_local dlc_emu_thread *dlc_emu_cur = nullptr;");
  cs.line("const dlc_emu_api *dlc_emu_api_ptr = nullptr;");
  for (size_t i = 0; i < kernels.size(); ++i)
    cs.line("static void dlc_thunk" + std::to_string(i) +
            "(const void *a) { const char *p = static_cast<const char *>(a); " +
            kernels[i]->emuCall + " (void)p; }");
  cs.line("static const dlc_emu_kernel dlc_emu_table[] = {");
  for (size_t i = 0; i < kernels.size(); ++i)
    cs.line("  {\"" + kernels[i]->name + "\", dlc_thunk" + std::to_string(i) + "},");
  cs.line("  {nullptr, nullptr}};");
  cs.line("#define DLC_EXPORT extern \"C\" __attribute__((visibility(\"default\")))");
  cs.line("DLC_EXPORT int dlc_emu_abi_version(void) { return DLC_EMU_ABI_VERSION; }");
  cs.line("DLC_EXPORT const dlc_emu_kernel *dlc_emu_kernels(int *n) { *n = " +
          std::to_string(kernels.size()) + "; return dlc_emu_table; }");
  cs.line("DLC_EXPORT void dlc_emu_set_api(const dlc_emu_api *api) { dlc_emu_api_ptr = api; }");
  cs.line("DLC_EXPORT void dlc_emu_set_thread(dlc_emu_thread *t) { dlc_emu_cur = t; }");
  cs.line("#endif // DLC_EMU");
  return cs.str();
}

/// A translation unit with the given kernels (and their emu entry points): the
/// functors they use, once each, then their definitions or instantiations.
static std::string translationUnit(const Program &p,
                                   const std::vector<const KernelDesc *> &kernels) {
  CodeStream src;
  src.line("// Generated by dlc for graph '" + p.modelName + "'.");
  src.line("#include \"dlc_kernels.cuh\"");
  src.line();
  std::set<std::string> functors;
  for (const KernelDesc *k : kernels)
    functors.insert(k->functors.begin(), k->functors.end());
  for (const std::string &f : functors)
    src.line(p.functors.at(f));
  for (const KernelDesc *k : kernels)
    src.line(k->source);
  src.line(emuSection(kernels));
  return src.str();
}

/// Splits the kernels into chunks, compiled (and cached) separately and in parallel.
/// A kernel's chunk depends only on its own source, so a change to one layer leaves
/// the other chunks' cache entries valid.
static void assignChunks(Program &p) {
  size_t n = p.kernels.size();
  uint32_t chunks = static_cast<uint32_t>(
      std::clamp<size_t>((n + kKernelsPerChunk - 1) / kKernelsPerChunk, 1, kMaxChunks));
  std::vector<bool> used(chunks, false);
  for (KernelDesc &k : p.kernels) {
    uint64_t h = 1469598103934665603ull; // FNV-1a of the instantiation (or source)
    for (unsigned char c : k.key.empty() ? k.source : k.key)
      h = (h ^ c) * 1099511628211ull;
    k.chunk = static_cast<uint32_t>(h % chunks);
    used[k.chunk] = true;
  }
  // Renumber so that chunks are dense (an empty chunk would be an empty module).
  std::vector<uint32_t> dense(chunks, 0);
  for (uint32_t c = 0, next = 0; c < chunks; ++c)
    dense[c] = used[c] ? next++ : 0;
  for (KernelDesc &k : p.kernels)
    k.chunk = dense[k.chunk];
}

llvm::Error Lowering::lowerNode(const Node &n) {
  if (fusibility(n).inlinable())
    return lowerInlineNode(*this, n);
  NodeLowering f = loweringRegistry().forOp(n.kind());
  if (!f)
    return errorf("no lowering for {0}", n.opName());
  return f(*this, n);
}

llvm::Error Lowering::lowerGroup(const FusionGroup &g) {
  GroupLowering f = loweringRegistry().forGroup(g.kind);
  if (!f)
    return errorf("no lowering for {0} groups", groupKindName(g.kind));
  // The group's output gets its buffer before the kernel's emitter asks for it.
  if (g.kind != GroupKind::Elementwise)
    allocate(g.root()->result());
  group_ = &g;
  llvm::Error e = f(*this, g);
  group_ = nullptr;
  return e;
}

std::vector<uint8_t> Lowering::scheduleMasks(const std::vector<const Node *> &nodes) const {
  // Backwards from the outputs: a node is in the schedules of the outputs it reaches.
  std::unordered_map<const Value *, uint8_t> needed;
  for (const GraphOutput &o : g_.outputs())
    needed[o.value] |= o.isEvaluation() ? kEvalSchedule : kMainSchedule;
  std::vector<uint8_t> masks(nodes.size(), 0);
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node &n = *nodes[i];
    for (unsigned r = 0; r < n.numResults(); ++r)
      if (auto it = needed.find(n.result(r)); it != needed.end())
        masks[i] |= it->second;
    if (!masks[i]) // reaches no output (DCE leaves none at -O1 and up)
      masks[i] = kMainSchedule;
    for (const Value *v : n.operands())
      if (v)
        needed[v] |= masks[i];
  }
  return masks;
}

std::vector<std::optional<std::pair<const Value *, bool>>>
Lowering::predicates(const std::vector<const Node *> &nodes) const {
  // Backwards from the outputs, like scheduleMasks. A value's need is "always" or
  // "when cond is w"; two different needs meet at "always". A Where selecting by a
  // run-time condition needs its operand 1 only when the condition is true and its
  // operand 2 only when false (inside a conditional region, the outer need is kept).
  using Need = std::optional<std::pair<const Value *, bool>>; // nullopt: always
  std::unordered_map<const Value *, Need> need;
  auto meet = [&](const Value *v, const Need &n) {
    auto [it, fresh] = need.emplace(v, n);
    if (!fresh && it->second != n)
      it->second = std::nullopt;
  };
  for (const GraphOutput &o : g_.outputs())
    meet(o.value, std::nullopt);
  std::vector<Need> result(nodes.size());
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node &n = *nodes[i];
    Need mine;
    bool any = false;
    for (unsigned r = 0; r < n.numResults(); ++r)
      if (auto it = need.find(n.result(r)); it != need.end()) {
        mine = any && mine != it->second ? std::nullopt : it->second;
        any = true;
      }
    if (!any)
      mine = std::nullopt;
    result[i] = mine;
    bool select = selectsByRuntimeCondition(n);
    for (unsigned k = 0; k < n.numOperands(); ++k)
      if (const Value *v = n.operand(k))
        meet(v, select && !mine && k > 0 ? Need(std::make_pair(n.operand(0), k == 1)) : mine);
  }
  return result;
}

llvm::Error Lowering::addUpdateSteps() {
  // The step ends by writing each update's value into its variable; every read
  // in the step saw the old value. A value that is itself another variable (or a
  // view of one) is saved first, so that no copy reads a variable already written.
  // The update lanes run after those saves and before the copies: each reads and
  // writes only its own variables' elements (ir::updateLanes).
  std::set<uint32_t> variableBuffers;
  for (const VariableDesc &v : p_.variables)
    variableBuffers.insert(v.buffer);
  std::vector<std::pair<BufferRef, BufferRef>> copies; // (from, to)
  for (const GraphOutput &o : g_.outputs()) {
    if (!o.isUpdate())
      continue;
    if (const Node *d = o.value->definingNode();
        d && d->fusionGroup() && d->fusionGroup()->kind == GroupKind::UpdateLane)
      continue;
    BufferRef from = bufferOf(o.value), to = bufferOf(o.variable);
    if (from.buffer == to.buffer && from.offset == to.offset)
      continue;
    uint64_t bytes = o.variable->type().byteSize();
    if (variableBuffers.count(from.buffer)) { // part of the step proper, not of the commit
      BufferRef saved = temp(bytes, o.variable->name() + ".next");
      p_.steps.push_back({CopyStep{from, saved, bytes}, "update " + o.variable->name(), {}});
      from = saved;
    }
    copies.push_back({from, to});
  }
  auto launches = lowerUpdateLanes(*this, lanes_);
  if (!launches)
    return launches.takeError();
  for (const auto &[from, to] : copies)
    p_.steps.push_back({CopyStep{from, to, p_.buffers[to.buffer].bytes},
                        "update " + p_.buffers[to.buffer].name,
                        {}});
  p_.commitSteps = static_cast<uint32_t>(copies.size() + *launches);
  return llvm::Error::success();
}

llvm::Expected<Program> Lowering::run() {
  p_.modelName = g_.name();
  p_.boundInputs = g_.boundInputs();
  for (const auto &in : g_.inputs())
    interface_.insert(in.get());
  for (const GraphOutput &o : g_.outputs())
    if (!o.isUpdate())
      interface_.insert(o.value);
  for (bool changed = true; changed;) { // views share their operand's memory
    changed = false;
    for (const Node &n : g_.nodes())
      if (fusibility(n).role == Fusibility::Role::Metadata && n.numOperands() && n.operand(0) &&
          interface_.count(n.operand(0)) != interface_.count(n.result())) {
        interface_.insert(n.operand(0));
        interface_.insert(n.result());
        changed = true;
      }
  }
  for (const auto &in : g_.inputs())
    p_.inputs.push_back({in->name(), in->type(), allocate(in.get()).buffer});
  // Variables: session state in the arena, never shared with another buffer.
  for (const auto &v : g_.parameters())
    p_.variables.push_back({v->name(), v->data(), allocate(v.get()).buffer, v->isTrainable(),
                            llvm::StringRef(v->name()).startswith(kShardedStatePrefix)});
  std::vector<const Node *> nodes;
  for (const Node &n : g_.nodes())
    nodes.push_back(&n);
  auto schedules = scheduleMasks(nodes);
  auto conditions = predicates(nodes);
  for (size_t i = 0; i < nodes.size();) {
    const Node &n = *nodes[i];
    const FusionGroup *fg = n.fusionGroup();
    if (fg && fg->kind == GroupKind::UpdateLane) { // lowered with the updates, at the end
      if (fg->root() == &n)
        lanes_.push_back(fg);
      ++i;
      continue;
    }
    size_t firstStep = p_.steps.size();
    uint8_t mask = 0;
    // The steps' condition: every node's, when they agree and the condition's value
    // is computed by an earlier step (or is an input).
    std::optional<std::pair<const Value *, bool>> cond = conditions[i];
    if (!fg) {
      if (auto e = lowerNode(n))
        return errorf("{0}: cannot generate code: {1}", n.describe(), llvm::toString(std::move(e)));
      mask = schedules[i];
      ++i;
    } else {
      // A kernel group: its nodes are the next ones (the verifier checks that).
      for (const Node *member : fg->nodes) {
        if (i >= nodes.size() || nodes[i] != member)
          return errorf("{0}: its fusion group is not contiguous", member->describe());
        mask |= schedules[i];
        if (conditions[i] != cond)
          cond.reset();
        ++i;
      }
      if (auto e = lowerGroup(*fg))
        return errorf("{0}: cannot generate code for its fusion group: {1}", fg->root()->describe(),
                      llvm::toString(std::move(e)));
    }
    // (Checked here: a package the reader would refuse is never written.)
    for (size_t s = firstStep; s < p_.steps.size(); ++s)
      if (const auto *ls = std::get_if<LaunchStep>(&p_.steps[s].op);
          ls && ls->params.bytes.size() > pkg::kMaxParamBytes)
        return errorf("{0}: its kernel takes {1} bytes of parameters, over the package's limit "
                      "of {2} (a fused kernel reading too many tensors)",
                      (fg ? *fg->root() : n).describe(), ls->params.bytes.size(),
                      pkg::kMaxParamBytes);
    std::optional<StepPredicate> predicate;
    if (cond && (valueBuffers_.count(cond->first) || cond->first->isInput()))
      predicate = StepPredicate{bufferOf(cond->first), cond->second};
    // Every rank must issue the same collectives: none may depend on the data.
    if (predicate)
      for (size_t s = firstStep; s < p_.steps.size(); ++s)
        if (std::holds_alternative<CollectiveStep>(p_.steps[s].op))
          return errorf(
              "{0}: a collective on one side of an If with a run-time condition (the ranks could "
              "disagree on running it); bind the condition with --bind",
              n.describe());
    for (size_t s = firstStep; s < p_.steps.size(); ++s) {
      p_.steps[s].schedules = mask;
      p_.steps[s].predicate = predicate;
    }
  }
  for (const GraphOutput &o : g_.outputs())
    if (o.isEvaluation())
      p_.evalOutputs.push_back(
          {o.name.substr(kEvalOutputPrefix.size()), o.value->type(), bufferOf(o.value).buffer});
    else if (o.isGuard()) {
      // The guard's byte (0 or 1) into the low byte of a check word zeroed at the start.
      size_t colon = o.name.find(": ");
      BufferRef word =
          checkWord(o.name.substr(kGuardOutputPrefix.size(), colon - kGuardOutputPrefix.size()),
                    o.name.substr(colon + 2));
      p_.steps.push_back({CopyStep{bufferOf(o.value), word, 1}, "guard", {}});
    } else if (!o.isUpdate())
      p_.outputs.push_back({o.name, o.value->type(), bufferOf(o.value).buffer});
  if (auto e = addUpdateSteps())
    return e;
  addCollectiveWaits();

  // Weights in order; the arena by lifetimes (MemoryPlan.h).
  for (BufferDesc &b : p_.buffers)
    if (b.region == pkg::Region::Weights) {
      b.offset = p_.weightBytes;
      p_.weightBytes += arenaAligned(b.bytes);
    }
  std::vector<uint32_t> pinned;
  for (const VariableDesc &v : p_.variables)
    pinned.push_back(v.buffer);
  if (!p_.checks.empty()) {
    // The check words start each run at zero; the runtime reads them after it.
    uint64_t bytes = p_.buffers[p_.checkBuffer].bytes;
    p_.steps.insert(p_.steps.begin(), StepDesc{MemsetStep{{p_.checkBuffer, 0}, bytes, 0},
                                               "",
                                               {},
                                               uint8_t(kMainSchedule | kEvalSchedule)});
    pinned.push_back(p_.checkBuffer);
  }
  MemoryPlanStats mem = planMemory(p_, pinned);
  p_.naiveArenaBytes = mem.naiveBytes;
  p_.maxLiveBytes = mem.maxLiveBytes;

  buildTranslationUnits(p_);
  return std::move(p_);
}

void buildTranslationUnits(Program &p) {
  assignChunks(p);
  std::vector<const KernelDesc *> all;
  for (const KernelDesc &k : p.kernels)
    all.push_back(&k);
  p.source = translationUnit(p, all);
  uint32_t chunks = 0;
  for (const KernelDesc &k : p.kernels)
    chunks = std::max(chunks, k.chunk + 1);
  p.chunkSources.clear();
  for (uint32_t c = 0; c < chunks; ++c) {
    std::vector<const KernelDesc *> mine;
    for (const KernelDesc &k : p.kernels)
      if (k.chunk == c)
        mine.push_back(&k);
    p.chunkSources.push_back(translationUnit(p, mine));
  }
}

} // namespace dlc::codegen

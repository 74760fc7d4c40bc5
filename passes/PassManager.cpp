#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"

namespace dlc::passes {

llvm::Expected<LayoutMode> parseLayoutMode(std::string_view s) {
  if (s == "auto")
    return LayoutMode::Auto;
  if (s == "nchw")
    return LayoutMode::NCHW;
  if (s == "nhwc")
    return LayoutMode::NHWC;
  return ir::errorf("--layout must be auto, nchw or nhwc, got '{0}'", s);
}

llvm::Expected<GemmEpilogueMode> parseGemmEpilogueMode(std::string_view s) {
  if (s == "auto")
    return GemmEpilogueMode::Auto;
  if (s == "library")
    return GemmEpilogueMode::Library;
  if (s == "fused")
    return GemmEpilogueMode::Fused;
  return ir::errorf("--gemm-epilogue must be auto, library or fused, got '{0}'", s);
}

#define PASS(NAME, CLASS, SUMMARY) std::unique_ptr<Pass> create##CLASS();
#include "Passes.def"

const std::vector<PassInfo> &registeredPasses() {
  static const std::vector<PassInfo> passes = {
#define PASS(NAME, CLASS, SUMMARY) {NAME_STR(NAME), SUMMARY, create##CLASS},
#define NAME_STR(N) #N
#include "Passes.def"
#undef NAME_STR
  };
  return passes;
}

const PassInfo *findPass(std::string_view name) {
  for (const PassInfo &p : registeredPasses())
    if (p.name == name)
      return &p;
  return nullptr;
}

Pipeline defaultPipeline(int optLevel, bool mixedPrecision, bool layout) {
  Pipeline p;
  // Ops without a kernel of their own become their decomposition at every level,
  // once their dtypes and layout are settled.
  PipelineStage legalize = {{"legalize"}, Convergence::Once};
  if (optLevel <= 0) {
    if (mixedPrecision)
      p.push_back({{"precision"}, Convergence::Once});
    if (layout)
      p.push_back({{"layout"}, Convergence::Once});
    p.push_back(legalize);
    return p;
  }
  // -O1: graph clean-up only (one kernel per op); -O2 and up: also fusion.
  PipelineStage cleanup = {{"canonicalize", "fold-qdq", "fold-bn", "constfold", "cse", "dce"},
                           Convergence::UntilFixedPoint};
  p.push_back(cleanup);
  if (mixedPrecision) {
    p.push_back({{"precision"}, Convergence::Once});
    p.push_back(cleanup);
  }
  if (layout) {
    p.push_back({{"layout"}, Convergence::Once});
    p.push_back(cleanup);
  }
  p.push_back(legalize);
  if (optLevel >= 2)
    p.push_back({{"fuse"}, Convergence::Once});
  return p;
}

llvm::Expected<Pipeline> parsePipeline(std::string_view spec) {
  PipelineStage stage;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view name = spec.substr(0, comma);
    if (name.empty())
      return ir::makeError("empty pass name in pipeline");
    if (!findPass(name)) {
      std::string known;
      for (const PassInfo &p : registeredPasses())
        known += (known.empty() ? "" : ", ") + std::string(p.name);
      return ir::errorf("unknown pass '{0}' (known passes: {1})", name, known);
    }
    stage.passes.emplace_back(name);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
  }
  return Pipeline{stage};
}

llvm::Expected<bool> PassManager::runOne(ir::Graph &g, const std::string &name, PassContext &ctx) {
  const PassInfo *info = findPass(name);
  if (!info)
    return ir::errorf("unknown pass '{0}'", name);
  auto pass = info->create();
  bool changed = pass->run(g, ctx);
  if (!ctx.errors.empty()) {
    std::string msg = opts_.namePassInErrors ? "pass '" + name + "' failed: " + ctx.errors.front()
                                             : ctx.errors.front();
    ctx.errors.clear();
    return ir::makeError(msg);
  }
  if (opts_.verifyEach)
    if (auto e = ir::verifyGraph(g))
      return ir::errorf("IR is invalid after pass '{0}': {1}", name, llvm::toString(std::move(e)));
  if (opts_.printAfterAll || opts_.printAfter.count(name)) {
    llvm::raw_ostream &os = opts_.printStream ? *opts_.printStream : llvm::errs();
    os << "// -----// IR Dump After " << name << " //----- //\n";
    ir::printGraph(g, os);
  }
  return changed;
}

llvm::Error PassManager::run(ir::Graph &g, const Pipeline &pipeline, PassContext &ctx) {
  stopped_ = false;
  for (const PipelineStage &stage : pipeline) {
    for (int round = 0;; ++round) {
      bool changed = false;
      for (const std::string &name : stage.passes) {
        auto c = runOne(g, name, ctx);
        if (!c)
          return c.takeError();
        changed |= *c;
        if (name == opts_.stopAfter) {
          stopped_ = true;
          return llvm::Error::success();
        }
      }
      if (stage.mode == Convergence::Once || !changed)
        break;
      if (round + 1 >= opts_.maxRounds)
        return ir::errorf("pipeline stage did not converge after {0} rounds", opts_.maxRounds);
    }
  }
  return llvm::Error::success();
}

} // namespace dlc::passes

#include "Testing.h"

#include <fstream>
#include <sstream>

namespace dlc::test {

std::string errorOf(llvm::Error e) {
  return e ? llvm::toString(std::move(e)) : std::string();
}

std::unique_ptr<ir::Graph> parseIR(const std::string &text) {
  auto g = ir::parseGraph(text, "<test>");
  if (!g) {
    ADD_FAILURE() << "parse error: " << llvm::toString(g.takeError());
    return nullptr;
  }
  if (auto e = ir::verifyGraph(**g)) {
    ADD_FAILURE() << "verify error: " << llvm::toString(std::move(e));
    return nullptr;
  }
  return std::move(*g);
}

std::unique_ptr<ir::Graph> runPasses(const ir::Graph &g, const std::string &passes,
                                     const passes::PassContext &options) {
  auto copy = g.clone();
  auto pipeline = passes::parsePipeline(passes);
  if (!pipeline) {
    ADD_FAILURE() << llvm::toString(pipeline.takeError());
    return nullptr;
  }
  passes::PassManagerOptions opts;
  opts.verifyEach = true;
  passes::PassManager pm(opts);
  passes::PassContext ctx = options;
  if (auto e = pm.run(*copy, *pipeline, ctx)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return nullptr;
  }
  return copy;
}

std::unique_ptr<ir::Graph> expectEquivalentAfter(const std::string &irText,
                                                 const std::string &passes, int seeds, double rtol,
                                                 double atol, const passes::PassContext &ctx) {
  auto before = parseIR(irText);
  if (!before)
    return nullptr;
  auto after = runPasses(*before, passes, ctx);
  if (!after)
    return nullptr;
  for (int s = 0; s < seeds; ++s) {
    ir::TensorMap inputs = ir::randomInputs(*before, 1000 + s);
    auto ref = ir::interpret(*before, inputs);
    auto got = ir::interpret(*after, inputs);
    if (!ref || !got) {
      ADD_FAILURE() << "interpretation failed: " << errorOf(ref) << errorOf(got);
      return nullptr;
    }
    for (const auto &[name, t] : *ref) {
      auto it = got->find(name);
      if (it == got->end()) {
        ADD_FAILURE() << "output '" << name << "' missing after " << passes;
        continue;
      }
      auto cmp = ir::compareTensors(it->second, t, rtol, atol);
      EXPECT_TRUE(cmp.ok) << "output '" << name << "' differs after " << passes << " (seed " << s
                          << "): " << cmp.message;
    }
  }
  return after;
}

std::string readSourceFile(const std::string &relPath) {
  std::ifstream f(std::string(DLC_SOURCE_DIR) + "/" + relPath, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace dlc::test

#include "../Testing.h"

using namespace dlc;
using namespace dlc::ir;
using dlc::test::errorOf;

TEST(PassRegistry, EveryPassHasASummaryAndCreates) {
  ASSERT_GE(passes::registeredPasses().size(), 4u);
  for (const auto &p : passes::registeredPasses()) {
    EXPECT_FALSE(p.summary.empty()) << p.name;
    auto pass = p.create();
    ASSERT_TRUE(pass) << p.name;
    EXPECT_EQ(pass->name(), p.name);
  }
}

TEST(PassManager, ParsePipelineRejectsUnknownPasses) {
  auto p = passes::parsePipeline("dce,frob");
  EXPECT_NE(errorOf(p).find("unknown pass 'frob'"), std::string::npos);
  auto ok = passes::parsePipeline("canonicalize,dce");
  ASSERT_TRUE(bool(ok));
  EXPECT_EQ((*ok)[0].passes.size(), 2u);
}

TEST(PassManager, StopAfterAndPrintAfter) {
  auto g = test::parseIR(R"(graph @g(%x: f32[2]) -> ("y": f32[2]) {
  %0 = Identity(%x) : f32[2]
  %1 = Relu(%x) : f32[2]
  return %0
})");
  ASSERT_TRUE(g);
  std::string log;
  llvm::raw_string_ostream os(log);
  passes::PassManagerOptions opts;
  opts.printAfter.insert("canonicalize");
  opts.stopAfter = "canonicalize";
  opts.printStream = &os;
  passes::PassManager pm(opts);
  passes::PassContext ctx;
  auto pipeline = passes::parsePipeline("canonicalize,dce");
  ASSERT_TRUE(bool(pipeline));
  ASSERT_EQ(errorOf(pm.run(*g, *pipeline, ctx)), "");
  EXPECT_TRUE(pm.stopped());
  EXPECT_NE(os.str().find("// -----// IR Dump After canonicalize //----- //"), std::string::npos);
  EXPECT_EQ(os.str().find("After dce"), std::string::npos);
  EXPECT_EQ(g->numNodes(), 1u) << "dce did not run, so the dead Relu remains";
}

TEST(PassManager, FixedPointStageConverges) {
  auto g = test::parseIR(test::readSourceFile("tests/unit/ir/corpus/cnn.ir"));
  ASSERT_TRUE(g);
  passes::PassManagerOptions opts;
  opts.verifyEach = true;
  passes::PassManager pm(opts);
  passes::PassContext ctx;
  ASSERT_EQ(errorOf(pm.run(*g, passes::defaultPipeline(2), ctx)), "");
}

// Walks ir/Ops.def and checks that every op's definition is complete.
#include "dlc/ir/OpDef.h"

#include <gtest/gtest.h>
#include <set>

using namespace dlc::ir;

namespace {
const OpKind kAllOps[] = {
#define OP(NAME, FAMILY) OpKind::NAME,
#include "dlc/ir/Ops.def"
};
} // namespace

TEST(OpTable, EveryOpIsFullyDefined) {
  ASSERT_EQ(std::size(kAllOps), kNumOps);
  for (OpKind k : kAllOps) {
    const OpDef &d = opDef(k);
    std::string n(opName(k));
    EXPECT_EQ(d.kind, k) << n << ": not defined by its family file";
    EXPECT_EQ(d.name, opName(k)) << n;
    EXPECT_NE(d.verify, nullptr) << n << ": missing verifier";
    EXPECT_NE(d.infer, nullptr) << n << ": missing shape inference";
    EXPECT_NE(d.reference, nullptr) << n << ": missing reference kernel";
    // Fusibility: every op says how it takes part in fused kernels, with what that needs.
    const Fusibility &f = d.fusibility;
    EXPECT_NE(f.role, Fusibility::Role::Unset) << n << ": missing fusibility";
    if (f.role == Fusibility::Role::Elementwise) {
      EXPECT_NE(d.cudaExpr, nullptr) << n << ": element-wise without an expression template";
    } else {
      EXPECT_EQ(f.operandAccess, nullptr) << n << ": operand accesses are for element-wise ops";
      EXPECT_EQ(f.gemmEpilogue, GemmEpilogueOp::None) << n << ": only element-wise ops end a GEMM";
    }
    EXPECT_EQ(f.role == Fusibility::Role::Injective, f.indexMap != nullptr)
        << n << ": an injective op has an index map, and only it";
    if (f.role != Fusibility::Role::Anchor) {
      EXPECT_FALSE(f.prologue || f.epilogue || f.libraryEpilogue)
          << n << ": anchor capabilities on an op that is not an anchor";
    }
    if (f.libraryEpilogue) {
      EXPECT_TRUE(f.epilogue && !f.prologue) << n << ": a library call takes only an epilogue";
    }
    EXPECT_NE(d.fp16, Fp16Policy::Unset) << n << ": missing FP16 policy";
    EXPECT_NE(d.layout.kind, LayoutRule::Unset) << n << ": missing layout rule";
    if (d.layout.kind == LayoutRule::ChannelAxis) {
      EXPECT_GE(d.layout.channelAxis, 0) << n;
    }
    EXPECT_TRUE(d.maxOperands == kVariadic || d.maxOperands >= d.minOperands) << n;
    EXPECT_TRUE(d.maxResults == kVariadic || d.maxResults >= d.minResults) << n;
    EXPECT_GE(d.minResults, 1) << n;
    std::set<std::string> names;
    for (const AttrSpec &a : d.attrs) {
      EXPECT_TRUE(names.insert(a.name).second) << n << ": attribute listed twice: " << a.name;
      if (a.dflt) {
        EXPECT_EQ(a.dflt->kind(), a.kind) << n << ": default of '" << a.name << "' has wrong kind";
      }
    }
    auto back = opKindFromName(opName(k));
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, k);
  }
  EXPECT_FALSE(opKindFromName("NoSuchOp").has_value());
}

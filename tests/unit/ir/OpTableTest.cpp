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
    EXPECT_NE(d.fusion, FusionKind::Unset) << n << ": missing fusion kind";
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

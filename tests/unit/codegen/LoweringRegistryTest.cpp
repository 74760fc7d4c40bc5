// The lowering registry (codegen/Lowering.h): every op that a kernel cannot inline has
// a lowering of its own, and every kind of kernel group has one.
#include "Lowering.h"

#include <gtest/gtest.h>

using namespace dlc;
using namespace dlc::ir;

TEST(LoweringRegistry, EveryOpAndGroupKindIsLowered) {
  const codegen::LoweringRegistry &r = codegen::loweringRegistry();
  for (size_t i = 0; i < kNumOps; ++i) {
    auto k = static_cast<OpKind>(i);
    const Fusibility &f = opDef(k).fusibility;
    // An inlinable op alone is a one-node group, unless a node of it is opaque; an op
    // with a `legalize` decomposition never reaches code generation, but for the nodes
    // its `hasKernel` keeps (RMSNormalization).
    if ((!f.inlinable() || f.opaqueWhen) && (!opDef(k).legalize || opDef(k).hasKernel)) {
      EXPECT_NE(r.forOp(k), nullptr) << opName(k) << " has no lowering";
    }
  }
  // Update lanes are lowered together at the end of the step (lowerUpdateLanes).
  for (GroupKind k :
       {GroupKind::Elementwise, GroupKind::Anchored, GroupKind::GemmEpilogue, GroupKind::Attention})
    EXPECT_NE(r.forGroup(k), nullptr) << groupKindName(k) << " groups have no lowering";
}

#include "../Testing.h"

using namespace dlc;
using namespace dlc::ir;
using dlc::test::errorOf;

namespace {
TensorType f32(Shape s) {
  return TensorType(DType::F32, std::move(s));
}
} // namespace

TEST(Graph, UseListsFollowMutations) {
  Graph g;
  Value *x = g.addInput("x", f32({4}));
  Node *a = g.createNode(OpKind::Relu, {x}, {f32({4})});
  Node *b = g.createNode(OpKind::Add, {a->result(), x}, {f32({4})});
  g.addOutput("y", b->result());
  ASSERT_EQ(x->uses().size(), 2u);
  EXPECT_EQ(a->result()->uses().size(), 1u);
  EXPECT_EQ(a->result()->uses()[0].user, b);

  g.replaceAllUsesWith(a->result(), x);
  EXPECT_FALSE(a->result()->hasUses());
  EXPECT_EQ(x->uses().size(), 3u);
  g.eraseNode(a);
  EXPECT_EQ(x->uses().size(), 2u);
  EXPECT_EQ(errorOf(verifyGraph(g)), "");
}

TEST(Graph, ReplaceUpdatesOutputsButKeepsOutputNames) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  Node *a = g.createNode(OpKind::Identity, {x}, {f32({2})});
  g.addOutput("out", a->result());
  g.replaceAllUsesWith(a->result(), x);
  EXPECT_EQ(g.outputs()[0].value, x);
  EXPECT_EQ(g.outputs()[0].name, "out");
}

TEST(Graph, TopologicalSortRepairsOrderAndDetectsCycles) {
  Graph g;
  Value *x = g.addInput("x", f32({3}));
  Node *a = g.createNode(OpKind::Relu, {x}, {f32({3})});
  Node *b = g.createNode(OpKind::Neg, {a->result()}, {f32({3})});
  g.addOutput("y", b->result());
  g.moveBefore(b, a);
  std::string err = errorOf(verifyGraph(g));
  EXPECT_NE(err.find("used before its definition"), std::string::npos) << err;
  EXPECT_TRUE(g.topologicalSort());
  EXPECT_EQ(errorOf(verifyGraph(g)), "");

  // a <-> b cycle
  a->setOperand(0, b->result());
  EXPECT_FALSE(g.topologicalSort());
  err = errorOf(verifyGraph(g));
  EXPECT_NE(err.find("cycle"), std::string::npos) << err;
}

TEST(Graph, VerifierRejectsBadTypesAndForeignValues) {
  Graph g;
  Value *x = g.addInput("x", f32({3}));
  Value *i = g.addInput("i", TensorType(DType::I64, {3}));
  Node *a = g.createNode(OpKind::Add, {x, i}, {f32({3})});
  g.addOutput("y", a->result());
  std::string err = errorOf(verifyGraph(g));
  EXPECT_NE(err.find("same element type"), std::string::npos) << err;

  a->setOperand(1, x);
  a->result()->setType(f32({4}));
  err = errorOf(verifyGraph(g));
  EXPECT_NE(err.find("infers f32[3]"), std::string::npos) << err;
  a->result()->setType(f32({3}));

  Graph other;
  Value *foreign = other.addInput("z", f32({3}));
  a->setOperand(1, foreign);
  err = errorOf(verifyGraph(g));
  EXPECT_NE(err.find("another graph"), std::string::npos) << err;
  a->setOperand(1, x);
  EXPECT_EQ(errorOf(verifyGraph(g)), "");
}

TEST(Graph, CreateInferredRunsShapeInference) {
  Graph g;
  Value *x = g.addInput("x", f32({2, 3}));
  Value *w = g.addInput("w", f32({3, 5}));
  auto mm = g.createInferred(OpKind::MatMul, {x, w});
  ASSERT_TRUE(bool(mm)) << errorOf(mm);
  EXPECT_EQ((*mm)->result()->type(), f32({2, 5}));
  auto bad = g.createInferred(OpKind::MatMul, {w, w});
  EXPECT_NE(errorOf(bad).find("inner dimensions"), std::string::npos);
  EXPECT_EQ(g.numNodes(), 1u) << "a failed creation must not leave a node behind";
  EXPECT_EQ(w->uses().size(), 1u);
}

TEST(Graph, CloneIsDeepAndIdentical) {
  auto g = test::parseIR(R"(graph @g(%x: f32[2]) -> ("y": f32[2]) {
  %c = const f32[2] dense<[1.0, 2.0]>
  %0 = Add(%x, %c) : f32[2] loc("add")
  return %0
})");
  ASSERT_TRUE(g);
  auto c = g->clone();
  EXPECT_EQ(printGraph(*g), printGraph(*c));
  EXPECT_NE(c->inputs()[0].get(), g->inputs()[0].get());
  EXPECT_EQ(errorOf(verifyGraph(*c)), "");
}

TEST(Graph, UniqueNamesNeverCollide) {
  Graph g;
  g.addInput("x", f32({1}));
  Value *x2 = g.addInput("x", f32({1}));
  EXPECT_NE(x2->name(), "x");
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string n = g.uniqueName("t");
    g.addInput(n, f32({1}));
    EXPECT_TRUE(seen.insert(n).second);
  }
}

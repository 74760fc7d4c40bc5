// Trainable parameters in the IR and the autodiff pass. The per-op gradient
// checks against torch.autograd are tests/training/gradcheck.py; here: parameters
// survive every clean-up pass, and whole networks' gradients match central finite
// differences on the reference interpreter.
#include "dlc/passes/Autodiff.h"

#include "../Testing.h"
#include "dlc/ir/Interpreter.h"
#include "dlc/ir/TextIR.h"

#include <random>

using namespace dlc;
using namespace dlc::ir;

namespace {

const char *kParams = R"(graph @g(%x: f32[3]) -> ("y": f32[3]) {
  %a = param f32[3] dense<[1.0, 2.0, 3.0]>
  %b = param f32[3] dense<[1.0, 2.0, 3.0]>
  %unused = param f32[2] dense<[5.0, 6.0]>
  %c = const f32[3] dense<[2.0, 2.0, 2.0]>
  %0 = Mul(%a, %c) : f32[3]
  %1 = Mul(%b, %c) : f32[3]
  %2 = Add(%0, %1) : f32[3]
  %3 = Add(%2, %x) : f32[3]
  return %3
})";

} // namespace

TEST(Parameters, PrintParseRoundTrip) {
  auto g = test::parseIR(kParams);
  ASSERT_TRUE(g);
  ASSERT_EQ(g->parameters().size(), 3u);
  EXPECT_TRUE(g->parameters()[0]->isParameter());
  EXPECT_FALSE(g->parameters()[0]->isConstant());
  EXPECT_TRUE(g->parameters()[0]->hasData());
  std::string text = printGraph(*g);
  EXPECT_NE(text.find("%a = param f32[3] dense<[1.0, 2.0, 3.0]>"), std::string::npos) << text;
  auto again = test::parseIR(text);
  ASSERT_TRUE(again);
  EXPECT_EQ(printGraph(*again), text);
  auto copy = g->clone();
  EXPECT_EQ(printGraph(*copy), text) << "clone keeps parameters";
}

TEST(Parameters, CleanUpPassesNeitherFoldMergeNorRemoveThem) {
  auto g = test::parseIR(kParams);
  ASSERT_TRUE(g);
  auto after = test::runPasses(*g, "constfold,canonicalize,cse,dce");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->parameters().size(), 3u) << "an unused parameter is still state to train";
  size_t muls = 0;
  for (const Node &n : after->nodes())
    muls += n.kind() == OpKind::Mul;
  EXPECT_EQ(muls, 2u)
      << "nothing folds through a parameter, and parameters with equal initial values "
         "are different values";
}

TEST(Parameters, InterpreterTakesOverridesOfTheInitialValue) {
  auto g = test::parseIR(kParams);
  ASSERT_TRUE(g);
  TensorMap in{
      {"x", Tensor::fromVector(TensorType{DType::F32, {3}}, std::vector<float>{0, 0, 0})},
      {"a", Tensor::fromVector(TensorType{DType::F32, {3}}, std::vector<float>{10, 20, 30})}};
  auto out = interpret(*g, in);
  ASSERT_TRUE(static_cast<bool>(out)) << test::errorOf(out);
  EXPECT_EQ(out->at("y").toVector<float>(), (std::vector<float>{22, 44, 66}));
  in["a"] = Tensor::fromVector(TensorType{DType::F32, {2}}, std::vector<float>{1, 2});
  auto bad = interpret(*g, in);
  EXPECT_NE(test::errorOf(bad).find("parameter 'a' is given type f32[2], expected f32[3]"),
            std::string::npos);
}

TEST(Parameters, MakeParameterKeepsNameDataAndUses) {
  auto g = test::parseIR(R"(graph @g(%x: f32[2]) -> ("y": f32[2]) {
  %w = const f32[2] dense<[1.0, 2.0]>
  %0 = Mul(%x, %w) : f32[2]
  return %0
})");
  ASSERT_TRUE(g);
  Value *w = g->findValue("w");
  g->makeParameter(w);
  EXPECT_TRUE(w->isParameter());
  EXPECT_TRUE(g->constants().empty());
  ASSERT_EQ(g->parameters().size(), 1u);
  EXPECT_EQ(g->parameters()[0].get(), w);
  EXPECT_EQ(w->uses().size(), 1u);
  EXPECT_FALSE(verifyGraph(*g));
}

namespace {

/// Turns a corpus network into a training problem: its trainable constants become
/// parameters, and output 0 becomes the loss sum(output0 * R) for a fixed random R.
std::unique_ptr<Graph> asTrainingProblem(const std::string &irText) {
  auto g = test::parseIR(irText);
  if (!g)
    return nullptr;
  if (passes::promoteTrainableConstants(*g) == 0)
    return nullptr;
  Value *y = g->outputs()[0].value;
  Value *r = g->addConstant("R", randomTensor(y->type(), 99));
  Node *m = g->createNode(OpKind::Mul, {y, r}, {y->type()});
  Node *s = g->createNode(OpKind::ReduceSum, {m->result()}, {{y->dtype(), {}}},
                          {{"keepdims", int64_t{0}}});
  g->setOutputValue(0, s->result());
  return g;
}

/// Central finite differences of the loss (output 0) on the reference interpreter,
/// against autodiff's gradients, at a few elements of every parameter.
void expectGradientsMatchFiniteDifferences(const std::string &label, const std::string &irText) {
  SCOPED_TRACE(label);
  auto g = asTrainingProblem(irText);
  ASSERT_TRUE(g);
  std::string lossName = g->outputs()[0].name;
  auto fwd = g->clone();
  auto grads = passes::buildGradients(*g, g->outputs()[0].value);
  ASSERT_TRUE(static_cast<bool>(grads)) << test::errorOf(grads);
  for (const auto &gr : *grads)
    g->addOutput(passes::gradientOutputName(*gr.parameter), gr.grad);
  ASSERT_FALSE(verifyGraph(*g));

  TensorMap inputs = randomInputs(*fwd, 5);
  auto withGrads = interpret(*g, inputs);
  ASSERT_TRUE(static_cast<bool>(withGrads)) << test::errorOf(withGrads);
  auto plain = interpret(*fwd, inputs);
  ASSERT_TRUE(static_cast<bool>(plain));
  double before = plain->at(lossName).getDouble(0);
  EXPECT_NEAR(withGrads->at(lossName).getDouble(0), before, 1e-5 * std::max(1.0, std::abs(before)))
      << "the forward computation is unchanged (up to rounding where an op was decomposed)";

  std::mt19937 rng(3);
  const double eps = 1e-2;
  int checked = 0;
  for (const auto &p : fwd->parameters()) {
    const Tensor &grad = withGrads->at(passes::gradientOutputName(*p));
    for (int k = 0; k < 3; ++k) {
      int64_t i = std::uniform_int_distribution<int64_t>(0, p->type().numElements() - 1)(rng);
      auto loss = [&](double delta) {
        std::vector<double> v = p->data().toVector<double>();
        v[i] += delta;
        TensorMap in = inputs;
        in[p->name()] = Tensor::fromVector(p->type(), v);
        auto out = interpret(*fwd, in);
        return out ? out->at(lossName).getDouble(0) : NAN;
      };
      // The perturbation as stored in f32, so the quotient uses the real step.
      double up = static_cast<float>(p->data().getDouble(i) + eps) - p->data().getDouble(i);
      double down = static_cast<float>(p->data().getDouble(i) - eps) - p->data().getDouble(i);
      double fd = (loss(up) - loss(down)) / (up - down);
      double ad = grad.getDouble(i);
      EXPECT_NEAR(ad, fd, 2e-2 + 2e-2 * std::abs(fd))
          << "d loss / d " << p->name() << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

void expectCorpusGradientsMatchFiniteDifferences(const std::string &path) {
  expectGradientsMatchFiniteDifferences(path, test::readSourceFile(path));
}

} // namespace

TEST(Autodiff, MlpGradientsMatchFiniteDifferences) {
  expectCorpusGradientsMatchFiniteDifferences("tests/unit/ir/corpus/mlp.ir");
}

TEST(Autodiff, CnnGradientsMatchFiniteDifferences) {
  expectCorpusGradientsMatchFiniteDifferences("tests/unit/ir/corpus/cnn.ir");
}

TEST(Autodiff, TransformerGradientsMatchFiniteDifferences) {
  expectCorpusGradientsMatchFiniteDifferences("tests/unit/ir/corpus/transformer.ir");
}

TEST(Autodiff, RecurrentGradientsMatchFiniteDifferences) {
  // LSTM and GRU have no rule of their own: they are unrolled (OpDef::decompose).
  expectCorpusGradientsMatchFiniteDifferences("tests/unit/ir/corpus/rnn.ir");
}

TEST(Autodiff, RmsNormalizationGradientsMatchFiniteDifferences) {
  // RMSNormalization has no rule of its own: its decomposition (OpDef::decompose).
  expectCorpusGradientsMatchFiniteDifferences("tests/unit/ir/corpus/rmsnorm.ir");
}

TEST(Autodiff, PromotesWeightsButNotRunningStatisticsOrFrozenOnes) {
  auto g = test::parseIR(R"(graph @g(%x: f32[1,2,2,2]) -> ("y": f32[1,2,2,2]) {
  %s = const f32[2] dense<[1.0, 2.0]>
  %b = const f32[2] dense<[0.0, 0.5]>
  %m = const f32[2] dense<[0.1, 0.2]>
  %v = const f32[2] dense<[1.0, 1.5]>
  %k = const f32[] dense<[2.0]>
  %mask = const f32[2,2] dense<0x00000000000080FF0000000000000000>
  %0 = BatchNormalization(%x, %s, %b, %m, %v) : f32[1,2,2,2]
  %1 = Mul(%0, %k) : f32[1,2,2,2]
  %2 = Add(%1, %mask) : f32[1,2,2,2]
  return %2
})");
  ASSERT_TRUE(g);
  EXPECT_EQ(passes::promoteTrainableConstants(*g, [](const std::string &n) { return n == "b"; }),
            1u);
  ASSERT_EQ(g->parameters().size(), 1u);
  EXPECT_EQ(g->parameters()[0]->name(), "s");
}

TEST(Autodiff, PassAppendsGradientOutputsAndKeepsTheForward) {
  auto g = test::expectEquivalentAfter(R"(graph @g(%x: f32[2,3]) -> ("loss": f32[]) {
  %w = param f32[3,2] dense<[0.5, -1.0, 0.25, 2.0, -0.5, 1.0]>
  %0 = MatMul(%x, %w) : f32[2,2]
  %1 = Sigmoid(%0) : f32[2,2]
  %2 = ReduceMean(%1) {keepdims = 0} : f32[]
  return %2
})",
                                       "autodiff");
  ASSERT_TRUE(g);
  ASSERT_EQ(g->outputs().size(), 2u);
  EXPECT_EQ(g->outputs()[1].name, "grad.w");
  EXPECT_EQ(g->outputs()[1].value->type(), g->findValue("w")->type());
}

// A one-group convolution's weight gradient is one GEMM of dY and x's im2col (transA,
// on cuBLASLt; over 9 taps, 5x5, a GEMM per row of taps); a depthwise one is a
// reduction per tap; another grouped one keeps the grouped convolution over the batch. Finite
// differences check both forms' values (strides, dilation, asymmetric pads).
TEST(Autodiff, ConvWeightGradientIsAGemmOverIm2col) {
  // Weights of distinct values (every gradient element differs).
  auto dense = [](int64_t count, unsigned seed) {
    std::mt19937 rng(seed);
    std::string t = "dense<[";
    for (int64_t i = 0; i < count; ++i)
      t += (i ? ", " : "") +
           std::to_string(std::uniform_real_distribution<double>(-0.3, 0.3)(rng)).substr(0, 7);
    return t + "]>";
  };
  std::string ir = "graph @g(%x: f32[2,4,9,8]) -> (\"y\": f32[2,6,2,2]) {\n"
                   "  %w = const f32[6,4,3,3] " +
                   dense(216, 1) +
                   "\n"
                   "  %wd = const f32[6,6,3,2] " +
                   dense(216, 2) +
                   "\n"
                   "  %wg = const f32[6,3,1,1] " +
                   dense(18, 3) +
                   "\n"
                   "  %w5 = const f32[6,6,5,5] " +
                   dense(900, 4) +
                   "\n"
                   "  %wdw = const f32[6,1,3,3] " +
                   dense(54, 5) +
                   "\n"
                   R"(  %a = Conv(%x, %w) {strides = [2, 2], pads = [1, 0, 1, 2]} : f32[2,6,5,4]
  %b = Conv(%a, %wd) {dilations = [2, 1], pads = [1, 1, 2, 0]} : f32[2,6,4,4]
  %c = Conv(%b, %wg) {group = 2} : f32[2,6,4,4]
  %d = Conv(%c, %w5) {pads = [2, 2, 2, 2]} : f32[2,6,4,4]
  %e = Tanh(%d) : f32[2,6,4,4]
  %f = Conv(%e, %wdw) {group = 6, strides = [2, 2], pads = [1, 1, 0, 1]} : f32[2,6,2,2]
  return %f
})";
  expectGradientsMatchFiniteDifferences("conv weight gradients", ir);
  auto t = asTrainingProblem(ir);
  ASSERT_TRUE(t);
  auto grads = passes::buildGradients(*t, t->outputs()[0].value);
  ASSERT_TRUE(static_cast<bool>(grads)) << test::errorOf(grads);
  int gemms = 0, convs = 0;
  for (const Node &n : t->nodes()) {
    gemms += n.kind() == OpKind::Gemm && n.attrInt("transA") == 1;
    convs += n.kind() == OpKind::Conv;
  }
  EXPECT_EQ(gemms, 7) << "w and wd: one GEMM each; w5 (25 taps): one per row of taps";
  // The forward 5 and wg's weight gradient (the input gradients are ConvTranspose
  // here; canonicalize makes those convolutions later). The depthwise wdw's weight
  // gradient is 9 per-channel reductions, one per tap, and no convolution.
  EXPECT_EQ(convs, 6);
}

// Every pass: reference interpreter before vs after on random inputs, plus the
// structural effect the pass is for.
#include "../Testing.h"
#include "dlc/ir/FusionRules.h"
#include "dlc/ir/Interpreter.h"

#include <limits>

using namespace dlc;
using namespace dlc::ir;

namespace {

size_t countOps(const Graph &g, OpKind k) {
  size_t n = 0;
  for (const Node &node : g.nodes())
    n += node.kind() == k;
  return n;
}

const char *kCorpus[] = {"tests/unit/ir/corpus/mlp.ir", "tests/unit/ir/corpus/cnn.ir",
                         "tests/unit/ir/corpus/transformer.ir", "tests/unit/ir/corpus/rnn.ir"};

} // namespace

TEST(DeadCodeElimination, RemovesDeadChainsKeepsOutputs) {
  auto g = test::expectEquivalentAfter(R"(graph @g(%x: f32[4]) -> ("y": f32[4]) {
  %unused = const f32[4] dense<[1.0, 2.0, 3.0, 4.0]>
  %0 = Relu(%x) : f32[4]
  %1 = Exp(%0) : f32[4]
  %2 = Add(%1, %unused) : f32[4]
  %3 = Neg(%x) : f32[4]
  return %3
})",
                                       "dce");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->numNodes(), 1u);
  EXPECT_TRUE(g->constants().empty());
  EXPECT_EQ(g->inputs().size(), 1u) << "inputs are the interface and stay";
}

TEST(CommonSubexpressionElimination, MergesSameOpOperandsAttrs) {
  auto g = test::expectEquivalentAfter(R"(graph @g(%x: f32[2,3]) -> ("y": f32[2,3], "z": f32[3,2]) {
  %c1 = const f32[3] dense<[1.0, 2.0, 3.0]>
  %c2 = const f32[3] dense<[1.0, 2.0, 3.0]>
  %0 = Add(%x, %c1) : f32[2,3]
  %1 = Add(%x, %c2) : f32[2,3]
  %2 = Mul(%0, %1) : f32[2,3]
  %3 = Transpose(%2) {perm = [1, 0]} : f32[3,2]
  %4 = Transpose(%2) {perm = [1, 0]} : f32[3,2]
  %5 = Softmax(%2) {axis = 0} : f32[2,3]
  %6 = Softmax(%2) {axis = 1} : f32[2,3]
  %7 = Add(%5, %6) : f32[2,3]
  %8 = Add(%3, %4) : f32[3,2]
  return %7, %8
})",
                                       "cse");
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::Add), 3u) << "the two x+c adds merge";
  EXPECT_EQ(countOps(*g, OpKind::Softmax), 2u) << "different attributes never merge";
  EXPECT_EQ(countOps(*g, OpKind::Transpose), 1u);
  EXPECT_EQ(g->constants().size(), 1u);
}

TEST(ConstantFolding, FoldsConstantSubgraphsViaInterpreter) {
  auto g = test::expectEquivalentAfter(R"(graph @g(%x: f32[2,2]) -> ("y": f32[2,2]) {
  %a = const f32[2,2] dense<[1.0, 2.0, 3.0, 4.0]>
  %b = const f32[2] dense<[0.5, 0.25]>
  %0 = Transpose(%a) : f32[2,2]
  %1 = Mul(%0, %b) : f32[2,2]
  %2 = Exp(%1) : f32[2,2]
  %3 = Add(%x, %2) : f32[2,2]
  return %3
})",
                                       "constfold");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->numNodes(), 1u);
  ASSERT_EQ(g->constants().size(), 1u);
  // exp(transpose(a) * b): [[e^0.5, e^0.75], [e^1, e^1]]
  const Tensor &c = g->constants()[0]->data();
  EXPECT_NEAR(c.getDouble(0), std::exp(0.5), 1e-6);
  EXPECT_NEAR(c.getDouble(1), std::exp(0.75), 1e-6);
  EXPECT_NEAR(c.getDouble(3), std::exp(1.0), 1e-6);
  EXPECT_EQ(g->constants()[0]->name(), "2") << "the folded constant keeps the value's name";
}

TEST(ConstantFolding, RespectsSizeLimitAndKeepsErrorsForRuntime) {
  auto g = test::parseIR(R"(graph @g(%x: f32[3]) -> ("y": f32[3], "z": f32[1]) {
  %d = const f32[3] dense<[1.0, 2.0, 3.0]>
  %i = const i64[1] dense<[7]>
  %0 = Gather(%d, %i) : f32[1]
  %1 = Add(%x, %d) : f32[3]
  return %1, %0
})");
  ASSERT_TRUE(g);
  auto after = test::runPasses(*g, "constfold");
  ASSERT_TRUE(after);
  EXPECT_EQ(countOps(*after, OpKind::Gather), 1u) << "an out-of-range gather is not folded away";
}

TEST(Canonicalize, RemovesNoOpsAndFoldsChains) {
  auto g =
      test::expectEquivalentAfter(R"(graph @g(%x: f32[2,3,4]) -> ("y": f32[24], "t": f32[2,3,4]) {
  %zero = const f32[] dense<[0.0]>
  %one = const f32[4] dense<[1.0, 1.0, 1.0, 1.0]>
  %0 = Identity(%x) : f32[2,3,4]
  %1 = Add(%0, %zero) : f32[2,3,4]
  %2 = Mul(%one, %1) : f32[2,3,4]
  %3 = Flatten(%2) {axis = 1} : f32[2,12]
  %4 = Reshape(%3) {shape = [6, -1]} : f32[6,4]
  %5 = Reshape(%4) {shape = [24]} : f32[24]
  %6 = Transpose(%x) {perm = [1, 0, 2]} : f32[3,2,4]
  %7 = Transpose(%6) {perm = [2, 0, 1]} : f32[4,3,2]
  %8 = Transpose(%7) {perm = [2, 1, 0]} : f32[2,3,4]
  %9 = Cast(%8) {to = "f32"} : f32[2,3,4]
  return %5, %9
})",
                                  "canonicalize,dce");
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::Reshape), 1u);
  EXPECT_EQ(countOps(*g, OpKind::Transpose), 0u) << "the three perms compose to the identity";
  EXPECT_EQ(countOps(*g, OpKind::Identity) + countOps(*g, OpKind::Add) + countOps(*g, OpKind::Mul) +
                countOps(*g, OpKind::Cast) + countOps(*g, OpKind::Flatten),
            0u);
  for (const Node &n : g->nodes()) {
    if (n.kind() == OpKind::Reshape) {
      EXPECT_EQ(n.attrInts("shape"), Shape{24});
    }
  }
}

TEST(Canonicalize, GemmBecomesMatMulPlusAddOnlyWhenExact) {
  auto g = test::expectEquivalentAfter(
      R"(graph @g(%a: f32[2,3], %b: f32[4,3], %c: f32[4]) -> ("y": f32[2,4], "z": f32[2,4]) {
  %0 = Gemm(%a, %b, %c) {transB = 1} : f32[2,4]
  %1 = Gemm(%a, %b, %c) {transB = 1, alpha = 0.5} : f32[2,4]
  return %0, %1
})",
      "canonicalize");
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::Gemm), 1u) << "alpha != 1 stays a Gemm";
  EXPECT_EQ(countOps(*g, OpKind::MatMul), 1u);
  EXPECT_EQ(countOps(*g, OpKind::Add), 1u);
  EXPECT_EQ(countOps(*g, OpKind::Transpose), 1u);
}

// ConvTranspose as a Conv (OpDef::canonical): stride 1 (flipped, channel-swapped
// weights), zero-stuffed strides (3x3 stride 2 with output_padding, a 2x2 "upsampling"
// kernel, dilation, groups, 1-D), a 1x1 stride-2 kernel convolved before stuffing,
// and the forms that keep the gather (a pad past the kernel's reach, stride 3x3).
TEST(Canonicalize, ConvTransposeBecomesAConvolution) {
  auto g = test::expectEquivalentAfter(
      R"(graph @g(%x: f32[2,4,5,6], %w: f32[4,3,3,3], %b: f32[3], %w1: f32[4,6,1,1], %wg: f32[4,2,3,2], %x1: f32[1,4,7], %w2: f32[4,3,2]) -> ("a": f32[2,3,5,6], "b": f32[2,3,10,12], "c": f32[2,3,9,11], "d": f32[2,6,9,12], "e": f32[2,4,10,12], "f": f32[1,3,14], "g": f32[2,3,3,6], "h": f32[2,3,15,18], "i": f32[2,3,8,9]) {
  %a = ConvTranspose(%x, %w, %b) {pads = [1, 1, 1, 1]} : f32[2,3,5,6]
  %c0 = ConvTranspose(%x, %w, %b) {strides = [2, 2], pads = [1, 1, 1, 1], output_padding = [1, 1]} : f32[2,3,10,12]
  %c1 = ConvTranspose(%x, %w) {strides = [2, 2], dilations = [1, 2], pads = [1, 2, 2, 3], output_padding = [1, 1]} : f32[2,3,9,11]
  %d = ConvTranspose(%x, %w1) {strides = [2, 2], output_padding = [0, 1]} : f32[2,6,9,12]
  %e = ConvTranspose(%x, %wg) {group = 2, strides = [2, 2], pads = [1, 0, 0, 0]} : f32[2,4,10,12]
  %f = ConvTranspose(%x1, %w2) {strides = [2], pads = [0, 0]} : f32[1,3,14]
  %g = ConvTranspose(%x, %w) {pads = [3, 1, 1, 1]} : f32[2,3,3,6]
  %h = ConvTranspose(%x, %w) {strides = [3, 3]} : f32[2,3,15,18]
  %i = ConvTranspose(%x, %w, %b) {strides = [2, 2], dilations = [2, 2], pads = [2, 2, 3, 4]} : f32[2,3,8,9]
  return %a, %c0, %c1, %d, %e, %f, %g, %h, %i
})",
      "canonicalize,dce");
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::ConvTranspose), 2u)
      << "a pad past the kernel's reach and a stride product of 9 keep the gather";
  EXPECT_EQ(countOps(*g, OpKind::Conv), 7u);
}

TEST(Canonicalize, ShapeOfStaticValueIsConstant) {
  auto g = test::expectEquivalentAfter(R"(graph @g(%x: f32[2,3,5]) -> ("s": i64[2]) {
  %0 = Shape(%x) {start = 1} : i64[2]
  return %0
})",
                                       "canonicalize");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->numNodes(), 0u);
  ASSERT_EQ(g->constants().size(), 1u);
  EXPECT_EQ(g->constants()[0]->data().toVector<int64_t>(), (std::vector<int64_t>{3, 5}));
}

// The default pipeline on the whole corpus keeps the numbers.
TEST(DefaultPipeline, CorpusStaysEquivalent) {
  for (const char *f : kCorpus) {
    SCOPED_TRACE(f);
    test::expectEquivalentAfter(test::readSourceFile(f), "canonicalize,constfold,cse,dce", 2, 1e-5,
                                1e-5);
  }
}

TEST(FoldBatchNorm, ConvAndNormalizationBecomeOneConv) {
  auto g = test::expectEquivalentAfter(R"(graph @g(%x: f32[1,3,5,5]) -> ("y": f32[1,4,5,5]) {
  %w = const f32[4,3,3,3] dense<[0.1, -0.2, 0.3, 0.05, 0.4, -0.1, 0.2, 0.3, -0.3, 0.1, 0.2, -0.4, 0.5, 0.1, -0.2, 0.3, 0.2, 0.1, -0.1, 0.25, 0.35, -0.15, 0.05, 0.45, 0.15, -0.25, 0.3, 0.1, -0.2, 0.3, 0.05, 0.4, -0.1, 0.2, 0.3, -0.3, 0.1, 0.2, -0.4, 0.5, 0.1, -0.2, 0.3, 0.2, 0.1, -0.1, 0.25, 0.35, -0.15, 0.05, 0.45, 0.15, -0.25, 0.3, 0.1, -0.2, 0.3, 0.05, 0.4, -0.1, 0.2, 0.3, -0.3, 0.1, 0.2, -0.4, 0.5, 0.1, -0.2, 0.3, 0.2, 0.1, -0.1, 0.25, 0.35, -0.15, 0.05, 0.45, 0.15, -0.25, 0.3, 0.1, -0.2, 0.3, 0.05, 0.4, -0.1, 0.2, 0.3, -0.3, 0.1, 0.2, -0.4, 0.5, 0.1, -0.2, 0.3, 0.2, 0.1, -0.1, 0.25, 0.35, -0.15, 0.05, 0.45, 0.15, -0.25, 0.3]>
  %b = const f32[4] dense<[0.1, -0.1, 0.2, 0.0]>
  %s = const f32[4] dense<[1.5, 0.5, 2.0, 1.0]>
  %t = const f32[4] dense<[0.1, 0.2, -0.3, 0.0]>
  %m = const f32[4] dense<[0.05, -0.1, 0.2, 0.3]>
  %v = const f32[4] dense<[1.0, 0.25, 4.0, 0.5]>
  %c = Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} : f32[1,4,5,5]
  %y = BatchNormalization(%c, %s, %t, %m, %v) : f32[1,4,5,5]
  return %y
})",
                                       "fold-bn", 1, 1e-5, 1e-5);
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::BatchNormalization), 0u);
  EXPECT_EQ(countOps(*g, OpKind::Conv), 1u);
}

// fold-qdq: a QDQ convolution (u8 input with zero point 128 and scale 0.5; int8 1x1
// weights with per-channel scales 0.25 and 0.125; an int32 bias; y scale 0.3, zero
// point 3; a Relu) computes in integers. At the position with x = [130, 125], i.e.
// x - 128 = [2, -3]: channel 0's sum is 1*2 - 2*(-3) + 10 = 18, requantized as ONNX
// Runtime's QLinearConv does: fp32(18 * fp32(0.125 / 0.3)) = 7.5 rounds half to even
// to 8, plus 3: 11. (The float path: 18 * 0.125 = 2.25, 2.25 / 0.3 = 7.4999995,
// rounds to 7: 10.) At x = [255, 3] (127, -125): 387 -> 161.25 -> 164 either way.
// Channel 1: 3*2 + 4*(-3) - 20 = -26 and 3*127 - 4*125 - 20 = -139; the Relu gives 0:
// 3.
TEST(FoldQdq, AQdqConvolutionComputesInIntegersAsOnnxRuntime) {
  const char *text = R"(graph @g(%xq: u8[1,2,1,2]) -> ("y": u8[1,2,1,2]) {
  %xs = const f32[] dense<[0.5]>
  %xz = const u8[] dense<[128]>
  %w = const i8[2,2,1,1] dense<[1, -2, 3, 4]>
  %ws = const f32[2,1,1,1] dense<[0.25, 0.125]>
  %b = const i32[2] dense<[10, -20]>
  %bs = const f32[2] dense<[0.125, 0.0625]>
  %ys = const f32[] dense<[0.3]>
  %yz = const u8[] dense<[3]>
  %x = DequantizeLinear(%xq, %xs, %xz) : f32[1,2,1,2]
  %wd = DequantizeLinear(%w, %ws) : f32[2,2,1,1]
  %bd = DequantizeLinear(%b, %bs) : f32[2]
  %c = Conv(%x, %wd, %bd) : f32[1,2,1,2]
  %r = Relu(%c) : f32[1,2,1,2]
  %y = QuantizeLinear(%r, %ys, %yz) {to = "u8"} : u8[1,2,1,2]
  return %y
})";
  auto before = test::parseIR(text);
  ASSERT_TRUE(before);
  auto after = test::runPasses(*before, "fold-qdq,constfold,dce");
  ASSERT_TRUE(after);
  EXPECT_EQ(countOps(*after, OpKind::DequantizeLinear), 0u);
  ASSERT_EQ(countOps(*after, OpKind::Conv), 1u);
  for (const Node *n : after->nodesOf(OpKind::Conv))
    EXPECT_EQ(n->result()->dtype(), DType::I32);
  // NCHW [1, 2, 1, 2]: channel 0 holds positions (255, 130), channel 1 (3, 125).
  TensorMap in{{"xq", Tensor::fromVector(TensorType(DType::U8, {1, 2, 1, 2}),
                                         std::vector<int64_t>{255, 130, 3, 125})}};
  auto folded = interpret(*after, in);
  ASSERT_TRUE(bool(folded)) << llvm::toString(folded.takeError());
  EXPECT_EQ(folded->at("y").toVector<int64_t>(), (std::vector<int64_t>{164, 11, 3, 3}));
  auto floating = interpret(*before, in);
  ASSERT_TRUE(bool(floating)) << llvm::toString(floating.takeError());
  EXPECT_EQ(floating->at("y").toVector<int64_t>(), (std::vector<int64_t>{164, 10, 3, 3}));
  // A float bias (not the int32 form quantization tools write) keeps the float path.
  std::string floatBias = text;
  floatBias.replace(floatBias.find("%bd = DequantizeLinear(%b, %bs) : f32[2]"),
                    std::string("%bd = DequantizeLinear(%b, %bs) : f32[2]").size(),
                    "%bd = const f32[2] dense<[1.25, -1.25]>");
  auto kept = test::runPasses(*test::parseIR(floatBias), "fold-qdq,dce");
  ASSERT_TRUE(kept);
  EXPECT_EQ(countOps(*kept, OpKind::DequantizeLinear), 2u);
}

// u8 activations with a zero point (ONNX Runtime's quantizer's default) by symmetric
// int8 weights: unpadded convolutions (strided and grouped; 2x2 dilated), a MatMul and
// a Gemm's form (B transposed) become int8 products of x - 128 with a corrected bias
// (and a MatMul of i8 activations with zero point -5, of x as it is), a padded
// convolution keeps the centered int32 form; every output equals the float path's over the
// whole u8 range (the scales powers of two: the float path rounds nothing).
TEST(FoldQdq, ShiftedU8ActivationsAreExact) {
  const char *text =
      R"(graph @g(%xq: u8[1,4,3,3], %aq: u8[3,6], %iq: i8[3,6]) -> ("y": u8[1,4,2,2], "p": f32[1,4,5,5], "m": f32[3,2], "d": f32[1,2,1,1], "t": f32[3,2], "i": f32[3,2]) {
  %s = const f32[] dense<[0.25]>
  %z = const u8[] dense<[77]>
  %w = const i8[4,2,1,1] dense<[1, -2, 127, -128, 5, 6, -7, 8]>
  %ws = const f32[4,1,1,1] dense<[0.125, 0.0625, 0.03125, 0.5]>
  %b = const i32[4] dense<[100, -200, 5, 0]>
  %bs = const f32[4] dense<[0.03125, 0.015625, 0.0078125, 0.125]>
  %ys = const f32[] dense<[4.0]>
  %yz = const u8[] dense<[9]>
  %v = const i8[6,2] dense<[1, -1, 2, -2, 3, -3, 127, -128, 0, 5, -5, 9]>
  %vs = const f32[2] dense<[0.5, 0.25]>
  %x = DequantizeLinear(%xq, %s, %z) : f32[1,4,3,3]
  %wd = DequantizeLinear(%w, %ws) : f32[4,2,1,1]
  %bd = DequantizeLinear(%b, %bs) : f32[4]
  %c = Conv(%x, %wd, %bd) {group = 2, strides = [2, 2]} : f32[1,4,2,2]
  %y = QuantizeLinear(%c, %ys, %yz) {to = "u8"} : u8[1,4,2,2]
  %p = Conv(%x, %wd, %bd) {group = 2, pads = [1, 1, 1, 1]} : f32[1,4,5,5]
  %a = DequantizeLinear(%aq, %s, %z) : f32[3,6]
  %vd = DequantizeLinear(%v, %vs) : f32[6,2]
  %m = MatMul(%a, %vd) : f32[3,2]
  %k = const i8[2,4,2,2] dense<[1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 9, 10, 11, 12, -13, 14, 0, 1, -1, 2, -2, 3, -3, 4, 100, -100, 50, -50, 25, -25, 12, -12]>
  %ks = const f32[2,1,1,1] dense<[0.125, 0.25]>
  %kd = DequantizeLinear(%k, %ks) : f32[2,4,2,2]
  %d = Conv(%x, %kd) {dilations = [2, 2]} : f32[1,2,1,1]
  %vt = const i8[2,6] dense<[3, -3, 5, -5, 7, -7, 127, -128, 1, 2, 3, 4]>
  %vts = const f32[2,1] dense<[0.5, 0.125]>
  %vtd = DequantizeLinear(%vt, %vts) : f32[2,6]
  %tr = Transpose(%vtd) {perm = [1, 0]} : f32[6,2]
  %t = MatMul(%a, %tr) : f32[3,2]
  %iz = const i8[] dense<[-5]>
  %id = DequantizeLinear(%iq, %s, %iz) : f32[3,6]
  %i = MatMul(%id, %vd) : f32[3,2]
  return %y, %p, %m, %d, %t, %i
})";
  auto before = test::parseIR(text);
  ASSERT_TRUE(before);
  auto after = test::runPasses(*before, "fold-qdq,canonicalize,constfold,dce");
  ASSERT_TRUE(after);
  int int8Products = 0, int32Products = 0;
  for (OpKind k : {OpKind::Conv, OpKind::MatMul})
    for (const Node *n : after->nodesOf(k)) {
      EXPECT_EQ(n->result()->dtype(), DType::I32) << opName(k);
      int8Products += n->operand(0)->dtype() == DType::I8;
      int32Products += n->operand(0)->dtype() == DType::I32;
    }
  EXPECT_EQ(int8Products, 5);  // the unpadded Convs and the MatMuls (a Gemm's form, i8's)
  EXPECT_EQ(int32Products, 1); // the padded Conv
  std::vector<int64_t> xs, as;
  for (int i = 0; i < 36; ++i)
    xs.push_back((i * 37 + 11) % 256);
  for (int i = 0; i < 18; ++i)
    as.push_back(i % 3 ? (i * 53) % 256 : 255 * (i % 2));
  std::vector<int64_t> is;
  for (int64_t v : as)
    is.push_back(v - 128);
  TensorMap in{{"xq", Tensor::fromVector(TensorType(DType::U8, {1, 4, 3, 3}), xs)},
               {"aq", Tensor::fromVector(TensorType(DType::U8, {3, 6}), as)},
               {"iq", Tensor::fromVector(TensorType(DType::I8, {3, 6}), is)}};
  auto folded = interpret(*after, in), floating = interpret(*before, in);
  ASSERT_TRUE(bool(folded)) << llvm::toString(folded.takeError());
  ASSERT_TRUE(bool(floating)) << llvm::toString(floating.takeError());
  for (const char *o : {"y", "p", "m", "d", "t", "i"})
    EXPECT_EQ(folded->at(o).toVector<double>(), floating->at(o).toVector<double>()) << o;
}

// fold-qdq on the symmetric INT8 form dlc quantize writes: Q(MaxPool(DQ)) with pads
// (windows partly outside the input) moves int8, the convolution multiplies int8 as it
// is (the int8 Conv, int32 sums), and the Gemm-like MatMul with no QuantizeLinear after
// it dequantizes its int32 sums. Every output equals the float path's: the int8 path
// is exact where the float one rounds nothing (the scales are powers of two).
TEST(FoldQdq, SymmetricInt8ThroughMaxPoolConvAndMatMulIsExact) {
  const char *text = R"(graph @g(%xq: i8[1,2,3,3]) -> ("y": f32[1,4]) {
  %s = const f32[] dense<[0.25]>
  %z = const i8[] dense<[0]>
  %w = const i8[3,2,1,1] dense<[1, -2, 3, 4, -128, 127]>
  %ws = const f32[3,1,1,1] dense<[0.125, 0.0625, 0.03125]>
  %b = const i32[3] dense<[100, -200, 5]>
  %bs = const f32[3] dense<[0.03125, 0.015625, 0.0078125]>
  %m = const i8[12,4] dense<[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, 127, -128, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, -20, 30, -40, 50, 60, -70, 80, -90]>
  %ms = const f32[4] dense<[0.5, 0.25, 0.125, 0.0625]>
  %ys = const f32[] dense<[0.5]>
  %x = DequantizeLinear(%xq, %s, %z) : f32[1,2,3,3]
  %pf = MaxPool(%x) {kernel_shape = [2, 2], pads = [1, 1, 0, 0], strides = [2, 2]} : f32[1,2,2,2]
  %p = QuantizeLinear(%pf, %s, %z) {to = "i8"} : i8[1,2,2,2]
  %pd = DequantizeLinear(%p, %s, %z) : f32[1,2,2,2]
  %wd = DequantizeLinear(%w, %ws, %z) : f32[3,2,1,1]
  %bd = DequantizeLinear(%b, %bs) : f32[3]
  %c = Conv(%pd, %wd, %bd) : f32[1,3,2,2]
  %r = Relu(%c) : f32[1,3,2,2]
  %q = QuantizeLinear(%r, %ys, %z) {to = "i8"} : i8[1,3,2,2]
  %qd = DequantizeLinear(%q, %ys, %z) : f32[1,3,2,2]
  %f = Reshape(%qd) {shape = [1, 12]} : f32[1,12]
  %fq = QuantizeLinear(%f, %ys, %z) {to = "i8"} : i8[1,12]
  %fd = DequantizeLinear(%fq, %ys, %z) : f32[1,12]
  %md = DequantizeLinear(%m, %ms) : f32[12,4]
  %y = MatMul(%fd, %md) : f32[1,4]
  return %y
})";
  auto before = test::parseIR(text);
  ASSERT_TRUE(before);
  auto after = test::runPasses(*before, "fold-qdq,canonicalize,constfold,dce");
  ASSERT_TRUE(after);
  EXPECT_EQ(countOps(*after, OpKind::QuantizeLinear), 1u);   // the Conv's requantization
  EXPECT_EQ(countOps(*after, OpKind::DequantizeLinear), 1u); // the MatMul's sums
  for (const Node *n : after->nodesOf(OpKind::MaxPool))
    EXPECT_EQ(n->result()->dtype(), DType::I8);
  for (OpKind k : {OpKind::Conv, OpKind::MatMul})
    for (const Node *n : after->nodesOf(k)) {
      EXPECT_EQ(n->operand(0)->dtype(), DType::I8) << opName(k);
      EXPECT_EQ(n->result()->dtype(), DType::I32) << opName(k);
    }
  std::vector<int64_t> xs;
  for (int i = 0; i < 18; ++i)
    xs.push_back(i % 2 ? -128 + 13 * i : 127 - 11 * i);
  TensorMap in{{"xq", Tensor::fromVector(TensorType(DType::I8, {1, 2, 3, 3}), xs)}};
  auto folded = interpret(*after, in), floating = interpret(*before, in);
  ASSERT_TRUE(bool(folded)) << llvm::toString(folded.takeError());
  ASSERT_TRUE(bool(floating)) << llvm::toString(floating.takeError());
  EXPECT_EQ(folded->at("y").toVector<float>(), floating->at("y").toVector<float>());
  // With ceil_mode a window may lie wholly in the padding (not at these shapes: the
  // rule is conservative): MaxPool stays in float.
  std::string ceil = text;
  ceil.replace(ceil.find("kernel_shape = [2, 2], pads"), 12, "ceil_mode = 1, kernel_shape");
  auto ceilGraph = test::parseIR(ceil);
  ASSERT_TRUE(ceilGraph);
  auto kept = test::runPasses(*ceilGraph, "fold-qdq,dce");
  ASSERT_TRUE(kept);
  for (const Node *n : kept->nodesOf(OpKind::MaxPool))
    EXPECT_EQ(n->result()->dtype(), DType::F32);
}

// QuantizeLinear and DequantizeLinear as ONNX defines them, by hand: round half to
// even, saturation, NaN to the lowest value; (x - zero point) * scale.
TEST(QuantOps, ReferenceSemantics) {
  auto g =
      test::parseIR(R"(graph @g(%x: f32[9], %q: i8[3]) -> ("u": u8[9], "i": i8[9], "d": f32[3]) {
  %s = const f32[] dense<[2.0]>
  %zu = const u8[] dense<[10]>
  %zi = const i8[] dense<[-1]>
  %u = QuantizeLinear(%x, %s, %zu) {to = "u8"} : u8[9]
  %i = QuantizeLinear(%x, %s) {to = "i8"} : i8[9]
  %d = DequantizeLinear(%q, %s, %zi) : f32[3]
  return %u, %i, %d
})");
  ASSERT_TRUE(g);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  TensorMap in{
      {"x", Tensor::fromVector(TensorType(DType::F32, {9}),
                               std::vector<float>{1, 3, 5, -1, -3, 1000, -1000, 2.2f, nan})},
      {"q", Tensor::fromVector(TensorType(DType::I8, {3}), std::vector<int64_t>{-128, 0, 127})}};
  auto out = interpret(*g, in);
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  // x / 2 = 0.5, 1.5, 2.5, -0.5, -1.5, 500, -500, 1.1, NaN -> 0, 2, 2, -0, -2, ...
  EXPECT_EQ(out->at("u").toVector<int64_t>(),
            (std::vector<int64_t>{10, 12, 12, 10, 8, 255, 0, 11, 0}));
  EXPECT_EQ(out->at("i").toVector<int64_t>(),
            (std::vector<int64_t>{0, 2, 2, 0, -2, 127, -128, 1, -128}));
  EXPECT_EQ(out->at("d").toVector<float>(), (std::vector<float>{-254, 2, 256}));
}

// Fusion only records groups (FusionGroup.h) and reorders: the corpus through the
// whole -O2 pipeline computes the same and verifies, groups included.
TEST(Fusion, AnnotatesWithoutChangingTheComputation) {
  for (const char *f : kCorpus) {
    SCOPED_TRACE(f);
    auto g = test::expectEquivalentAfter(
        test::readSourceFile(f), "canonicalize,fold-bn,constfold,cse,dce,fuse", 2, 1e-5, 1e-5);
    ASSERT_TRUE(g);
    size_t annotated = 0;
    for (const Node &n : g->nodes())
      annotated += n.fusionGroup() != nullptr;
    if (std::string(f).find("rnn") == std::string::npos) { // the LSTM model is one opaque op
      EXPECT_GT(annotated, 0u) << "this corpus model has something to fuse";
    }
  }
}

// The precision pass (FP16 by default): the corpus computes the same within FP16's
// precision, every FP32 graph input and output keeps its dtype, and no Cast feeds
// another Cast (one shared conversion per value, exact pairs folded).
TEST(MixedPrecision, CorpusMatchesFp32WithinHalfPrecision) {
  for (const char *f : kCorpus) {
    SCOPED_TRACE(f);
    auto before = test::parseIR(test::readSourceFile(f));
    ASSERT_TRUE(before);
    auto g = test::expectEquivalentAfter(test::readSourceFile(f), "precision,canonicalize,cse,dce",
                                         2, 3e-2, 3e-2);
    ASSERT_TRUE(g);
    for (size_t i = 0; i < g->outputs().size(); ++i)
      EXPECT_EQ(g->outputs()[i].value->dtype(), before->outputs()[i].value->dtype())
          << g->outputs()[i].name;
    size_t reduced = 0;
    for (const Node &n : g->nodes()) {
      reduced += n.numResults() && n.result()->dtype() == DType::F16;
      if (n.kind() == OpKind::Cast && n.operand(0)->definingNode()) {
        EXPECT_NE(n.operand(0)->definingNode()->kind(), OpKind::Cast) << "a cast pair remains";
      }
      if (n.def().fp16 == Fp16Policy::Deny && !n.def().fp16Refine) {
        for (unsigned r = 0; r < n.numResults(); ++r)
          EXPECT_NE(n.result(r)->dtype(), DType::F16) << n.describe() << " is deny-listed";
      }
    }
    if (std::string(f).find("rnn") == std::string::npos) { // the RNN corpus is deny-listed LSTM/GRU
      EXPECT_GT(reduced, 0u);
    }
  }
}

TEST(MixedPrecision, CastChainsFoldOnlyWhenExact) {
  EXPECT_TRUE(castIsExact(DType::F16, DType::F32));
  EXPECT_TRUE(castIsExact(DType::BF16, DType::F32));
  EXPECT_TRUE(castIsExact(DType::Bool, DType::F16));
  EXPECT_TRUE(castIsExact(DType::U8, DType::F16));
  EXPECT_TRUE(castIsExact(DType::I32, DType::F64));
  EXPECT_FALSE(castIsExact(DType::F32, DType::F16));
  EXPECT_FALSE(castIsExact(DType::F16, DType::BF16));
  EXPECT_FALSE(castIsExact(DType::I32, DType::F32));
  EXPECT_FALSE(castIsExact(DType::I16, DType::F16));
  EXPECT_FALSE(castIsExact(DType::I8, DType::U16));
  auto g = test::expectEquivalentAfter(
      R"(graph @g(%x: f16[3], %b: bool[3]) -> ("y": f16[3], "z": f32[3], "w": f16[3]) {
  %0 = Cast(%x) {to = "f32"} : f32[3]
  %1 = Cast(%0) {to = "f16"} : f16[3]
  %2 = Cast(%0) {to = "bf16"} : bf16[3]
  %3 = Cast(%2) {to = "f32"} : f32[3]
  %4 = Cast(%b) {to = "f32"} : f32[3]
  %5 = Cast(%4) {to = "f16"} : f16[3]
  return %1, %3, %5
})",
      "canonicalize,dce");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->outputs()[0].value->name(), "x") << "f16 -> f32 -> f16 is the identity";
  EXPECT_EQ(countOps(*g, OpKind::Cast), 3u)
      << "f16 -> bf16 rounds: that pair stays; bool -> f16 is one cast";
}

namespace {
passes::PassContext layoutContext(passes::LayoutMode m) {
  passes::PassContext ctx;
  ctx.layout = m;
  return ctx;
}
bool anyChannelsLast(const Graph &g) {
  for (const Node &n : g.nodes())
    if (n.def().findAttr("channels_last") && n.attrInt("channels_last") != 0)
      return true;
  return false;
}
} // namespace

// The layout pass (--layout nhwc): the corpus computes the same, the CNN's
// convolution and pooling run channels-last with one transpose at the input and one
// in front of the Flatten, and the graph's inputs and outputs keep their shapes.
TEST(Layout, CorpusMatchesChannelsFirst) {
  for (const char *f : kCorpus) {
    SCOPED_TRACE(f);
    auto before = test::parseIR(test::readSourceFile(f));
    ASSERT_TRUE(before);
    auto g = test::expectEquivalentAfter(
        test::readSourceFile(f),
        "canonicalize,fold-bn,constfold,dce,layout,canonicalize,constfold,cse,dce", 2, 1e-5, 1e-5,
        layoutContext(passes::LayoutMode::NHWC));
    ASSERT_TRUE(g);
    for (size_t i = 0; i < g->outputs().size(); ++i)
      EXPECT_EQ(g->outputs()[i].value->shape(), before->outputs()[i].value->shape());
    if (std::string(f).find("cnn") != std::string::npos) {
      EXPECT_TRUE(anyChannelsLast(*g));
      EXPECT_EQ(countOps(*g, OpKind::Transpose), 2u) << printGraph(*g);
      EXPECT_EQ(countOps(*g, OpKind::BatchNormalization), 0u);
    }
  }
}

// Auto leaves FP32 graphs alone and moves FP16 convolution networks; nchw never moves.
TEST(Layout, AutoActsOnReducedPrecisionConvNets) {
  const std::string cnn = test::readSourceFile("tests/unit/ir/corpus/cnn.ir");
  auto fp32 = test::runPasses(*test::parseIR(cnn), "fold-bn,layout",
                              layoutContext(passes::LayoutMode::Auto));
  ASSERT_TRUE(fp32);
  EXPECT_FALSE(anyChannelsLast(*fp32));
  auto fp16 = test::expectEquivalentAfter(
      cnn, "fold-bn,constfold,dce,precision,layout,canonicalize,constfold,dce", 2, 3e-2, 3e-2,
      layoutContext(passes::LayoutMode::Auto));
  ASSERT_TRUE(fp16);
  EXPECT_TRUE(anyChannelsLast(*fp16));
  auto nchw = test::runPasses(*test::parseIR(cnn), "fold-bn,precision,layout",
                              layoutContext(passes::LayoutMode::NCHW));
  ASSERT_TRUE(nchw);
  EXPECT_FALSE(anyChannelsLast(*nchw));
}

// Sinking remaps axis attributes through the permutation: Softmax, Concat, Split,
// Reduce with and without keepdims (whose result then needs no transpose), and
// element-wise ops with broadcast constants of lower rank; grouped and depthwise
// convolutions and average pooling with padding go channels-last too.
TEST(Layout, AxisRemapsMatchTheInterpreter) {
  auto g = test::expectEquivalentAfter(
      R"(graph @g(%x: f32[2,4,5,6]) -> ("a": f32[2,4,5,6], "b": f32[2,5,6], "c": f32[2,4], "d": f32[2,8,5,6], "e": f32[2,4,5,6]) {
  %w = const f32[4,2,3,1] dense<[1.0, -1.0, 0.5, 2.0, 0.25, -0.5, 1.5, -2.0, 1.0, 0.0, 1.0, -1.0, 0.5, 0.5, -1.0, 2.0, 1.0, 1.0, 0.0, -0.5, 0.25, 1.0, -1.0, 2.0]>
  %dw = const f32[4,1,2,2] dense<[1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 0.0, 1.0, 2.0, -2.0, 1.0, 1.0, 0.5, 0.25, -1.0, 1.0]>
  %k = const f32[5,1] dense<[1.0, 2.0, 3.0, 4.0, 5.0]>
  %c = Conv(%x, %w) {group = 2, pads = [1, 0, 1, 0]} : f32[2,4,5,6]
  %d = Conv(%c, %dw) {group = 4, pads = [0, 0, 1, 1]} : f32[2,4,5,6]
  %m = Mul(%d, %k) : f32[2,4,5,6]
  %a = Softmax(%m) {axis = 1} : f32[2,4,5,6]
  %b = ReduceSum(%m) {axes = [1], keepdims = 0} : f32[2,5,6]
  %c2 = ReduceMax(%m) {axes = [-1, 2], keepdims = 0} : f32[2,4]
  %s0, %s1 = Split(%m) {axis = 1, split = [1, 3]} : f32[2,1,5,6], f32[2,3,5,6]
  %d2 = Concat(%s1, %m, %s0) {axis = 1} : f32[2,8,5,6]
  %e = AveragePool(%m) {kernel_shape = [3, 3], pads = [1, 1, 1, 1], count_include_pad = 0} : f32[2,4,5,6]
  return %a, %b, %c2, %d2, %e
})",
      "layout,canonicalize,constfold,cse,dce", 3, 1e-5, 1e-5,
      layoutContext(passes::LayoutMode::NHWC));
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::Transpose), 4u)
      << "the input, and one per output but the reductions' " << printGraph(*g);
}

TEST(Legalize, RmsNormalizationBecomesItsFunctionBody) {
  // FP64 (no kernel), over the last dim and over the last two; FP32 with an FP32 stash
  // stays (row_norm's RMS form).
  auto g = test::expectEquivalentAfter(
      R"(graph @g(%x: f64[3,4,8], %s: f64[8], %t: f64[4,8], %z: f32[3,4,8], %w: f32[8]) -> ("a": f64[3,4,8], "b": f64[3,4,8], "c": f32[3,4,8]) {
  %a = RMSNormalization(%x, %s) {epsilon = 0.01} : f64[3,4,8]
  %b = RMSNormalization(%x, %t) {axis = 1} : f64[3,4,8]
  %c = RMSNormalization(%z, %w) : f32[3,4,8]
  return %a, %b, %c
})",
      "legalize");
  ASSERT_TRUE(g);
  EXPECT_EQ(countOps(*g, OpKind::RMSNormalization), 1u) << "the FP32 one has a kernel";
  EXPECT_EQ(countOps(*g, OpKind::ReduceMean), 2u);
  EXPECT_EQ(countOps(*g, OpKind::Sqrt), 2u);

  // In FP16 after the precision pass: another stash_type decomposes in FP16, and
  // stash_type = 1 keeps the node (its kernel accumulates in FP32).
  passes::PassContext fp16;
  fp16.precision.reduced = DType::F16;
  auto h = test::expectEquivalentAfter(
      R"(graph @g(%x: f32[2,64], %s: f32[64]) -> ("y": f32[2,64], "z": f32[2,64]) {
  %y = RMSNormalization(%x, %s) : f32[2,64]
  %z = RMSNormalization(%x, %s) {stash_type = 10} : f32[2,64]
  return %y, %z
})",
      "precision,legalize,canonicalize,cse,dce", 3, 1e-2, 1e-2, fp16);
  ASSERT_TRUE(h);
  EXPECT_EQ(countOps(*h, OpKind::RMSNormalization), 1u);
  EXPECT_EQ(countOps(*h, OpKind::ReduceMean), 1u);
}

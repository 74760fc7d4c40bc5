// Reference kernels checked against values computed by hand.
#include "../Testing.h"
#include "dlc/ir/OpHelpers.h"

#include <cmath>
#include <limits>

using namespace dlc;
using namespace dlc::ir;
using dlc::test::errorOf;

namespace {

Tensor f32(Shape s, std::vector<float> v) {
  return Tensor::fromVector(TensorType(DType::F32, std::move(s)), v);
}

/// Runs a graph whose inputs are given positionally; returns output 0.
Tensor run1(const std::string &ir, std::vector<Tensor> inputs, unsigned out = 0) {
  auto g = test::parseIR(ir);
  if (!g)
    return Tensor();
  TensorMap m;
  for (size_t i = 0; i < inputs.size(); ++i)
    m[g->inputs()[i]->name()] = inputs[i];
  auto r = interpret(*g, m);
  if (!r) {
    ADD_FAILURE() << errorOf(r);
    return Tensor();
  }
  return r->at(g->outputs()[out].name);
}

void expectValues(const Tensor &t, std::vector<double> want, double tol = 1e-6) {
  ASSERT_EQ(t.numElements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.getDouble(i), want[i], tol) << "element " << i;
}

} // namespace

TEST(Interpreter, BroadcastArithmetic) {
  Tensor r = run1(R"(graph @g(%a: f32[2,3], %b: f32[3]) -> ("y": f32[2,3]) {
  %0 = Sub(%a, %b) : f32[2,3]
  return %0
})",
                  {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({3}, {1, 1, 2})});
  expectValues(r, {0, 1, 1, 3, 4, 4});
}

TEST(Interpreter, IntegerDivisionTruncatesAndNeverTraps) {
  auto ints = [](std::vector<int64_t> v) {
    return Tensor::fromVector(TensorType(DType::I32, {int64_t(v.size())}), v);
  };
  Tensor r = run1(R"(graph @g(%a: i32[4], %b: i32[4]) -> ("y": i32[4]) {
  %0 = Div(%a, %b) : i32[4]
  return %0
})",
                  {ints({7, -7, 5, 3}), ints({2, 2, 0, -3})});
  expectValues(r, {3, -3, 0, -1});
}

// INT64_MIN % -1 and INT64_MIN / -1 overflow (x86 traps on them): Mod gives 0, Div wraps.
TEST(Interpreter, Int64ModAndDivOfTheMinimumByMinusOne) {
  auto i64 = [](std::vector<int64_t> v) {
    return Tensor::fromVector(TensorType(DType::I64, {int64_t(v.size())}), v);
  };
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const char *ir = R"(graph @g(%a: i64[3], %b: i64[3]) -> ("m": i64[3], "f": i64[3], "d": i64[3]) {
  %0 = Mod(%a, %b) : i64[3]
  %1 = Mod(%a, %b) {fmod = 1} : i64[3]
  %2 = Div(%a, %b) : i64[3]
  return %0, %1, %2
})";
  Tensor a = i64({lo, 7, -7}), b = i64({-1, -1, 0});
  for (unsigned out : {0u, 1u}) {
    Tensor r = run1(ir, {a, b}, out);
    ASSERT_EQ(r.numElements(), 3);
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(r.getInt(i), 0) << "output " << out << " element " << i;
  }
  Tensor d = run1(ir, {a, b}, 2);
  EXPECT_EQ(d.getInt(0), lo); // wraps, as two's complement
  EXPECT_EQ(d.getInt(1), -7);
  EXPECT_EQ(d.getInt(2), 0);
}

TEST(Interpreter, MatMulBatchedBroadcast) {
  Tensor r = run1(R"(graph @g(%a: f32[2,1,2], %b: f32[2,1]) -> ("y": f32[2,1,1]) {
  %0 = MatMul(%a, %b) : f32[2,1,1]
  return %0
})",
                  {f32({2, 1, 2}, {1, 2, 3, 4}), f32({2, 1}, {10, 1})});
  expectValues(r, {12, 34});
}

TEST(Interpreter, ConvWithPaddingStrideAndGroups) {
  // 1x1x3x3 input of ones, 2x2 kernel of ones, pads 1: corner windows see 1 cell,
  // edges 2, interior 4.
  Tensor r = run1(R"(graph @g(%x: f32[1,1,3,3], %w: f32[1,1,2,2]) -> ("y": f32[1,1,2,2]) {
  %0 = Conv(%x, %w) {pads = [1, 1, 1, 1], strides = [2, 2]} : f32[1,1,2,2]
  return %0
})",
                  {f32({1, 1, 3, 3}, std::vector<float>(9, 1)), f32({1, 1, 2, 2}, {1, 1, 1, 1})});
  expectValues(r, {1, 2, 2, 4});
  // Depthwise: each channel scaled by its own weight.
  Tensor d = run1(R"(graph @g(%x: f32[1,2,1,2], %w: f32[2,1,1,1]) -> ("y": f32[1,2,1,2]) {
  %0 = Conv(%x, %w) {group = 2} : f32[1,2,1,2]
  return %0
})",
                  {f32({1, 2, 1, 2}, {1, 2, 3, 4}), f32({2, 1, 1, 1}, {10, 100})});
  expectValues(d, {10, 20, 300, 400});
}

TEST(Interpreter, ConvTransposeScattersKernel) {
  Tensor r = run1(R"(graph @g(%x: f32[1,1,2], %w: f32[1,1,3]) -> ("y": f32[1,1,5]) {
  %0 = ConvTranspose(%x, %w) {strides = [2]} : f32[1,1,5]
  return %0
})",
                  {f32({1, 1, 2}, {1, 10}), f32({1, 1, 3}, {1, 2, 3})});
  expectValues(r, {1, 2, 13, 20, 30});
}

TEST(Interpreter, PoolingCountsPaddingOnlyWhenAsked) {
  const char *ir =
      R"(graph @g(%x: f32[1,1,2,2]) -> ("y": f32[1,1,2,2], "z": f32[1,1,2,2], "m": f32[1,1,1,1], "i": i64[1,1,1,1]) {
  %0 = AveragePool(%x) {kernel_shape = [2, 2], pads = [1, 1, 0, 0]} : f32[1,1,2,2]
  %1 = AveragePool(%x) {kernel_shape = [2, 2], pads = [1, 1, 0, 0], count_include_pad = 1} : f32[1,1,2,2]
  %2, %3 = MaxPool(%x) {kernel_shape = [2, 2]} : f32[1,1,1,1], i64[1,1,1,1]
  return %0, %1, %2, %3
})";
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  expectValues(run1(ir, {x}, 0), {1, 1.5, 2, 2.5});
  expectValues(run1(ir, {x}, 1), {0.25, 0.75, 1, 2.5});
  expectValues(run1(ir, {x}, 2), {4});
  expectValues(run1(ir, {x}, 3), {3});
}

TEST(Interpreter, SoftmaxAndLogSoftmax) {
  const char *ir = R"(graph @g(%x: f32[2]) -> ("s": f32[2], "l": f32[2]) {
  %0 = Softmax(%x) : f32[2]
  %1 = LogSoftmax(%x) : f32[2]
  return %0, %1
})";
  Tensor x = f32({2}, {0, std::log(3.0f)});
  expectValues(run1(ir, {x}, 0), {0.25, 0.75});
  expectValues(run1(ir, {x}, 1), {std::log(0.25), std::log(0.75)}, 1e-6);
}

TEST(Interpreter, ReductionsAndLayerNorm) {
  const char *ir = R"(graph @g(%x: f32[2,2]) -> ("m": f32[2,1], "s": f32[2], "n": f32[2,2]) {
  %one = const f32[2] dense<[1.0, 1.0]>
  %0 = ReduceMean(%x) {axes = [1]} : f32[2,1]
  %1 = ReduceSum(%x) {axes = [-1], keepdims = 0} : f32[2]
  %2 = LayerNormalization(%x, %one) {epsilon = 0.0} : f32[2,2]
  return %0, %1, %2
})";
  Tensor x = f32({2, 2}, {1, 3, -2, 2});
  expectValues(run1(ir, {x}, 0), {2, 0});
  expectValues(run1(ir, {x}, 1), {4, 0});
  expectValues(run1(ir, {x}, 2), {-1, 1, -1, 1});
}

TEST(Interpreter, RmsNormalization) {
  // y = x / sqrt(mean(x^2 over the dims from axis on) + epsilon) * scale.
  const char *ir = R"(graph @g(%x: f32[2,2], %z: f32[2,1,2]) -> ("a": f32[2,2], "b": f32[2,1,2]) {
  %s = const f32[2] dense<[1.0, 2.0]>
  %a = RMSNormalization(%x, %s) {epsilon = 0.0} : f32[2,2]
  %b = RMSNormalization(%z, %s) {axis = 1, epsilon = 3.5} : f32[2,1,2]
  return %a, %b
})";
  Tensor x = f32({2, 2}, {1, 7, 2, -2});   // mean squares 25 and 4
  Tensor z = f32({2, 1, 2}, {3, 4, 0, 0}); // 12.5 + 3.5 = 16, and 0 + 3.5
  expectValues(run1(ir, {x, z}, 0), {0.2, 2.8, 1, -2});
  expectValues(run1(ir, {x, z}, 1), {0.75, 2, 0, 0});
}

TEST(Interpreter, BitwiseOps) {
  const char *ir =
      R"(graph @g(%a: i32[3], %b: i32[3], %u: u8[2]) -> ("and": i32[3], "or": i32[3], "xor": i32[3], "not": i32[3], "nu": u8[2]) {
  %0 = BitwiseAnd(%a, %b) : i32[3]
  %1 = BitwiseOr(%a, %b) : i32[3]
  %2 = BitwiseXor(%a, %b) : i32[3]
  %3 = BitwiseNot(%a) : i32[3]
  %4 = BitwiseNot(%u) : u8[2]
  return %0, %1, %2, %3, %4
})";
  auto i32 = [](std::vector<int64_t> v) {
    return Tensor::fromVector(TensorType(DType::I32, {static_cast<int64_t>(v.size())}), v);
  };
  Tensor a = i32({12, -1, 5}), b = i32({10, 7, -6});
  Tensor u = Tensor::fromVector(TensorType(DType::U8, {2}), std::vector<int64_t>{0, 0xF0});
  // 12 = 0b1100, 10 = 0b1010; -1 is all ones; 5 = 0b0101 and -6 = ...11010.
  expectValues(run1(ir, {a, b, u}, 0), {8, 7, 0});
  expectValues(run1(ir, {a, b, u}, 1), {14, -1, -1});
  expectValues(run1(ir, {a, b, u}, 2), {6, -8, -1});
  expectValues(run1(ir, {a, b, u}, 3), {-13, 0, -6});
  expectValues(run1(ir, {a, b, u}, 4), {255, 15});
}

TEST(Interpreter, MovementOps) {
  const char *ir =
      R"(graph @g(%x: f32[2,3]) -> ("t": f32[3,2], "s": f32[2,2], "p": f32[2,5], "g": f32[2,2], "c": f32[4,3]) {
  %idx = const i64[2] dense<[-1, 0]>
  %0 = Transpose(%x) : f32[3,2]
  %1 = Slice(%x) {starts = [-1], ends = [-4], axes = [1], steps = [-2]} : f32[2,2]
  %2 = Pad(%x) {pads = [0, 1, 0, 1], mode = "reflect"} : f32[2,5]
  %3 = Gather(%x, %idx) {axis = 1} : f32[2,2]
  %4 = Concat(%x, %x) {axis = 0} : f32[4,3]
  return %0, %1, %2, %3, %4
})";
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expectValues(run1(ir, {x}, 0), {1, 4, 2, 5, 3, 6});
  expectValues(run1(ir, {x}, 1), {3, 1, 6, 4});
  expectValues(run1(ir, {x}, 2), {2, 1, 2, 3, 2, 5, 4, 5, 6, 5});
  expectValues(run1(ir, {x}, 3), {3, 1, 6, 4});
  expectValues(run1(ir, {x}, 4), {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
}

TEST(Interpreter, GatherOutOfRangeIsAnError) {
  auto g = test::parseIR(R"(graph @g(%x: f32[3], %i: i64[1]) -> ("y": f32[1]) {
  %0 = Gather(%x, %i) : f32[1]
  return %0
})");
  ASSERT_TRUE(g);
  TensorMap m{{"x", f32({3}, {1, 2, 3})},
              {"i", Tensor::fromVector<int64_t>(TensorType(DType::I64, {1}), {3})}};
  auto r = interpret(*g, m);
  EXPECT_NE(errorOf(r).find("out of range"), std::string::npos);
}

TEST(Interpreter, HalfPrecisionRoundsEachResult) {
  // 2048 + 1 is not representable in f16: the sum rounds to 2048 (ties to even).
  auto h = [](float v) { return Tensor::fromVector<float>(TensorType(DType::F16, {1}), {v}); };
  Tensor r = run1(R"(graph @g(%a: f16[1], %b: f16[1]) -> ("y": f16[1]) {
  %0 = Add(%a, %b) : f16[1]
  return %0
})",
                  {h(2048), h(1)});
  expectValues(r, {2048});
}

// MulAdd rounds once: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 exactly; rounded first (a tie,
// to even) it is 1 + 2^-11, so Mul then Add gives 0 where MulAdd keeps 2^-24.
TEST(Interpreter, MulAddRoundsOnce) {
  const float a = 1.0f + std::ldexp(1.0f, -12), c = -(1.0f + std::ldexp(1.0f, -11));
  Tensor fused = run1(R"(graph @g(%a: f32[1], %b: f32[1], %c: f32[1]) -> ("y": f32[1]) {
  %0 = MulAdd(%a, %b, %c) : f32[1]
  return %0
})",
                      {f32({1}, {a}), f32({1}, {a}), f32({1}, {c})});
  Tensor twice = run1(R"(graph @g(%a: f32[1], %b: f32[1], %c: f32[1]) -> ("y": f32[1]) {
  %0 = Mul(%a, %b) : f32[1]
  %1 = Add(%0, %c) : f32[1]
  return %1
})",
                      {f32({1}, {a}), f32({1}, {a}), f32({1}, {c})});
  expectValues(fused, {std::ldexp(1.0, -24)}, 0);
  expectValues(twice, {0}, 0);
}

TEST(Interpreter, CastTruncatesTowardZero) {
  Tensor r = run1(R"(graph @g(%x: f32[3]) -> ("y": i32[3]) {
  %0 = Cast(%x) {to = "i32"} : i32[3]
  return %0
})",
                  {f32({3}, {2.9f, -2.9f, 0.5f})});
  expectValues(r, {2, -2, 0});
}

TEST(Interpreter, LstmWithSaturatedGatesTracksCellInput) {
  // W = R = 0; biases drive i, o, f gates to ~1 and the cell input to tanh(0.5):
  // c_t = c_{t-1} + tanh(0.5), h_t = tanh(c_t).
  std::vector<float> b(8, 0.0f);
  for (int g : {0, 1, 2}) // i, o, f input biases
    b[g] = 30.0f;
  b[3] = 0.5f;
  auto g = test::parseIR(
      R"(graph @g(%x: f32[2,1,1], %w: f32[1,4,1], %r: f32[1,4,1], %b: f32[1,8]) -> ("y": f32[2,1,1,1]) {
  %y, %h = LSTM(%x, %w, %r, %b) {hidden_size = 1} : f32[2,1,1,1], f32[1,1,1]
  return %y
})");
  ASSERT_TRUE(g);
  TensorMap m{{"x", f32({2, 1, 1}, {5, -5})},
              {"w", f32({1, 4, 1}, {0, 0, 0, 0})},
              {"r", f32({1, 4, 1}, {0, 0, 0, 0})},
              {"b", f32({1, 8}, b)}};
  auto r = interpret(*g, m);
  ASSERT_TRUE(bool(r)) << errorOf(r);
  double c1 = std::tanh(0.5), c2 = 2 * c1;
  expectValues(r->at("y"), {std::tanh(c1), std::tanh(c2)}, 1e-5);
}

TEST(Interpreter, RnnActivationsWithAlphaAndBeta) {
  // ONNX's defaults fill what the node leaves out: HardSigmoid 0.2/0.5, LeakyRelu 0.01.
  auto g = test::parseIR(
      R"(graph @g(%x: f32[1,1,1], %w: f32[2,3,1], %r: f32[2,3,1]) -> ("y": f32[1,2,1,1]) {
  %y, %h = GRU(%x, %w, %r) {direction = "bidirectional", hidden_size = 1, activations = ["HardSigmoid", "LeakyRelu", "ScaledTanh", "Affine"], activation_alpha = [0.3], activation_beta = [0.1]} : f32[1,2,1,1], f32[2,1,1]
  return %y
})");
  ASSERT_TRUE(g);
  const Node &gru = *g->nodes().begin();
  auto acts = rnnActivations(gru);
  ASSERT_TRUE(bool(acts)) << errorOf(acts);
  ASSERT_EQ(acts->size(), 4u);
  EXPECT_EQ((*acts)[0].alpha, double(0.3f)); // given (attributes are f32)
  EXPECT_EQ((*acts)[0].beta, double(0.1f));
  EXPECT_EQ((*acts)[1].alpha, 0.01); // LeakyRelu's default
  EXPECT_EQ((*acts)[2].alpha, 1.0);  // ScaledTanh's defaults
  EXPECT_EQ((*acts)[2].beta, 0.0);
  // HardSigmoid(2) = clamp(0.3 * 2 + 0.1, 0, 1) = 0.7; LeakyRelu(-2) = -0.02;
  // ScaledTanh(x) = 1 * tanh(0 * x) = 0; Affine(3) = 1 * 3 + 0 = 3.
  EXPECT_DOUBLE_EQ((*acts)[0](2.0), double(0.3f) * 2 + double(0.1f));
  EXPECT_DOUBLE_EQ((*acts)[1](-2.0), -0.02);
  EXPECT_DOUBLE_EQ((*acts)[2](5.0), 0.0);
  EXPECT_DOUBLE_EQ((*acts)[3](3.0), 3.0);

  // The verifier asks rnnActivations: a list of the wrong length or an unknown
  // function is refused before anything runs.
  for (auto [acts, expected] : {std::pair<const char *, const char *>{
                                    R"(["Sigmoid"])", "activations must list 2 functions"},
                                {R"(["Sigmoid", "Swish"])", "unsupported activation \"Swish\""}}) {
    auto wrong = ir::parseGraph(
        std::string(
            R"(graph @g(%x: f32[1,1,1], %w: f32[1,3,1], %r: f32[1,3,1]) -> ("y": f32[1,1,1,1]) {
  %y, %h = GRU(%x, %w, %r) {hidden_size = 1, activations = )") +
            acts + R"(} : f32[1,1,1,1], f32[1,1,1]
  return %y
})",
        "<test>");
    ASSERT_TRUE(bool(wrong)) << errorOf(wrong);
    std::string e = errorOf(ir::verifyGraph(**wrong));
    EXPECT_NE(e.find(expected), std::string::npos) << e;
  }
}

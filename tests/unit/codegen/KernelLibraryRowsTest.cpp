// The kernel library's row kernels on the emu backend against the reference
// interpreter (as KernelLibraryTest.cpp): the softmax family and its gradient, and the
// normalizations (LayerNorm, RMSNorm, GroupNorm, InstanceNorm, BatchNorm, LRN) and
// LayerNorm's gradient, over short, long, strided and contiguous rows. Every case runs
// with 32- and 64-bit indices.
#include "KernelLibraryTestUtil.h"

#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <vector>

using namespace dlc;
using namespace dlc::test;

TEST(KernelLibrary, SoftmaxFamily) {
  // (and a graph input's rows of 40: one value a lane would need 40 lanes, so a thread
  // per row as well)
  check(
      {"softmax over a middle axis",
       R"(graph @g(%x: f32[2,9,3], %r: f32[3,40]) -> ("y": f32[2,9,3], "l": f32[2,9,3], "h": f32[2,9,3], "s": f32[3,40]) {
  %y = Softmax(%x) {axis = 1} : f32[2,9,3]
  %l = LogSoftmax(%x) {axis = 1} : f32[2,9,3]
  %h = Hardmax(%x) {axis = 1} : f32[2,9,3]
  %s = Softmax(%r) {axis = 1} : f32[3,40]
  return %y, %l, %h, %s
})",
       {"dlc::softmax"}});
  // Contiguous rows longer than 64: softmax_rows, one pass (online max and sum), a
  // graph input read an element at a time (it may be bound anywhere); masked (-inf)
  // stretches, whole threads' worth of them, give 0 and leave the rest finite.
  std::vector<float> masked(3 * 257);
  for (size_t i = 0; i < masked.size(); ++i)
    masked[i] = i % 257 < 150 && i / 257 != 1 ? -std::numeric_limits<float>::infinity()
                                              : static_cast<float>((i * 37) % 11) * 0.25f - 1.f;
  check(
      {"long rows",
       R"(graph @g(%x: f32[3,257], %w: f32[3,257]) -> ("y": f32[3,257], "l": f32[3,257], "m": f32[3,257]) {
  %y = Softmax(%x) {axis = 1} : f32[3,257]
  %l = LogSoftmax(%x) {axis = -1} : f32[3,257]
  %m = Softmax(%w) {axis = 1} : f32[3,257]
  return %y, %l, %m
})",
       {"dlc::softmax_rows"},
       {{"w", ir::Tensor::fromVector(ir::TensorType(ir::DType::F32, {3, 257}), masked)}},
       2,
       true,
       1e-5,
       false,
       {"dlc::softmax"}});
  // Intermediates: 16-byte loads and stores (8 FP16 values), rows that stay in
  // registers (1000) and rows longer than 4 x 256 x 8 that re-read their tail (9000, BF16),
  // a fused epilogue (through Out).
  KernelCase rows{
      "long rows of intermediates, 16-byte accesses",
      R"(graph @g(%a: f16[3,16], %w: f16[16,1000], %v: f16[1000,8], %b: bf16[2,16], %u: bf16[16,9000]) -> ("y": f16[3,8], "z": bf16[2,9000]) {
  %h = MatMul(%a, %w) : f16[3,1000]
  %p = Softmax(%h) {axis = -1} : f16[3,1000]
  %y = MatMul(%p, %v) : f16[3,8]
  %g = MatMul(%b, %u) : bf16[2,9000]
  %q = LogSoftmax(%g) {axis = 1} : bf16[2,9000]
  %ten = const bf16[] dense<[10.0]>
  %z = Mul(%q, %ten) : bf16[2,9000]
  return %y, %z
})",
      {"dlc::softmax_rows"},
      {},
      2,
      true,
      2e-2,
      false,
      {"dlc::softmax"}};
  rows.sourceHas = "dlc::softmax_rows<dlc::kSoftmax, 8, 4, true,";
  check(rows);
  // Short contiguous rows read as they are: softmax_short_rows, a lane group a row (one
  // 16-byte vector a lane: FP16 rows of 16 are 2 lanes, FP32 rows of 40 ten lanes of a
  // 16-lane group, BF16 rows of 6 three 4-byte lanes of a 4-lane group), through a
  // fused scale; a graph input's rows of 20 one value a lane, with -inf stretches; a
  // scale fused before it (through the prologue, one value a lane).
  std::vector<float> holes(5 * 20);
  for (size_t i = 0; i < holes.size(); ++i)
    holes[i] = i % 20 < 7 ? -std::numeric_limits<float>::infinity()
                          : static_cast<float>((i * 13) % 9) * 0.3f - 1.f;
  KernelCase shortRows{
      "short rows, lane groups",
      R"(graph @g(%a: f16[5,8], %w: f16[8,16], %v: f16[16,4], %b: f32[3,8], %u: f32[8,40], %c: bf16[4,8], %t: bf16[8,6], %x: f32[5,20]) -> ("y": f16[5,4], "z": f32[3,40], "q": bf16[4,6], "s": f32[5,20], "ys": f16[5,4]) {
  %h = MatMul(%a, %w) : f16[5,16]
  %p = Softmax(%h) {axis = -1} : f16[5,16]
  %y = MatMul(%p, %v) : f16[5,4]
  %g = MatMul(%b, %u) : f32[3,40]
  %l = LogSoftmax(%g) {axis = 1} : f32[3,40]
  %two = const f32[] dense<[2.0]>
  %z = Mul(%l, %two) : f32[3,40]
  %k = MatMul(%c, %t) : bf16[4,6]
  %q = Softmax(%k) {axis = 1} : bf16[4,6]
  %s = Softmax(%x) {axis = 1} : f32[5,20]
  %half = const f16[] dense<[0.5]>
  %hs = Mul(%h, %half) : f16[5,16]
  %ps = Softmax(%hs) {axis = 1} : f16[5,16]
  %ys = MatMul(%ps, %v) : f16[5,4]
  return %y, %z, %q, %s, %ys
})",
      {"dlc::softmax_short_rows"},
      {{"x", ir::Tensor::fromVector(ir::TensorType(ir::DType::F32, {5, 20}), holes)}},
      2,
      true,
      2e-2,
      false,
      {"dlc::softmax"}};
  shortRows.sourceHas = "dlc::softmax_short_rows<dlc::kSoftmax, 8, 2, true, true,";
  check(shortRows);
}

// Softmax's and LogSoftmax's gradients (SoftmaxGrad, from autodiff): short strided rows
// (a thread per row), short contiguous ones (a lane group per row, one value a lane), a
// middle axis longer than 64 (a block per row, strided), graph inputs read an element
// at a time.
TEST(KernelLibrary, SoftmaxGradient) {
  check(
      {"short and strided rows",
       R"(graph @g(%y: f32[2,9,3], %d: f32[2,9,3], %u: f32[3,70,2], %e: f32[3,70,2]) -> ("a": f32[2,9,3], "b": f32[2,9,3], "c": f32[3,70,2], "l": f32[3,70,2]) {
  %a = SoftmaxGrad(%y, %d) {axis = 1} : f32[2,9,3]
  %b = SoftmaxGrad(%y, %d) {axis = -1, log = 1} : f32[2,9,3]
  %c = SoftmaxGrad(%u, %e) {axis = 1} : f32[3,70,2]
  %l = SoftmaxGrad(%u, %e) {axis = 1, log = 1} : f32[3,70,2]
  return %a, %b, %c, %l
})",
       {"dlc::softmax_grad"}});
  // Contiguous rows of intermediates: softmax_grad_rows reads y and dy 16 bytes at a time
  // (8 FP16 values), rows that stay in registers (1000) and rows longer than
  // 2 x 256 x 4 FP32 values that re-read their tail (4500, LogSoftmax's), a fused scale
  // (through Out), and dx written as it is.
  KernelCase rows{
      "long rows of intermediates, 16-byte accesses",
      R"(graph @g(%a: f16[3,16], %w: f16[16,1000], %w2: f16[16,1000], %v: f16[1000,8], %b: f32[2,16], %u: f32[16,4500], %u2: f32[16,4500]) -> ("x": f16[3,8], "z": f32[2,4500]) {
  %h = MatMul(%a, %w) : f16[3,1000]
  %p = Softmax(%h) {axis = -1} : f16[3,1000]
  %dp = MatMul(%a, %w2) : f16[3,1000]
  %ds = SoftmaxGrad(%p, %dp) {axis = 1} : f16[3,1000]
  %x = MatMul(%ds, %v) : f16[3,8]
  %g = MatMul(%b, %u) : f32[2,4500]
  %q = LogSoftmax(%g) {axis = 1} : f32[2,4500]
  %dq = MatMul(%b, %u2) : f32[2,4500]
  %dl = SoftmaxGrad(%q, %dq) {axis = 1, log = 1} : f32[2,4500]
  %half = const f32[] dense<[0.5]>
  %z = Mul(%dl, %half) : f32[2,4500]
  return %x, %z
})",
      {"dlc::softmax_grad_rows"},
      {},
      2,
      true,
      2e-2,
      false,
      {"dlc::softmax_grad"}};
  rows.sourceHas = "dlc::softmax_grad_rows<false, 8, 2, true,";
  check(rows);
  // Short contiguous rows: softmax_grad_short_rows, a lane group a row (FP16 rows of 16:
  // two 16-byte lanes; FP32 rows of 24 of a LogSoftmax: 6 lanes of an 8-lane group).
  KernelCase shortRows{
      "short rows, lane groups",
      R"(graph @g(%a: f16[6,8], %w: f16[8,16], %w2: f16[8,16], %v: f16[16,4], %b: f32[3,8], %u: f32[8,24], %u2: f32[8,24]) -> ("x": f16[6,4], "z": f32[3,24]) {
  %h = MatMul(%a, %w) : f16[6,16]
  %p = Softmax(%h) {axis = -1} : f16[6,16]
  %dp = MatMul(%a, %w2) : f16[6,16]
  %ds = SoftmaxGrad(%p, %dp) {axis = 1} : f16[6,16]
  %x = MatMul(%ds, %v) : f16[6,4]
  %g = MatMul(%b, %u) : f32[3,24]
  %q = LogSoftmax(%g) {axis = 1} : f32[3,24]
  %dq = MatMul(%b, %u2) : f32[3,24]
  %z = SoftmaxGrad(%q, %dq) {axis = 1, log = 1} : f32[3,24]
  return %x, %z
})",
      {"dlc::softmax_grad_short_rows"},
      {},
      2,
      true,
      2e-2,
      false,
      {"dlc::softmax_grad"}};
  shortRows.sourceHas = "dlc::softmax_grad_short_rows<false, 8, 2, true,";
  check(shortRows);
}

// LayerNormalization's gradient (LayerNormGrad, from autodiff): dX and the rows'
// statistics. Graph inputs (read an element at a time), rows over two dims; then
// intermediates read 16 bytes at a time: FP16 rows of 1024 that stay in registers and
// FP32 rows of 4500, longer than 2 x 256 x 4, that re-read their tail.
TEST(KernelLibrary, LayerNormGradient) {
  check(
      {"element at a time",
       R"(graph @g(%x: f32[2,3,10], %d: f32[2,3,10], %s: f32[10], %t: f32[3,10]) -> ("a": f32[2,3,10], "m": f32[2,3,1], "r": f32[2,3,1], "b": f32[2,3,10]) {
  %a, %m, %r = LayerNormGrad(%x, %d, %s) {axis = -1, epsilon = 0.001} : f32[2,3,10], f32[2,3,1], f32[2,3,1]
  %b, %m2, %r2 = LayerNormGrad(%x, %d, %t) {axis = 1} : f32[2,3,10], f32[2,1,1], f32[2,1,1]
  return %a, %m, %r, %b
})",
       {"dlc::layer_norm_grad"}});
  const std::string ir =
      R"(graph @g(%a: f16[3,16], %w: f16[16,1024], %w2: f16[16,1024], %v: f16[1024,8], %b: f32[2,16], %u: f32[16,4500], %u2: f32[16,4500]) -> ("y": f16[3,8], "m": f16[3,1], "r": f16[3,1], "z": f32[2,4500]) {
  %s = )" +
      randomConst(ir::DType::F16, {1024}, 21) +
      R"(
  %t = )" +
      randomConst(ir::DType::F32, {4500}, 22) +
      R"(
  %x = MatMul(%a, %w) : f16[3,1024]
  %d = MatMul(%a, %w2) : f16[3,1024]
  %dx, %m, %r = LayerNormGrad(%x, %d, %s) {axis = 1} : f16[3,1024], f16[3,1], f16[3,1]
  %y = MatMul(%dx, %v) : f16[3,8]
  %x2 = MatMul(%b, %u) : f32[2,4500]
  %d2 = MatMul(%b, %u2) : f32[2,4500]
  %dz, %m2, %r2 = LayerNormGrad(%x2, %d2, %t) {axis = -1} : f32[2,4500], f32[2,1], f32[2,1]
  %half = const f32[] dense<[0.5]>
  %z = Mul(%dz, %half) : f32[2,4500]
  return %y, %m, %r, %z
})";
  KernelCase rows{"long rows of intermediates, 16-byte accesses",
                  ir.c_str(),
                  {"dlc::layer_norm_grad"},
                  {},
                  2,
                  true,
                  2e-2};
  rows.sourceHas = "dlc::layer_norm_grad<8, 2,";
  check(rows);
}

TEST(KernelLibrary, RmsNormalization) {
  // RMSNormalization as row_norm's RMS form (no mean, no bias): short rows (one thread
  // per row), long rows read once by row_norm_rows (16-byte loads, a residual Add as
  // its prologue falls back to row_norm), a scale broadcast over the last two dims, and
  // FP16 data with an FP32 scale (Y takes the scale's type).
  check(
      {"rms norm, short rows and long rows",
       R"(graph @g(%x: f32[5,7,24], %s: f32[24], %t: f32[7,24], %u: f32[6,1000], %v: f32[1000], %r: f32[6,1000]) -> ("a": f32[5,7,24], "b": f32[5,7,24], "c": f32[6,1000], "d": f32[6,1000]) {
  %a = RMSNormalization(%x, %s) {epsilon = 0.01} : f32[5,7,24]
  %b = RMSNormalization(%x, %t) {axis = 1} : f32[5,7,24]
  %c = RMSNormalization(%u, %v) : f32[6,1000]
  %ur = Add(%u, %r) : f32[6,1000]
  %d = RMSNormalization(%ur, %v) : f32[6,1000]
  return %a, %b, %c, %d
})",
       {"dlc::row_norm", "dlc::row_norm_rows"},
       {},
       2,
       true,
       1e-5,
       false,
       {"dlc::reduce"}});
  // A fused residual Add: row_norm keeps each thread's first 8 values in registers;
  // rows of 2500 (> 8 x 256) re-read their tail.
  check(
      {"rms and layer norm with a residual prologue, rows past the register cache",
       R"(graph @g(%x: f32[3,2500], %r: f32[3,2500], %s: f32[2500], %b: f32[2500]) -> ("a": f32[3,2500], "l": f32[3,2500]) {
  %h = Add(%x, %r) : f32[3,2500]
  %a = RMSNormalization(%h, %s) : f32[3,2500]
  %h2 = Sub(%x, %r) : f32[3,2500]
  %l = LayerNormalization(%h2, %s, %b) : f32[3,2500]
  return %a, %l
})",
       {"dlc::row_norm"},
       {},
       2,
       true,
       1e-5});
  check(
      {"rms norm, f16 data",
       R"(graph @g(%x: f16[4,520], %s: f16[520], %w: f32[520]) -> ("a": f16[4,520], "b": f32[4,520]) {
  %a = RMSNormalization(%x, %s) : f16[4,520]
  %b = RMSNormalization(%x, %w) : f32[4,520]
  return %a, %b
})",
       {"dlc::row_norm_rows"},
       {},
       2,
       true,
       // (the interpreter computes in double, the kernel in FP32 and rounds once)
       2e-3});
}

TEST(KernelLibrary, Normalizations) {
  check(
      {"layer norm, broadcast scale, short and long rows",
       R"(graph @g(%x: f32[3,2,5], %s: f32[5], %b: f32[5], %z: f32[2,130], %zs: f32[130]) -> ("y": f32[3,2,5], "w": f32[2,130]) {
  %y = LayerNormalization(%x, %s, %b) {axis = 1} : f32[3,2,5]
  %w = LayerNormalization(%z, %zs) {axis = -1} : f32[2,130]
  return %y, %w
})",
       {"dlc::row_norm"},
       {},
       2,
       true,
       1e-4});
  // LayerNorm rows longer than 64 of intermediates with unbroadcast constant parameters:
  // row_norm_rows, 16-byte loads and stores (8 FP16 values) and the row in registers;
  // BF16 rows longer than 4 x 256 x 8 re-read their tail, with the mean and inverse
  // standard deviation outputs and a fused epilogue (through Out), parameters that are
  // graph inputs read an element at a time.
  const std::string ln =
      R"(graph @g(%a: f16[4,16], %w: f16[16,768], %v: f16[768,8], %c: bf16[2,16], %u: bf16[16,9000], %t: bf16[9000]) -> ("y": f16[4,8], "z": bf16[2,9000], "m": f32[2,1], "i": f32[2,1]) {
  %s = )" +
      randomConst(ir::DType::F16, {768}, 21) + R"(
  %b = )" +
      randomConst(ir::DType::F16, {768}, 22) + R"(
  %h = MatMul(%a, %w) : f16[4,768]
  %n = LayerNormalization(%h, %s, %b) {axis = -1} : f16[4,768]
  %y = MatMul(%n, %v) : f16[4,8]
  %g = MatMul(%c, %u) : bf16[2,9000]
  %q, %m, %i = LayerNormalization(%g, %t) {axis = 1} : bf16[2,9000], f32[2,1], f32[2,1]
  %two = const bf16[] dense<[2.0]>
  %z = Mul(%q, %two) : bf16[2,9000]
  return %y, %z, %m, %i
})";
  KernelCase rows{"layer norm rows of intermediates, 16-byte accesses",
                  ln.c_str(),
                  {"dlc::row_norm_rows"},
                  {},
                  2,
                  true,
                  3e-2,
                  false,
                  {"dlc::row_norm"}};
  rows.sourceHas = "dlc::row_norm_rows<8, 4, true,";
  check(rows);
  // Group and instance norm rows longer than 64: row_norm_rows reading one scale and
  // bias per vector (8 FP16 values of one channel), or per element where the channel
  // size (81) is odd.
  const std::string gn =
      R"(graph @g(%x: f16[2,16,16,16], %u: f32[2,3,9,9], %us: f32[3], %ub: f32[3]) -> ("y": f16[2,8,16,16], "i": f32[2,3,9,9]) {
  %wp = )" +
      randomConst(ir::DType::F16, {16, 16, 1, 1}, 23) + R"(
  %w2 = )" +
      randomConst(ir::DType::F16, {8, 16, 1, 1}, 24) + R"(
  %s = )" +
      randomConst(ir::DType::F16, {16}, 25) + R"(
  %b = )" +
      randomConst(ir::DType::F16, {16}, 26) + R"(
  %p = Conv(%x, %wp) : f16[2,16,16,16]
  %n = GroupNormalization(%p, %s, %b) {num_groups = 4} : f16[2,16,16,16]
  %y = Conv(%n, %w2) : f16[2,8,16,16]
  %i = InstanceNormalization(%u, %us, %ub) : f32[2,3,9,9]
  return %y, %i
})";
  KernelCase channels{"group and instance norm rows, one parameter per vector",
                      gn.c_str(),
                      {"dlc::row_norm_rows"},
                      {},
                      2,
                      true,
                      3e-2,
                      false,
                      {"dlc::row_norm"}};
  channels.sourceHas = "dlc::row_norm_rows<8, 4, true, true,";
  check(channels);
  check(
      {"group and instance norm",
       R"(graph @g(%x: f32[2,6,3,5], %s: f32[6], %b: f32[6]) -> ("g": f32[2,6,3,5], "i": f32[2,6,3,5]) {
  %g = GroupNormalization(%x, %s, %b) {num_groups = 3} : f32[2,6,3,5]
  %i = InstanceNormalization(%x, %s, %b) : f32[2,6,3,5]
  return %g, %i
})",
       {"dlc::row_norm"},
       {},
       2,
       true,
       1e-4});
  // Training-mode BatchNorm: its own kernel at -O0; from -O1 canonicalize makes it
  // reductions and element-wise ops (which the layout pass moves channels-last).
  const char *kBatchNormTraining =
      R"(graph @g(%x: f32[3,4,5], %s: f32[4], %b: f32[4], %m: f32[4], %v: f32[4]) -> ("y": f32[3,4,5], "rm": f32[4], "rv": f32[4], "l": f32[3,4,5]) {
  %y, %rm, %rv = BatchNormalization(%x, %s, %b, %m, %v) {training_mode = 1} : f32[3,4,5], f32[4], f32[4]
  %l = LRN(%x) {size = 3} : f32[3,4,5]
  return %y, %rm, %rv, %l
})";
  std::map<std::string, ir::Tensor> positiveVar{
      {"v", ir::randomTensor(ir::TensorType(ir::DType::F32, {4}), 5, 0.5, 1.5)}};
  check({"batch norm training, LRN",
         kBatchNormTraining,
         {"dlc::batchnorm_train", "dlc::lrn"},
         positiveVar,
         0,
         true,
         1e-4});
  check({"batch norm training as reductions",
         kBatchNormTraining,
         {"dlc::lrn"},
         positiveVar,
         2,
         true,
         1e-4,
         false,
         {"dlc::batchnorm_train"}});
}

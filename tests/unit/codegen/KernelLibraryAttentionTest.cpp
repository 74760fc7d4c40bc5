// The kernel library's attention kernels on the emu backend against the reference
// interpreter (as KernelLibraryTest.cpp): the CUDA-core kernel (with the fused head
// split, a mask, and split-KV for one query row) and attention_mma on tensor cores
// (head sizes 32-256, FP16 and BF16, masks, constant causal masks, strided views,
// multi-query heads). Every case runs with 32- and 64-bit indices.
#include "KernelLibraryTestUtil.h"

#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <random>
#include <string>

using namespace dlc;
using namespace dlc::test;

TEST(KernelLibrary, Attention) {
  // Head size 72 (three chunks of 32 lanes, the last partial), 70 keys (three key
  // tiles, the last partial), 3 heads, one sequence.
  check({"attention",
         R"(graph @g(%qkv: f32[1,70,648], %mask: f32[70,70]) -> ("y": f32[1,70,216]) {
  %q = Slice(%qkv) {axes = [2], ends = [216], starts = [0]} : f32[1,70,216]
  %k = Slice(%qkv) {axes = [2], ends = [432], starts = [216]} : f32[1,70,216]
  %v = Slice(%qkv) {axes = [2], ends = [648], starts = [432]} : f32[1,70,216]
  %qr = Reshape(%q) {shape = [1, 70, 3, 72]} : f32[1,70,3,72]
  %kr = Reshape(%k) {shape = [1, 70, 3, 72]} : f32[1,70,3,72]
  %vr = Reshape(%v) {shape = [1, 70, 3, 72]} : f32[1,70,3,72]
  %qh = Transpose(%qr) {perm = [0, 2, 1, 3]} : f32[1,3,70,72]
  %kt = Transpose(%kr) {perm = [0, 2, 3, 1]} : f32[1,3,72,70]
  %vh = Transpose(%vr) {perm = [0, 2, 1, 3]} : f32[1,3,70,72]
  %scale = const f32[] dense<[0.118]>
  %qs = Mul(%qh, %scale) : f32[1,3,70,72]
  %s = MatMul(%qs, %kt) : f32[1,3,70,70]
  %sm = Add(%s, %mask) : f32[1,3,70,70]
  %p = Softmax(%sm) {axis = -1} : f32[1,3,70,70]
  %o = MatMul(%p, %vh) : f32[1,3,70,72]
  %ot = Transpose(%o) {perm = [0, 2, 1, 3]} : f32[1,70,3,72]
  %y = Reshape(%ot) {shape = [1, 70, 216]} : f32[1,70,216]
  return %y
})",
         {"dlc::attention"},
         {},
         2,
         true,
         1e-4});
}

namespace {
/// Multi-head attention over a packed [B, S, 3 H hd] projection, as the exporters write
/// it: slices, head split, Q K' (scaled, plus an additive [Sq, Sk] mask when `mask`),
/// Softmax, P V, head merge. Cross attention (sq != sk) takes Q from %x and K, V from
/// %kv instead. `projected`: those come from MatMuls of %xq (and %xm) with weight
/// inputs, so that attention_mma reads them as strided views (graph inputs may be bound
/// at any address: it packs them first).
std::string attentionIr(const std::string &dt, int64_t b, int64_t sq, int64_t sk, int64_t h,
                        int64_t hd, bool mask, bool projected = false) {
  auto ty = [&](std::initializer_list<int64_t> dims) {
    std::string r = dt + "[";
    for (int64_t d : dims)
      r += (r.back() == '[' ? "" : ",") + std::to_string(d);
    return r + "]";
  };
  const int64_t D = h * hd;
  const bool cross = sq != sk;
  std::string ins = cross ? "%x: " + ty({b, sq, D}) + ", %kv: " + ty({b, sk, 2 * D})
                          : "%qkv: " + ty({b, sq, 3 * D}),
              body;
  if (projected) {
    ins = "%xq: " + ty({b, sq, D}) + ", %wq: " + ty({D, cross ? D : 3 * D});
    body = "  %" + std::string(cross ? "x" : "qkv") +
           " = MatMul(%xq, %wq) : " + ty({b, sq, cross ? D : 3 * D}) + "\n";
    if (cross) {
      ins += ", %xm: " + ty({b, sk, D}) + ", %wkv: " + ty({D, 2 * D});
      body += "  %kv = MatMul(%xm, %wkv) : " + ty({b, sk, 2 * D}) + "\n";
    }
  }
  if (mask)
    ins += ", %mask: " + ty({sq, sk});
  std::string r = "graph @g(" + ins + ") -> (\"y\": " + ty({b, sq, D}) + ") {\n" + body;
  const char *names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const int64_t s = i == 0 ? sq : sk;
    std::string src = cross ? (i == 0 ? "%x" : "%kv") : "%qkv";
    const int64_t start = cross ? (i == 0 ? 0 : (i - 1) * D) : i * D;
    r += "  %" + std::string(names[i]) + " = Slice(" + src + ") {axes = [2], ends = [" +
         std::to_string(start + D) + "], starts = [" + std::to_string(start) +
         "]} : " + ty({b, s, D}) + "\n";
    r += "  %" + std::string(names[i]) + "r = Reshape(%" + names[i] + ") {shape = [" +
         std::to_string(b) + ", " + std::to_string(s) + ", " + std::to_string(h) + ", " +
         std::to_string(hd) + "]} : " + ty({b, s, h, hd}) + "\n";
  }
  r += "  %qh = Transpose(%qr) {perm = [0, 2, 1, 3]} : " + ty({b, h, sq, hd}) + "\n";
  r += "  %kt = Transpose(%kr) {perm = [0, 2, 3, 1]} : " + ty({b, h, hd, sk}) + "\n";
  r += "  %vh = Transpose(%vr) {perm = [0, 2, 1, 3]} : " + ty({b, h, sk, hd}) + "\n";
  r += "  %s = MatMul(%qh, %kt) : " + ty({b, h, sq, sk}) + "\n";
  r += "  %scale = const " + dt + "[] dense<[0.125]>\n";
  r += "  %ss = Mul(%s, %scale) : " + ty({b, h, sq, sk}) + "\n";
  std::string logits = "%ss";
  if (mask) {
    r += "  %sm = Add(%ss, %mask) : " + ty({b, h, sq, sk}) + "\n";
    logits = "%sm";
  }
  r += "  %p = Softmax(" + logits + ") {axis = -1} : " + ty({b, h, sq, sk}) + "\n";
  r += "  %o = MatMul(%p, %vh) : " + ty({b, h, sq, hd}) + "\n";
  r += "  %ot = Transpose(%o) {perm = [0, 2, 1, 3]} : " + ty({b, sq, h, hd}) + "\n";
  r += "  %y = Reshape(%ot) {shape = [" + std::to_string(b) + ", " + std::to_string(sq) + ", " +
       std::to_string(D) + "]} : " + ty({b, sq, D}) + "\n";
  return r + "  return %y\n}";
}

/// A causal mask: 0 on and below the diagonal, -inf above (key > query + offset).
ir::Tensor causalMask(ir::DType dt, int64_t sq, int64_t sk) {
  ir::Tensor t(ir::TensorType(dt, {sq, sk}));
  for (int64_t i = 0; i < sq; ++i)
    for (int64_t j = 0; j < sk; ++j)
      ir::storeElement<double>(dt, t.mutableRaw(), i * sk + j,
                               j > i + (sk - sq) ? -std::numeric_limits<double>::infinity() : 0.0);
  return t;
}
} // namespace

TEST(KernelLibrary, AttentionOnTensorCores) {
  // attention_mma (forced: these shapes are small enough for the model to pick the
  // CUDA-core kernel) against the interpreter's unfused graph: head sizes 32 to 256
  // (40: a zero-padded 16-byte chunk; above 128 the 2-warp, 32-key tiles), key counts
  // that leave the last key tile partial, queries past the last full block, masks.
  // Operands that are graph inputs go through attention_pack; projected ones (MatMul
  // results) are read in place as strided views, with no attention_pack.
  struct Case {
    const char *name, *dt;
    int64_t b, sq, sk, h, hd;
    bool mask, causal, projected;
  };
  const Case cases[] = {
      {"f16 hd 64, scale", "f16", 2, 37, 37, 2, 64, false, false, false},
      {"f16 hd 40, ragged keys, additive mask", "f16", 1, 70, 70, 3, 40, true, false, false},
      {"bf16 hd 32, causal", "bf16", 1, 66, 66, 2, 32, true, true, false},
      {"f16 hd 128, cross attention", "f16", 1, 20, 100, 2, 128, false, false, false},
      {"bf16 hd 256, causal", "bf16", 1, 45, 45, 1, 256, true, true, false},
      {"f16 hd 64, strided views", "f16", 2, 70, 70, 3, 64, false, false, true},
      {"bf16 hd 48, strided views, causal", "bf16", 1, 40, 40, 2, 48, true, true, true},
      {"f16 hd 128, cross attention, strided views", "f16", 2, 17, 81, 2, 128, true, false, true},
      // Interior key tiles (no mask, clamp or copy predicate) before the edge ones.
      {"f16 hd 64, 300 keys, additive mask", "f16", 1, 40, 300, 2, 64, true, false, false},
      {"bf16 hd 64, 260 keys, strided views", "bf16", 2, 33, 260, 1, 64, false, false, true},
      {"f16 hd 64, 256 keys (only the last tile an edge one)", "f16", 1, 20, 256, 1, 64, false,
       false, false},
      // (A zero-padded chunk: every tile takes the edge form.)
      {"f16 hd 40, 200 keys, additive mask", "f16", 1, 40, 200, 2, 40, true, false, false},
  };
  for (const Case &c : cases) {
    const std::string ir = attentionIr(c.dt, c.b, c.sq, c.sk, c.h, c.hd, c.mask, c.projected);
    const ir::DType dt = std::string(c.dt) == "f16" ? ir::DType::F16 : ir::DType::BF16;
    std::map<std::string, ir::Tensor> in;
    if (c.causal)
      in["mask"] = causalMask(dt, c.sq, c.sk);
    if (c.projected) { // (small activations: moderate scores)
      const int64_t D = c.h * c.hd;
      in["xq"] = ir::randomTensor(ir::TensorType(dt, {c.b, c.sq, D}), 3, -0.2, 0.2);
      if (c.sq != c.sk)
        in["xm"] = ir::randomTensor(ir::TensorType(dt, {c.b, c.sk, D}), 4, -0.2, 0.2);
    }
    KernelCase k{c.name,
                 ir.c_str(),
                 {"dlc::attention_mma"},
                 in,
                 2,
                 true,
                 // FP16 rounds P to 11 significant bits before P V (the interpreter
                 // rounds the normalized softmax); BF16 to 8.
                 dt == ir::DType::F16 ? 1e-2 : 3e-2};
    k.attentionKernel = "mma";
    k.absent = {"dlc::attention"};
    (c.projected ? k.absent : k.templates).insert("dlc::attention_pack");
    check(k);
  }
}

TEST(KernelLibrary, Fp32AttentionOnTf32) {
  // FP32 attention on TF32 tensor cores (TF32 on, the inference default): S = Q K' on
  // m16n8k8 from ldmatrix'd FP32 rows rounded to TF32, P V with P's accumulators as A
  // fragments in a permuted key order and V read from shared memory; head sizes 32,
  // 64 (4 warps, 64 keys) and 128 (2 warps, 32 keys), ragged keys, interior tiles,
  // strided views, a causal mask. TF32 keeps 11 significant bits of Q, K, P and V.
  struct Case {
    const char *name;
    int64_t b, sq, sk, h, hd;
    bool mask, causal, projected;
  };
  const Case cases[] = {
      {"f32 hd 64, 300 keys, additive mask", 1, 40, 300, 2, 64, true, false, false},
      {"f32 hd 32, causal", 1, 66, 66, 2, 32, true, true, false},
      {"f32 hd 128, cross attention, strided views", 2, 17, 81, 2, 128, false, false, true},
      {"f32 hd 40, 70 keys", 1, 50, 70, 3, 40, false, false, false},
  };
  for (const Case &c : cases) {
    const std::string ir = attentionIr("f32", c.b, c.sq, c.sk, c.h, c.hd, c.mask, c.projected);
    std::map<std::string, ir::Tensor> in;
    if (c.causal)
      in["mask"] = causalMask(ir::DType::F32, c.sq, c.sk);
    if (c.projected) {
      const int64_t D = c.h * c.hd;
      in["xq"] = ir::randomTensor(ir::TensorType(ir::DType::F32, {c.b, c.sq, D}), 3, -0.2, 0.2);
      if (c.sq != c.sk)
        in["xm"] = ir::randomTensor(ir::TensorType(ir::DType::F32, {c.b, c.sk, D}), 4, -0.2, 0.2);
    }
    KernelCase k{c.name, ir.c_str(), {"dlc::attention_mma"}, in, 2, true, 3e-3, true};
    k.attentionKernel = "mma";
    k.absent = {"dlc::attention"};
    k.sourceHas = ", 4>"; // (the tile of 4-byte elements)
    check(k);
  }
}

TEST(KernelLibrary, AttentionOnTensorCoresConstantCausalMask) {
  // Causal masks as constants, as exporters write them: GPT's Where(mask, -inf, scores)
  // and an additive [Sq, Sk] mask of -inf (the kernel then applies the mask itself and
  // skips the key tiles above the diagonal: the results must not change), one with
  // lowest finite values instead (finfo.min), one with past keys (Sk > Sq: the diagonal
  // offset by Sk - Sq), a constant mask that is not causal (random -inf entries:
  // applied through the chain functor, every tile visited), and a causal mask that
  // also adds a bias (tiles skipped, the functor kept for the bias); rows far enough
  // below the diagonal to have interior key tiles (no mask applied there).
  const int64_t H = 2, hd = 64, D = H * hd;
  struct Case {
    const char *form;
    int64_t sq, sk;
  };
  for (const Case &c : {Case{"where", 150, 150}, Case{"add -inf", 150, 150},
                        Case{"add lowest", 150, 150}, Case{"add -inf, past keys", 40, 170},
                        Case{"add random -inf", 100, 100}, Case{"add -inf and a bias", 150, 150},
                        Case{"add -inf, interior tiles below the diagonal", 280, 280}}) {
    const std::string f = c.form;
    const int64_t sq = c.sq, sk = c.sk;
    ir::Tensor add = causalMask(ir::DType::F16, sq, sk), ninf(ir::TensorType(ir::DType::F16, {}));
    ir::Tensor cond(ir::TensorType(ir::DType::Bool, {sq, sk}));
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < sk; ++j)
        ir::storeElement<int64_t>(ir::DType::Bool, cond.mutableRaw(), i * sk + j, j > i);
    ir::storeElement<double>(ir::DType::F16, ninf.mutableRaw(), 0,
                             -std::numeric_limits<double>::infinity());
    std::mt19937 rng(7);
    for (int64_t i = 0; i < add.numElements(); ++i) {
      const bool inf = std::isinf(ir::loadElement<double>(ir::DType::F16, add.raw(), i));
      if (f == "add lowest" && inf)
        ir::storeElement<double>(ir::DType::F16, add.mutableRaw(), i, -65504.0);
      if (f == "add -inf and a bias" && !inf) // (causal, and a position bias: kept)
        ir::storeElement<double>(ir::DType::F16, add.mutableRaw(), i, 0.5 * ((i % sk) % 7) - 1.0);
      if (f == "add random -inf") // (the diagonal kept: no row is all -inf)
        ir::storeElement<double>(
            ir::DType::F16, add.mutableRaw(), i,
            i / sk != i % sk && rng() % 3 == 0 ? -std::numeric_limits<double>::infinity() : 0.0);
    }
    std::string ir = attentionIr("f16", 1, sq, sk, H, hd, true, true);
    const std::string from = ", %mask: " + add.type().str(); // (the mask is a constant)
    ir.erase(ir.find(from), from.size());
    std::string consts = "  %mask = " + constText(add) + "\n";
    if (f == "where") {
      consts = "  %cond = " + constText(cond) + "\n  %ninf = " + constText(ninf) + "\n";
      const std::string addLine = "  %sm = Add(%ss, %mask)";
      ir.replace(ir.find(addLine), addLine.size(), "  %sm = Where(%cond, %ninf, %ss)");
    }
    ir.insert(ir.find("{\n") + 2, consts);
    std::map<std::string, ir::Tensor> in = {
        {"xq", ir::randomTensor(ir::TensorType(ir::DType::F16, {1, sq, D}), 3, -0.2, 0.2)}};
    if (sq != sk)
      in["xm"] = ir::randomTensor(ir::TensorType(ir::DType::F16, {1, sk, D}), 4, -0.2, 0.2);
    KernelCase k{c.form, ir.c_str(), {"dlc::attention_mma"}, in, 2, true, 1e-2};
    k.absent = {"dlc::attention", "dlc::attention_pack"};
    k.attentionKernel = "mma";
    check(k);
  }
}

TEST(KernelLibrary, SplitKvAttentionForOneQueryRow) {
  // Decoding: one query row per (batch, head) over 700 keys: 4 blocks would leave the
  // GPU idle, so the CUDA-core kernel splits the keys (5 slices of 160) and
  // attention_combine merges them. The mask hides the first 200 keys (the whole first
  // slice: its max is -inf, it adds nothing) and a few more.
  ir::Tensor mask(ir::TensorType(ir::DType::F32, {1, 700}));
  for (int64_t j = 0; j < 700; ++j)
    ir::storeElement<double>(ir::DType::F32, mask.mutableRaw(), j,
                             j < 200 || j % 97 == 5 ? -std::numeric_limits<double>::infinity()
                                                    : 0.0);
  KernelCase k{
      "split-kv attention",
      R"(graph @g(%q: f32[1,4,1,64], %k: f32[1,4,700,64], %v: f32[1,4,700,64], %mask: f32[1,700]) -> ("y": f32[1,4,1,64]) {
  %kt = Transpose(%k) {perm = [0, 1, 3, 2]} : f32[1,4,64,700]
  %s = MatMul(%q, %kt) : f32[1,4,1,700]
  %scale = const f32[] dense<[0.125]>
  %ss = Mul(%s, %scale) : f32[1,4,1,700]
  %sm = Add(%ss, %mask) : f32[1,4,1,700]
  %p = Softmax(%sm) {axis = -1} : f32[1,4,1,700]
  %y = MatMul(%p, %v) : f32[1,4,1,64]
  return %y
})",
      {"dlc::attention", "dlc::attention_combine"},
      {{"mask", mask}},
      2,
      true,
      1e-5};
  k.sourceHas = "dlc::attention<1, 2, 2, true,";
  check(k);
}

TEST(KernelLibrary, AttentionOnTensorCoresMultiQuery) {
  // One K/V head broadcast to four query heads (Expand: a stride-0 view), the keys
  // projected; Q a graph input (packed).
  KernelCase k{
      "multi-query attention",
      R"(graph @g(%q: f16[2,4,50,64], %xm: f16[2,50,64], %w: f16[64,128]) -> ("y": f16[2,4,50,64]) {
  %kv = MatMul(%xm, %w) : f16[2,50,128]
  %k = Slice(%kv) {axes = [2], ends = [64], starts = [0]} : f16[2,50,64]
  %v = Slice(%kv) {axes = [2], ends = [128], starts = [64]} : f16[2,50,64]
  %k4 = Reshape(%k) {shape = [2, 1, 50, 64]} : f16[2,1,50,64]
  %v4 = Reshape(%v) {shape = [2, 1, 50, 64]} : f16[2,1,50,64]
  %ke = Expand(%k4) {shape = [2, 4, 50, 64]} : f16[2,4,50,64]
  %ve = Expand(%v4) {shape = [2, 4, 50, 64]} : f16[2,4,50,64]
  %kt = Transpose(%ke) {perm = [0, 1, 3, 2]} : f16[2,4,64,50]
  %s = MatMul(%q, %kt) : f16[2,4,50,50]
  %p = Softmax(%s) {axis = -1} : f16[2,4,50,50]
  %y = MatMul(%p, %ve) : f16[2,4,50,64]
  return %y
})",
      {"dlc::attention_mma", "dlc::attention_pack"},
      {{"xm", ir::randomTensor(ir::TensorType(ir::DType::F16, {2, 50, 64}), 3, -0.2, 0.2)},
       {"q", ir::randomTensor(ir::TensorType(ir::DType::F16, {2, 4, 50, 64}), 4, -0.5, 0.5)}},
      2,
      true,
      1e-2};
  k.absent = {"dlc::attention"};
  k.attentionKernel = "mma";
  check(k);
}

TEST(KernelLibrary, FlashAttentionAndItsGradient) {
  // The training path's ops (autodiff's FlashAttention and FlashAttentionGrad):
  // attention_mma with the rows' log-sum-exp, then attention_grad_prep and
  // attention_grad_mma for dQ and for dK and dV. Graph inputs and outputs (bound
  // anywhere: copied to and from aligned buffers); odd extents (70 queries, 45 keys:
  // partial tiles, padded LSE rows); head size 40 (a padded 16-byte chunk, no interior
  // form) and 64 over several tiles; causal with a bottom-right reach and with a negative
  // one (the first rows see no key); dropout (the Dropout op's Philox mask, in both the
  // kernels and the interpreter's references); additive biases
  // broadcast per batch (a padding mask's shape) and per head and row; FP16 and BF16.
  // Deterministic: no atomics, the same bits on every thread order.
  struct Form {
    const char *name, *dt;
    int64_t sq, sk, hd;
    const char *attrs, *bias; // (bias: its dims before Sk, or null)
  };
  for (const Form &f : {Form{"fp16 head size 40", "f16", 70, 45, 40, "{scale = 0.16}", nullptr},
                        Form{"bf16 causal, head size 64", "bf16", 150, 150, 64,
                             "{causal = 1, scale = 0.125}", nullptr},
                        Form{"fp16 causal reach 25, 24 x 49", "f16", 24, 49, 32,
                             "{causal = 1, reach = 25, scale = 0.18}", nullptr},
                        Form{"fp16 bias per batch", "f16", 33, 70, 32, "{scale = 0.18}", "2,1,1,"},
                        Form{"bf16 causal, bias per head and row", "bf16", 40, 40, 16,
                             "{causal = 1, scale = 0.25}", "3,40,"},
                        Form{"fp16 causal reach -20, 49 x 24 (rows with no key: NaN O, zero dQ)",
                             "f16", 49, 24, 32, "{causal = 1, reach = -20, scale = 0.2}", nullptr},
                        Form{"fp16 dropout 0.3", "f16", 70, 45, 32,
                             "{dropout = 0.3, scale = 0.2, seed = 9}", nullptr},
                        Form{"bf16 causal, bias per batch, dropout 0.1", "bf16", 40, 40, 16,
                             "{causal = 1, dropout = 0.1, scale = 0.25, seed = 4}", "2,1,1,"},
                        // (bias values set below: in batch 1, head 0 -inf on every key
                        // (rows with no key left: NaN O, zero gradients), head 1 BF16's
                        // lowest value on every key (finite: a softmax of the raw scores);
                        // elsewhere on some keys, with -inf on others)
                        Form{"bf16 lowest-value and all -inf biases", "bf16", 30, 50, 32,
                             "{scale = 0.125}", "2,3,1,"}}) {
    auto ty = [&](int64_t s, int64_t d) {
      return std::string(f.dt) + "[2,3," + std::to_string(s) + "," + std::to_string(d) + "]";
    };
    const std::string rows = "f32[2,3," + std::to_string(f.sq) + "]";
    const std::string biasTy =
        f.bias ? std::string(f.dt) + "[" + f.bias + std::to_string(f.sk) + "]" : "";
    const bool drop = std::string(f.attrs).find("dropout") != std::string::npos;
    const std::string biasIn = (f.bias ? ", %b: " + biasTy : "") + (drop ? ", %st: i64[]" : "");
    const std::string biasArg = std::string(f.bias ? ", %b"
                                            : drop ? ", _"
                                                   : "") +
                                (drop ? ", %st" : "");
    const std::string ir =
        std::string("graph @g(%q: ") + ty(f.sq, f.hd) + ", %k: " + ty(f.sk, f.hd) +
        ", %v: " + ty(f.sk, f.hd) + ", %do: " + ty(f.sq, f.hd) + biasIn +
        ") -> (\"o\": " + ty(f.sq, f.hd) + ", \"l\": " + rows + ", \"dq\": " + ty(f.sq, f.hd) +
        ", \"dk\": " + ty(f.sk, f.hd) + ", \"dv\": " + ty(f.sk, f.hd) +
        ") {\n  %o, %l = FlashAttention(%q, %k, %v" + biasArg + ") " + f.attrs + " : " +
        ty(f.sq, f.hd) + ", " + rows +
        "\n  %dq, %dk, %dv = FlashAttentionGrad(%q, %k, %v, %o, %do, %l" + biasArg + ") " +
        f.attrs + " : " + ty(f.sq, f.hd) + ", " + ty(f.sk, f.hd) + ", " + ty(f.sk, f.hd) +
        "\n  return %o, %l, %dq, %dk, %dv\n}";
    std::map<std::string, ir::Tensor> in;
    if (std::string(f.name).find("lowest") != std::string::npos) {
      const float lowest = -3.3895313892515355e38f, inf = std::numeric_limits<float>::infinity();
      std::vector<float> b(static_cast<size_t>(6 * f.sk));
      for (int64_t h = 0; h < 6; ++h) // (batch h / 3, head h % 3)
        for (int64_t j = 0; j < f.sk; ++j)
          b[static_cast<size_t>(h * f.sk + j)] = h == 3       ? -inf
                                                 : h == 4     ? lowest
                                                 : j % 5 == 0 ? lowest
                                                 : j % 7 == 3 ? -inf
                                                              : 0.1f * static_cast<float>(j % 7);
      in["b"] = ir::Tensor::fromVector(ir::TensorType(ir::DType::BF16, {2, 3, 1, f.sk}), b);
    }
    if (drop) // (the training step's counter)
      in["st"] =
          ir::Tensor::fromVector(ir::TensorType(ir::DType::I64, {}), std::vector<int64_t>{3});
    KernelCase k{f.name,
                 ir.c_str(),
                 {"dlc::attention_mma", "dlc::attention_grad_prep", "dlc::attention_grad_mma"},
                 in,
                 2,
                 true,
                 std::string(f.dt) == "bf16" ? 3e-2 : 1e-2};
    k.deterministic = true;
    check(k);
  }
}

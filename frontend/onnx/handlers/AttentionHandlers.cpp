//===- AttentionHandlers.cpp - Attention and rotary embeddings -------------===//
//
// ONNX's Attention and RotaryEmbedding (opset 23) and ONNX Runtime's contrib
// attention family (com.microsoft Attention, MultiHeadAttention,
// GroupQueryAttention, RotaryEmbedding, EmbedLayerNormalization), with the semantics
// of ONNX Runtime's CPU kernels. Every form becomes the same IR: per-head MatMul,
// scale, an element-wise score chain (softcap, additive mask, visibility by Where),
// Softmax and MatMul, which the fusion pass matches as one attention group.
//
// The forms differ in their masks (see attend()):
//   - ONNX Attention: a bool mask or is_causal hides a key (its score becomes the
//     lowest float); a row that hides every key gives zeros. Causal is top-left
//     aligned, offset by the past's length: query i sees key j <= i + past.
//   - contrib Attention and MultiHeadAttention: padding masks add mask_filter_value
//     (-10000) to the score; `unidirectional` hides keys j > i + past for every row
//     but the last (ONNX Runtime's loop stops one row early).
//   - GroupQueryAttention: causal per batch, key j visible to row i when
//     j <= min(i, seqlens_k[b]).
// Query head h reads key/value head h / (N / kvN) (grouped-query attention).
//===----------------------------------------------------------------------===//
#include "Common.h"

#include <cmath>
#include <limits>
#include <numeric>

namespace dlc::frontend {
namespace {

using namespace ir;

constexpr double kLowest = -std::numeric_limits<float>::max();

llvm::Expected<Value *> reshape(NodeImporter &ni, Value *v, Shape s) {
  return ni.op(OpKind::Reshape, {v}, {{"shape", Attribute(std::move(s))}});
}

llvm::Expected<Value *> transpose(NodeImporter &ni, Value *v, std::vector<int64_t> perm) {
  return ni.op(OpKind::Transpose, {v}, {{"perm", Attribute(std::move(perm))}});
}

/// [B, S, heads*H] -> [B, heads, S, H].
llvm::Expected<Value *> splitHeads(NodeImporter &ni, Value *v, int64_t heads, const char *what) {
  const Shape &s = v->shape();
  if (v->rank() != 3 || heads < 1 || s[2] % heads)
    return ni.error(std::string(what) + " " + v->type().str() + " does not split into " +
                    std::to_string(heads) + " heads");
  DLC_TRY(r, reshape(ni, v, {s[0], s[1], heads, s[2] / heads}));
  return transpose(ni, r, {0, 2, 1, 3});
}

/// [B, heads, S, H] -> [B, S, heads*H].
llvm::Expected<Value *> mergeHeads(NodeImporter &ni, Value *v) {
  const Shape s = v->shape();
  DLC_TRY(t, transpose(ni, v, {0, 2, 1, 3}));
  return reshape(ni, t, {s[0], s[2], s[1] * s[3]});
}

/// Slice of `v` along `axis`.
llvm::Expected<Value *> slice(NodeImporter &ni, Value *v, int64_t axis, int64_t start,
                              int64_t end) {
  return ni.op(OpKind::Slice, {v},
               {{"starts", Attribute(std::vector<int64_t>{start})},
                {"ends", Attribute(std::vector<int64_t>{end})},
                {"axes", Attribute(std::vector<int64_t>{axis})}});
}

/// The positions 0..n-1 as a constant of `shape` (n elements: [n], [n, 1] or [1, n]).
Value *positions(NodeImporter &ni, int64_t n, Shape shape, const char *name,
                 DType dt = DType::I64) {
  std::vector<double> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), 0.0);
  return ni.constant(Tensor::fromVector(TensorType(dt, std::move(shape)), r), name);
}

/// Causal visibility [rows, cols]: key j visible to query row i when j <= i + offset,
/// and to the last row too when `lastRowSeesAll` (ONNX Runtime's contrib attention).
/// Built from ops (folded when small), so a long sequence costs no host memory.
llvm::Expected<Value *> causal(NodeImporter &ni, int64_t rows, int64_t cols, int64_t offset,
                               bool lastRowSeesAll) {
  Value *i = positions(ni, rows, {rows, 1}, "query_positions");
  Value *j = positions(ni, cols, {cols}, "key_positions");
  DLC_TRY(limit, ni.op(OpKind::Add, {i, ni.scalar(DType::I64, static_cast<double>(offset))}));
  DLC_TRY(vis, ni.op(OpKind::LessOrEqual, {j, limit}));
  if (!lastRowSeesAll)
    return vis;
  DLC_TRY(last, ni.op(OpKind::Equal, {i, ni.scalar(DType::I64, static_cast<double>(rows - 1))}));
  return ni.op(OpKind::Or, {vis, last});
}

llvm::Expected<Value *> bothVisible(NodeImporter &ni, Value *a, Value *b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return ni.op(OpKind::And, {a, b});
}

struct Scores {
  double scale = 0;         // 0: 1/sqrt(head size)
  double softcap = 0;       // 0: none
  Value *bias = nullptr;    // added to the scores (broadcasts to [B, N, S, T])
  Value *visible = nullptr; // bool, broadcasts to [B, N, S, T]; hidden scores become lowest
  /// Bool [..., S, 1]: whether the row sees any key; rows that see none give zeros
  /// (ONNX Attention's rule; null: every row sees one).
  Value *rowSeesKey = nullptr;
  /// The scores after each stage, for ONNX Attention's qk_matmul_output.
  Value *raw = nullptr, *capped = nullptr, *masked = nullptr, *probs = nullptr;
};

/// softmax(scale * Q K^T [softcapped] + bias, hidden keys excluded) V with Q
/// [B, N, S, H], K [B, kvN, T, H], V [B, kvN, T, Hv]; returns [B, N, S, Hv].
llvm::Expected<Value *> attend(NodeImporter &ni, Value *q, Value *k, Value *v, Scores &sc) {
  if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4)
    return ni.error("Q, K and V must be [batch, heads, sequence, head size] here");
  int64_t n = q->shape()[1], kvn = k->shape()[1], t = k->shape()[2];
  if (kvn < 1 || n % kvn || v->shape()[1] != kvn || v->shape()[2] != t ||
      k->shape()[3] != q->shape()[3])
    return ni.error("the query, key and value shapes " + q->type().str() + ", " + k->type().str() +
                    ", " + v->type().str() + " do not fit together");
  if (kvn != n) { // grouped-query attention: each kv head serves n / kvn query heads
    int64_t group = n / kvn;
    auto repeat = [&](Value *x) -> llvm::Expected<Value *> {
      Shape s = x->shape();
      DLC_TRY(u, reshape(ni, x, {s[0], kvn, 1, s[2], s[3]}));
      DLC_TRY(e, ni.op(OpKind::Expand, {u},
                       {{"shape", Attribute(Shape{s[0], kvn, group, s[2], s[3]})}}));
      return reshape(ni, e, {s[0], n, s[2], s[3]});
    };
    DLC_TRY(kr, repeat(k));
    DLC_TRY(vr, repeat(v));
    k = kr;
    v = vr;
  }
  DType dt = q->dtype();
  DLC_TRY(kt, transpose(ni, k, {0, 1, 3, 2}));
  DLC_TRY(qk, ni.op(OpKind::MatMul, {q, kt}));
  double scale = sc.scale ? sc.scale : 1.0 / std::sqrt(static_cast<double>(q->shape()[3]));
  DLC_TRY(s0, ni.op(OpKind::Mul, {qk, ni.scalar(dt, scale)}));
  Value *s = s0;
  sc.raw = s;
  if (sc.softcap > 0) {
    DLC_TRY(d, ni.op(OpKind::Mul, {s, ni.scalar(dt, 1.0 / sc.softcap)}));
    DLC_TRY(th, ni.op(OpKind::Tanh, {d}));
    DLC_TRY(m, ni.op(OpKind::Mul, {th, ni.scalar(dt, sc.softcap)}));
    s = m;
  }
  sc.capped = s;
  if (sc.bias) {
    DLC_TRY(a, ni.op(OpKind::Add, {s, sc.bias}));
    s = a;
  }
  if (sc.visible) {
    DLC_TRY(w, ni.op(OpKind::Where, {sc.visible, s, ni.scalar(dt, kLowest)}));
    s = w;
  }
  sc.masked = s;
  DLC_TRY(p, ni.op(OpKind::Softmax, {s}, {{"axis", Attribute(int64_t{-1})}}));
  sc.probs = p;
  DLC_TRY(y, ni.op(OpKind::MatMul, {p, v}));
  if (!sc.rowSeesKey)
    return y;
  // Rows that hide every key: zeros, not the uniform average of the lowest scores.
  DLC_TRY(p0, ni.op(OpKind::Where, {sc.rowSeesKey, p, ni.scalar(dt, 0.0)}));
  sc.probs = p0;
  return ni.op(OpKind::Where, {sc.rowSeesKey, y, ni.scalar(dt, 0.0)});
}

/// Whether each row of `keep` (bool [..., S, T]) has a true element, as [..., S, 1].
llvm::Expected<Value *> anyOverKeys(NodeImporter &ni, Value *keep) {
  DLC_TRY(u8, ni.op(OpKind::Cast, {keep}, {{"to", Attribute(std::string("u8"))}}));
  DLC_TRY(any, ni.op(OpKind::ReduceMax, {u8},
                     {{"axes", Attribute(std::vector<int64_t>{-1})},
                      {"keepdims", Attribute(int64_t{1})}}));
  return ni.op(OpKind::Cast, {any}, {{"to", Attribute(std::string("bool"))}});
}

/// The contrib attention ops' outputs: attention of the per-head Q, K, V merged back to
/// [B, S, N*Hv], and K and V (after their past) as outputs 1 and 2 where wanted.
llvm::Error attendAndMerge(NodeImporter &ni, Value *q, Value *k, Value *v, Scores &sc) {
  DLC_TRY(y, attend(ni, q, k, v, sc));
  DLC_TRY(out, mergeHeads(ni, y));
  ni.setOutput(0, out);
  if (ni.wantsOutput(1))
    ni.setOutput(1, k);
  if (ni.wantsOutput(2))
    ni.setOutput(2, v);
  return llvm::Error::success();
}

/// K or V after the past (both [B, kvN, ., H]) when the node has one.
llvm::Expected<Value *> withPast(NodeImporter &ni, Value *past, Value *x) {
  if (!past)
    return x;
  return ni.op(OpKind::Concat, {past, x}, {{"axis", Attribute(int64_t{2})}});
}

//===----------------------------------------------------------------------===//
// ONNX Attention (opset 23)
//===----------------------------------------------------------------------===//

llvm::Error importAttention(NodeImporter &ni) {
  Value *q = ni.input(0), *k = ni.input(1), *v = ni.input(2);
  Value *mask = ni.input(3), *pastK = ni.input(4), *pastV = ni.input(5);
  if (!q || !k || !v)
    return ni.error("Q, K and V are required");
  if (q->rank() != k->rank() || q->rank() != v->rank() || (q->rank() != 3 && q->rank() != 4))
    return ni.error("Q, K and V must all be 3-D or all 4-D");
  if (bool(pastK) != bool(pastV))
    return ni.error("past_key and past_value go together");
  bool threeD = q->rank() == 3;
  if (threeD) {
    int64_t qn = ni.attrInt("q_num_heads", 0), kvn = ni.attrInt("kv_num_heads", 0);
    if (qn < 1 || kvn < 1)
      return ni.error("3-D inputs need the q_num_heads and kv_num_heads attributes");
    DLC_TRY(q4, splitHeads(ni, q, qn, "Q"));
    DLC_TRY(k4, splitHeads(ni, k, kvn, "K"));
    DLC_TRY(v4, splitHeads(ni, v, kvn, "V"));
    q = q4, k = k4, v = v4;
  }
  DLC_TRY(kAll, withPast(ni, pastK, k));
  DLC_TRY(vAll, withPast(ni, pastV, v));
  int64_t sq = q->shape()[2], t = kAll->shape()[2];
  int64_t past = pastK ? pastK->shape()[2] : 0;
  Scores sc;
  sc.scale = ni.attrFloat("scale", 0.0f);
  sc.softcap = ni.attrFloat("softcap", 0.0f);
  if (mask) {
    if (mask->rank() < 2 || mask->shape()[mask->rank() - 2] != sq ||
        mask->shape()[mask->rank() - 1] != t)
      return ni.error("attn_mask " + mask->type().str() + " must end in [" + std::to_string(sq) +
                      ", " + std::to_string(t) + "] (query and total key lengths)");
    if (mask->dtype() == DType::Bool)
      sc.visible = mask;
    else
      sc.bias = mask;
  }
  if (ni.attrInt("is_causal", 0)) {
    DLC_TRY(c, causal(ni, sq, t, past, false));
    DLC_TRY(vis, bothVisible(ni, sc.visible, c));
    sc.visible = vis;
  }
  if (mask) { // a mask may hide every key of a row (a float one with -inf or lowest)
    Value *keep = sc.visible;
    if (sc.bias) {
      DLC_TRY(k, ni.op(OpKind::Greater, {sc.bias, ni.scalar(sc.bias->dtype(), kLowest)}));
      DLC_TRY(both, bothVisible(ni, k, sc.visible));
      keep = both;
    }
    DLC_TRY(any, anyOverKeys(ni, keep));
    sc.rowSeesKey = any;
  }
  DLC_TRY(y, attend(ni, q, kAll, vAll, sc));
  Value *out = y;
  if (threeD) {
    DLC_TRY(m, mergeHeads(ni, y));
    out = m;
  }
  ni.setOutput(0, out);
  if (ni.wantsOutput(1))
    ni.setOutput(1, kAll);
  if (ni.wantsOutput(2))
    ni.setOutput(2, vAll);
  if (ni.wantsOutput(3)) {
    int64_t mode = ni.attrInt("qk_matmul_output_mode", 0);
    Value *stages[] = {sc.raw, sc.capped, sc.masked, sc.probs};
    if (mode < 0 || mode > 3)
      return ni.error("qk_matmul_output_mode must be 0 to 3");
    ni.setOutput(3, stages[mode]);
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Rotary embeddings
//===----------------------------------------------------------------------===//

/// Rotates the first `rd` features of the last dim of x ([..., S?, ..., H]) by the
/// angles whose cosines and sines `cos` and `sin` hold ([..., rd/2], broadcasting
/// against x's leading dims), rotate-half or interleaved.
llvm::Expected<Value *> rotate(NodeImporter &ni, Value *x, Value *cos, Value *sin, int64_t rd,
                               bool interleaved) {
  int64_t last = x->rank() - 1, h = x->shape()[last], h2 = rd / 2;
  if (rd < 2 || rd % 2 || rd > h)
    return ni.error("the rotary dimension " + std::to_string(rd) + " must be even and at most " +
                    std::to_string(h));
  if (cos->shape().back() != h2 || sin->shape() != cos->shape())
    return ni.error("the cos and sin caches " + cos->type().str() + ", " + sin->type().str() +
                    " must hold " + std::to_string(h2) + " values per position");
  Value *rot = x;
  if (rd < h) {
    DLC_TRY(r, slice(ni, x, last, 0, rd));
    rot = r;
  }
  Value *x1, *x2;
  if (interleaved) {
    Shape pairs = rot->shape();
    pairs.back() = h2;
    pairs.push_back(2);
    DLC_TRY(p, reshape(ni, rot, pairs));
    DLC_TRY(a, slice(ni, p, last + 1, 0, 1));
    DLC_TRY(b, slice(ni, p, last + 1, 1, 2));
    Shape c1 = cos->shape();
    c1.push_back(1);
    DLC_TRY(c, reshape(ni, cos, c1));
    DLC_TRY(s, reshape(ni, sin, c1));
    cos = c, sin = s, x1 = a, x2 = b;
  } else {
    DLC_TRY(a, slice(ni, rot, last, 0, h2));
    DLC_TRY(b, slice(ni, rot, last, h2, rd));
    x1 = a, x2 = b;
  }
  DLC_TRY(x1c, ni.op(OpKind::Mul, {x1, cos}));
  DLC_TRY(x2s, ni.op(OpKind::Mul, {x2, sin}));
  DLC_TRY(y1, ni.op(OpKind::Sub, {x1c, x2s}));
  DLC_TRY(x2c, ni.op(OpKind::Mul, {x2, cos}));
  DLC_TRY(x1s, ni.op(OpKind::Mul, {x1, sin}));
  DLC_TRY(y2, ni.op(OpKind::Add, {x2c, x1s}));
  int64_t axis = interleaved ? last + 1 : last;
  DLC_TRY(y, ni.op(OpKind::Concat, {y1, y2}, {{"axis", Attribute(axis)}}));
  Value *out = y;
  if (interleaved) {
    DLC_TRY(r, reshape(ni, y, rot->shape()));
    out = r;
  }
  if (rd == h)
    return out;
  DLC_TRY(rest, slice(ni, x, last, rd, h));
  return ni.op(OpKind::Concat, {out, rest}, {{"axis", Attribute(last)}});
}

/// The cache rows at `positions` ([B, S] or [1, S]), or the cache itself when it is
/// already per (batch, position).
llvm::Expected<Value *> cacheRows(NodeImporter &ni, Value *cache, Value *positions) {
  if (!positions)
    return cache;
  return ni.op(OpKind::Gather, {cache, positions}, {{"axis", Attribute(int64_t{0})}});
}

/// Rotary embedding of x, [B, N, S, H] (BNSH) or [B, S, N*H] with `heads`, with
/// per-(batch, position) caches `cos`/`sin` [B|1, S, rd/2]. Returns x's shape.
llvm::Expected<Value *> rotaryOf(NodeImporter &ni, Value *x, Value *cos, Value *sin, int64_t heads,
                                 int64_t rd, bool interleaved) {
  if (cos->rank() != 3)
    return ni.error("the cos cache rows must be [batch, sequence, rotary/2], got " +
                    cos->type().str());
  if (x->rank() == 4) { // BNSH: the caches broadcast over heads
    Shape s = cos->shape();
    DLC_TRY(c, reshape(ni, cos, {s[0], 1, s[1], s[2]}));
    DLC_TRY(sn, reshape(ni, sin, {s[0], 1, s[1], s[2]}));
    return rotate(ni, x, c, sn, rd ? rd : x->shape()[3], interleaved);
  }
  if (x->rank() != 3 || heads < 1 || x->shape()[2] % heads)
    return ni.error("X " + x->type().str() +
                    " must be [B, N, S, H], or [B, S, N*H] with num_heads");
  const Shape xs = x->shape();
  int64_t h = xs[2] / heads;
  DLC_TRY(x4, reshape(ni, x, {xs[0], xs[1], heads, h})); // BSNH
  Shape s = cos->shape();
  DLC_TRY(c, reshape(ni, cos, {s[0], s[1], 1, s[2]}));
  DLC_TRY(sn, reshape(ni, sin, {s[0], s[1], 1, s[2]}));
  DLC_TRY(y, rotate(ni, x4, c, sn, rd ? rd : h, interleaved));
  return reshape(ni, y, xs);
}

/// ONNX RotaryEmbedding(X, cos_cache, sin_cache, position_ids?) (opset 23).
llvm::Error importRotaryEmbedding(NodeImporter &ni) {
  Value *x = ni.input(0), *pos = ni.input(3);
  DLC_TRY(cos, cacheRows(ni, ni.input(1), pos));
  DLC_TRY(sin, cacheRows(ni, ni.input(2), pos));
  return single(ni,
                rotaryOf(ni, x, cos, sin, ni.attrInt("num_heads", 0),
                         ni.attrInt("rotary_embedding_dim", 0), ni.attrInt("interleaved", 0) != 0));
}

/// Positions p0 + s for s < S as [1, S] (the contrib ops' offset form).
llvm::Expected<Value *> offsetPositions(NodeImporter &ni, Value *offset, int64_t s) {
  return ni.op(OpKind::Add, {positions(ni, s, {1, s}, "positions", offset->dtype()), offset});
}

/// com.microsoft RotaryEmbedding(input, position_ids, cos_cache, sin_cache):
/// position_ids [B, S], or [1] as the offset of positions 0..S-1.
llvm::Error importContribRotaryEmbedding(NodeImporter &ni) {
  Value *x = ni.input(0), *pos = ni.input(1), *cos = ni.input(2), *sin = ni.input(3);
  if (!x || !pos || !cos || !sin || cos->rank() != 2)
    return ni.error("input, position_ids and 2-D cos and sin caches are required");
  if (x->rank() != 3 && x->rank() != 4)
    return ni.error("input must be [B, S, hidden] or [B, N, S, H], got " + x->type().str());
  int64_t seq = x->rank() == 4 ? x->shape()[2] : x->shape()[1];
  if (pos->rank() == 1 && pos->shape()[0] == 1) {
    DLC_TRY(p, offsetPositions(ni, pos, seq));
    pos = p;
  }
  DLC_TRY(c, cacheRows(ni, cos, pos));
  DLC_TRY(s, cacheRows(ni, sin, pos));
  int64_t heads = ni.attrInt("num_heads", 0), rd = ni.attrInt("rotary_embedding_dim", 0);
  if (rd && !heads)
    return ni.error("rotary_embedding_dim needs num_heads");
  if (x->rank() == 3 && !heads) { // the head size is twice the cache's width
    int64_t h = 2 * cos->shape()[1];
    if (h < 1 || x->shape()[2] % h)
      return ni.error("the hidden size does not split into heads of " + std::to_string(h));
    heads = x->shape()[2] / h;
  }
  return single(ni, rotaryOf(ni, x, c, s, heads, rd, ni.attrInt("interleaved", 0) != 0));
}

//===----------------------------------------------------------------------===//
// com.microsoft Attention, MultiHeadAttention, GroupQueryAttention
//===----------------------------------------------------------------------===//

/// The padding mask of contrib Attention (mask_index) and MultiHeadAttention
/// (key_padding_mask) as the bool `keep` [B, 1, S|1, T]; null for the ignored forms.
llvm::Expected<Value *> keptKeys(NodeImporter &ni, Value *mask, int64_t b, int64_t s, int64_t t,
                                 bool allowStartEnd) {
  const Shape &ms = mask->shape();
  Value *zero = ni.scalar(mask->dtype(), 0);
  if (mask->rank() == 1 && (ms[0] == b || (allowStartEnd && ms[0] == 2 * b))) {
    Value *j = positions(ni, t, {t}, "key_positions", mask->dtype());
    DLC_TRY(end, slice(ni, mask, 0, 0, b));
    DLC_TRY(endB, reshape(ni, end, {b, 1, 1, 1}));
    DLC_TRY(keep, ni.op(OpKind::Less, {j, endB}));
    if (ms[0] == b)
      return keep;
    DLC_TRY(start, slice(ni, mask, 0, b, 2 * b));
    DLC_TRY(startB, reshape(ni, start, {b, 1, 1, 1}));
    DLC_TRY(after, ni.op(OpKind::GreaterOrEqual, {j, startB}));
    return ni.op(OpKind::And, {keep, after});
  }
  if (mask->rank() == 2 && ms[1] == 1 && (ms[0] == 1 || ms[0] == b))
    return nullptr; // a dummy mask
  if (mask->rank() == 2 && ms[0] == b && ms[1] == t) {
    DLC_TRY(k, ni.op(OpKind::Greater, {mask, zero}));
    return reshape(ni, k, {b, 1, 1, t});
  }
  if (mask->rank() == 3 && ms[0] == b && ms[1] == s && ms[2] == t) {
    DLC_TRY(k, ni.op(OpKind::Greater, {mask, zero}));
    return reshape(ni, k, {b, 1, s, t});
  }
  return ni.unsupported("a mask of shape " + mask->type().str() + " (batch " + std::to_string(b) +
                        ", query length " + std::to_string(s) + ", key length " +
                        std::to_string(t) + ")");
}

/// Contrib masking: padding adds mask_filter_value; `unidirectional` hides key
/// j > i + past from every query row i but the last.
llvm::Error contribMasks(NodeImporter &ni, Scores &sc, Value *mask, Value *attnBias, DType dt,
                         int64_t b, int64_t s, int64_t t, int64_t past, bool allowStartEnd) {
  sc.scale = ni.attrFloat("scale", 0.0f);
  Value *bias = attnBias;
  if (mask) {
    DLC_TRY(keep, keptKeys(ni, mask, b, s, t, allowStartEnd));
    if (keep) {
      float filter = ni.attrFloat("mask_filter_value", -10000.0f);
      DLC_TRY(add, ni.op(OpKind::Where, {keep, ni.scalar(dt, 0.0), ni.scalar(dt, filter)}));
      if (bias) {
        DLC_TRY(sum, ni.op(OpKind::Add, {bias, add}));
        add = sum;
      }
      bias = add;
    }
  }
  sc.bias = bias;
  if (ni.attrInt("unidirectional", 0)) {
    DLC_TRY(c, causal(ni, s, t, past, true));
    sc.visible = c;
  }
  return llvm::Error::success();
}

/// com.microsoft Attention(input, weights, bias?, mask_index?, past?, attention_bias?):
/// the packed Q|K|V projection, then multi-head attention.
llvm::Error importContribAttention(NodeImporter &ni) {
  Value *x = ni.input(0), *w = ni.input(1), *bias = ni.input(2);
  if (ni.input(4))
    return ni.unsupported("Attention with past (a KV cache)");
  if (ni.attrInt("do_rotary", 0))
    return ni.unsupported("Attention with do_rotary");
  if (!x || !w || x->rank() != 3 || w->rank() != 2 || w->shape()[0] != x->shape()[2])
    return ni.error("input must be [B, S, D] and weights [D, hidden]");
  int64_t heads = ni.attrInt("num_heads", 0), total = w->shape()[1];
  std::vector<int64_t> sizes = ni.attrInts("qkv_hidden_sizes");
  if (sizes.empty())
    sizes.assign(3, total / 3);
  if (heads < 1 || sizes.size() != 3 || sizes[0] != sizes[1] ||
      sizes[0] + sizes[1] + sizes[2] != total || sizes[0] % heads || sizes[2] % heads)
    return ni.error("num_heads and qkv_hidden_sizes do not divide the weights [" +
                    std::to_string(w->shape()[0]) + ", " + std::to_string(total) + "]");
  DLC_TRY(proj, ni.op(OpKind::MatMul, {x, w}));
  Value *qkv = proj;
  if (bias) {
    DLC_TRY(a, ni.op(OpKind::Add, {qkv, bias}));
    qkv = a;
  }
  DLC_TRY(parts, ni.opMulti(OpKind::Split, {qkv},
                            {{"axis", Attribute(int64_t{2})}, {"split", Attribute(sizes)}}, 3));
  DLC_TRY(q, splitHeads(ni, parts[0], heads, "Q"));
  DLC_TRY(k, splitHeads(ni, parts[1], heads, "K"));
  DLC_TRY(v, splitHeads(ni, parts[2], heads, "V"));
  int64_t b = x->shape()[0], s = x->shape()[1];
  Scores sc;
  if (auto e = contribMasks(ni, sc, ni.input(3), ni.input(5), x->dtype(), b, s, s, 0, true))
    return e;
  DLC_TRY(y, attend(ni, q, k, v, sc));
  DLC_TRY(out, mergeHeads(ni, y));
  ni.setOutput(0, out);
  if (ni.wantsOutput(1)) { // present: [2, B, N, S, H]
    Shape ps = k->shape();
    ps.insert(ps.begin(), 1);
    DLC_TRY(k1, reshape(ni, k, ps));
    DLC_TRY(v1, reshape(ni, v, ps));
    DLC_TRY(present, ni.op(OpKind::Concat, {k1, v1}, {{"axis", Attribute(int64_t{0})}}));
    ni.setOutput(1, present);
  }
  return llvm::Error::success();
}

/// com.microsoft MultiHeadAttention(query, key, value, bias?, key_padding_mask?,
/// attention_bias?, past_key?, past_value?).
llvm::Error importMultiHeadAttention(NodeImporter &ni) {
  Value *q = ni.input(0), *k = ni.input(1), *v = ni.input(2), *bias = ni.input(3);
  Value *pastK = ni.input(6), *pastV = ni.input(7);
  int64_t heads = ni.attrInt("num_heads", 0);
  if (!q || !k || !v || q->rank() != 3)
    return ni.unsupported("MultiHeadAttention without separate 3-D query, key and value (packed "
                          "QKV or KV)");
  if (bool(pastK) != bool(pastV))
    return ni.error("past_key and past_value go together");
  int64_t d = q->shape()[2];
  bool bnsh = k->rank() == 4; // a cross-attention cache: already per head, no K/V bias
  if (v->rank() != k->rank() || (k->rank() != 3 && !bnsh))
    return ni.error("key and value must both be [B, L, hidden] or both [B, N, L, H], got " +
                    k->type().str() + " and " + v->type().str());
  if (bias) {
    int64_t dv = bnsh ? 0 : v->shape()[2];
    if (bias->rank() != 1 || (!bnsh && bias->shape()[0] != 2 * d + dv))
      return ni.error("bias must be [" + std::to_string(2 * d) + " + value hidden size]");
    DLC_TRY(bq, slice(ni, bias, 0, 0, d));
    DLC_TRY(qb, ni.op(OpKind::Add, {q, bq}));
    q = qb;
    if (!bnsh) {
      DLC_TRY(bk, slice(ni, bias, 0, d, 2 * d));
      DLC_TRY(bv, slice(ni, bias, 0, 2 * d, 2 * d + dv));
      DLC_TRY(kb, ni.op(OpKind::Add, {k, bk}));
      DLC_TRY(vb, ni.op(OpKind::Add, {v, bv}));
      k = kb, v = vb;
    }
  }
  DLC_TRY(q4, splitHeads(ni, q, heads, "query"));
  Value *k4 = k, *v4 = v;
  if (!bnsh) {
    DLC_TRY(kh, splitHeads(ni, k, heads, "key"));
    DLC_TRY(vh, splitHeads(ni, v, heads, "value"));
    k4 = kh, v4 = vh;
  }
  DLC_TRY(kAll, withPast(ni, pastK, k4));
  DLC_TRY(vAll, withPast(ni, pastV, v4));
  int64_t b = q->shape()[0], s = q->shape()[1], t = kAll->shape()[2];
  int64_t past = pastK ? pastK->shape()[2] : 0;
  Scores sc;
  if (auto e = contribMasks(ni, sc, ni.input(4), ni.input(5), q->dtype(), b, s, t, past, false))
    return e;
  if (auto e = attendAndMerge(ni, q4, kAll, vAll, sc))
    return e;
  if (ni.wantsOutput(3))
    ni.setOutput(3, sc.masked);
  return llvm::Error::success();
}

/// com.microsoft GroupQueryAttention without a KV cache (the prompt): query [B, S,
/// N*H] (or Q|K|V packed when key and value are absent), key and value [B, S, kvN*H],
/// seqlens_k [B] (each batch's valid length - 1), total_sequence_length = S; causal
/// per batch; rotary embedding of Q and K with do_rotary.
llvm::Error importGroupQueryAttention(NodeImporter &ni) {
  Value *q = ni.input(0), *k = ni.input(1), *v = ni.input(2);
  Value *pastK = ni.input(3), *pastV = ni.input(4), *seqlens = ni.input(5);
  int64_t heads = ni.attrInt("num_heads", 0), kvHeads = ni.attrInt("kv_num_heads", 0);
  if (!q || q->rank() != 3 || !seqlens || heads < 1 || kvHeads < 1)
    return ni.error("query [B, S, hidden], seqlens_k, num_heads and kv_num_heads are required");
  if ((pastK && pastK->type().numElements()) || (pastV && pastV->type().numElements()))
    return ni.unsupported("GroupQueryAttention with a KV cache (a non-empty past_key/past_value)");
  if (ni.input(11))
    return ni.unsupported("GroupQueryAttention with head_sink");
  if (ni.attrInt("smooth_softmax", 0))
    return ni.unsupported("GroupQueryAttention with smooth_softmax");
  int64_t b = q->shape()[0], s = q->shape()[1];
  if (const Tensor *total = ni.constInput(6))
    if (total->numElements() != 1 || total->getInt(0) != s)
      return ni.unsupported("GroupQueryAttention whose total_sequence_length is not the query "
                            "length (a KV cache)");
  if (!k && !v) { // packed Q|K|V
    int64_t h = q->shape()[2] / (heads + 2 * kvHeads);
    DLC_TRY(parts,
            ni.opMulti(
                OpKind::Split, {q},
                {{"axis", Attribute(int64_t{2})},
                 {"split", Attribute(std::vector<int64_t>{heads * h, kvHeads * h, kvHeads * h})}},
                3));
    q = parts[0], k = parts[1], v = parts[2];
  }
  if (!k || !v)
    return ni.error("key and value go together");
  DLC_TRY(q4, splitHeads(ni, q, heads, "query"));
  DLC_TRY(k4, splitHeads(ni, k, kvHeads, "key"));
  DLC_TRY(v4, splitHeads(ni, v, kvHeads, "value"));
  Value *qr = q4, *kr = k4;
  if (ni.attrInt("do_rotary", 0)) {
    Value *cos = ni.input(7), *sin = ni.input(8), *pos = ni.input(9);
    if (!cos || !sin || cos->rank() != 2)
      return ni.error("do_rotary needs 2-D cos_cache and sin_cache");
    if (!pos)
      pos = positions(ni, s, {1, s}, "positions");
    DLC_TRY(c, cacheRows(ni, cos, pos));
    DLC_TRY(sn, cacheRows(ni, sin, pos));
    bool inter = ni.attrInt("rotary_interleaved", 0) != 0;
    int64_t rd = 2 * cos->shape()[1];
    DLC_TRY(a, rotaryOf(ni, q4, c, sn, 0, rd, inter));
    DLC_TRY(bk, rotaryOf(ni, k4, c, sn, 0, rd, inter));
    qr = a, kr = bk;
  }
  Scores sc;
  sc.scale = ni.attrFloat("scale", 0.0f);
  sc.softcap = ni.attrFloat("softcap", 0.0f);
  sc.bias = ni.input(10);
  // Row i of batch b stands at position p = min(i, seqlens_k[b]) (a padded row at its
  // batch's last valid one) and sees keys p - window < j <= p.
  int64_t window = ni.attrInt("local_window_size", -1);
  Value *i = positions(ni, s, {s, 1}, "query_positions", seqlens->dtype());
  Value *j = positions(ni, s, {s}, "key_positions", seqlens->dtype());
  DLC_TRY(lens, reshape(ni, seqlens, {b, 1, 1, 1}));
  DLC_TRY(p, ni.op(OpKind::Min, {i, lens}));
  DLC_TRY(vis0, ni.op(OpKind::LessOrEqual, {j, p}));
  Value *vis = vis0;
  if (window >= 0) {
    DLC_TRY(lo, ni.op(OpKind::Sub, {p, ni.scalar(seqlens->dtype(), static_cast<double>(window))}));
    DLC_TRY(inWindow, ni.op(OpKind::Greater, {j, lo}));
    DLC_TRY(both, ni.op(OpKind::And, {vis, inWindow}));
    vis = both;
  }
  sc.visible = vis;
  return attendAndMerge(ni, qr, kr, v4, sc);
}

//===----------------------------------------------------------------------===//
// com.microsoft EmbedLayerNormalization
//===----------------------------------------------------------------------===//

/// LayerNormalization(word[ids] + position[pos] + segment[segment_ids]) and the
/// mask index (per batch, how many mask entries are 1; zeros without a mask).
llvm::Error importEmbedLayerNorm(NodeImporter &ni) {
  Value *ids = ni.input(0), *segIds = ni.input(1), *word = ni.input(2), *posEmb = ni.input(3);
  Value *segEmb = ni.input(4), *gamma = ni.input(5), *beta = ni.input(6), *mask = ni.input(7);
  Value *pos = ni.input(8);
  if (!ids || ids->rank() != 2 || !word || word->rank() != 2 || !posEmb || posEmb->rank() != 2 ||
      !gamma || !beta || (segEmb && segEmb->rank() != 2))
    return ni.error("input_ids [B, S], 2-D word and position embeddings, gamma and beta are "
                    "required");
  int64_t b = ids->shape()[0], s = ids->shape()[1];
  AttrMap axis0{{"axis", Attribute(int64_t{0})}};
  DLC_TRY(e, ni.op(OpKind::Gather, {word, ids}, axis0));
  Value *sum = e;
  Value *p = nullptr;
  if (pos) {
    DLC_TRY(g, ni.op(OpKind::Gather, {posEmb, pos}, axis0));
    p = g;
  } else {
    if (posEmb->shape()[0] < s)
      return ni.error("the position embedding has fewer rows than the sequence length");
    DLC_TRY(g, slice(ni, posEmb, 0, 0, s));
    p = g;
  }
  DLC_TRY(a, ni.op(OpKind::Add, {sum, p}));
  sum = a;
  if (segIds && segEmb) {
    DLC_TRY(g, ni.op(OpKind::Gather, {segEmb, segIds}, axis0));
    DLC_TRY(a2, ni.op(OpKind::Add, {sum, g}));
    sum = a2;
  }
  DLC_TRY(y, ni.op(OpKind::LayerNormalization, {sum, gamma, beta},
                   {{"axis", Attribute(int64_t{-1})},
                    {"epsilon", Attribute(ni.attrFloat("epsilon", 1e-12f))}}));
  ni.setOutput(0, y);
  if (ni.wantsOutput(1)) {
    Value *count;
    if (mask) {
      DLC_TRY(eq, ni.op(OpKind::Equal, {mask, ni.scalar(mask->dtype(), 1)}));
      DLC_TRY(c, ni.op(OpKind::Cast, {eq}, {{"to", Attribute(std::string("i32"))}}));
      DLC_TRY(r, ni.op(OpKind::ReduceSum, {c},
                       {{"axes", Attribute(std::vector<int64_t>{1})},
                        {"keepdims", Attribute(int64_t{0})}}));
      count = r;
    } else {
      count = ni.constant(Tensor(TensorType(DType::I32, {b})), "mask_index");
    }
    ni.setOutput(1, count);
  }
  if (ni.wantsOutput(2))
    ni.setOutput(2, sum);
  return llvm::Error::success();
}

} // namespace

void registerAttentionHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"Attention", 23, kMaxOpset, importAttention, "", 3});
  t.push_back({"RotaryEmbedding", 23, kMaxOpset, importRotaryEmbedding, "", 3});
  // The required inputs that are not a prefix (GroupQueryAttention's seqlens_k,
  // EmbedLayerNormalization's embeddings) are the handlers' to check.
  t.push_back(contribEntry("Attention", importContribAttention, 2));
  t.push_back(contribEntry("MultiHeadAttention", importMultiHeadAttention, 1));
  t.push_back(contribEntry("GroupQueryAttention", importGroupQueryAttention, 1));
  t.push_back(contribEntry("RotaryEmbedding", importContribRotaryEmbedding, 4));
  t.push_back(contribEntry("EmbedLayerNormalization", importEmbedLayerNorm, 1));
}

} // namespace dlc::frontend

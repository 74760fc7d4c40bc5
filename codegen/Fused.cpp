//===- Fused.cpp - Inlined producers, epilogues and anchor-free groups -----===//
#include "Fused.h"

#include "emitters/EmitterUtils.h"

#include "dlc/ir/FusionRules.h"

namespace dlc::codegen {

using namespace ir;

FusedAccess::FusedAccess(Lowering &l, KernelBuilder &kb, const FusionGroup *group)
    : l_(l), kb_(kb), g_(group) {}

// Names of fused temporaries start with "f" and end with "_": they cannot clash with
// an emitter's locals or the kernel parameters (p0, p1, ...).
std::string FusedAccess::fresh(const char *prefix) { return "f" + std::string(prefix) + std::to_string(counter_++) + "_"; }

std::string FusedAccess::pointer(const Value *v) {
  auto it = ptrs_.find(v);
  if (it != ptrs_.end())
    return it->second;
  std::string p = kb_.pointerTo(v);
  ptrs_[v] = p;
  return p;
}

const Value *FusedAccess::stored(const Value *anchorOut) const {
  return g_ && g_->contains(anchorOut) ? g_->root->result() : anchorOut;
}

std::string FusedAccess::coords(CodeStream &b, const Shape &s, const std::string &idx) {
  std::string prefix = fresh("c");
  IndexMapper(s).emitCoords(b, idx, prefix);
  return prefix;
}

std::string FusedAccess::load(CodeStream &b, const Value *v, const std::string &idx) {
  Memo memo;
  return valueAt(b, v, idx, memo);
}

std::string FusedAccess::loadBound(CodeStream &b, const Value *v, const std::string &idx, const Value *bound,
                                   const std::string &boundExpr) {
  return valueWithBound(b, v, idx, bound, idx, boundExpr);
}

std::string FusedAccess::valueWithBound(CodeStream &b, const Value *v, const std::string &idx,
                                        const Value *bound, const std::string &boundIdx,
                                        const std::string &boundExpr) {
  bound_ = bound;
  boundIdx_ = boundIdx;
  boundExpr_ = boundExpr;
  Memo memo;
  std::string r = valueAt(b, v, idx, memo);
  bound_ = nullptr;
  return r;
}

std::string FusedAccess::forwardIndex(CodeStream &b, const Value *from, const std::string &idx) {
  const Value *cur = from;
  std::string at = idx;
  while (cur != g_->root->result()) {
    const Node *next = nullptr;
    for (const Use &u : cur->uses())
      if (g_->contains(u.user->result())) {
        next = u.user;
        break;
      }
    if (!next)
      break;
    if (next->kind() == OpKind::Transpose) {
      std::vector<int64_t> perm = next->attrInts("perm");
      if (perm.empty())
        for (int64_t d = cur->rank() - 1; d >= 0; --d)
          perm.push_back(d);
      std::string c = coords(b, cur->shape(), at);
      Shape outStrides = stridesOf(next->result()->shape());
      std::string s;
      for (size_t d = 0; d < perm.size(); ++d)
        s += (d ? " + " : "") + c + std::to_string(perm[d]) + " * " + ll(outStrides[d]);
      at = "(" + (s.empty() ? std::string("0") : s) + ")";
    }
    cur = next->result();
  }
  return at;
}

void FusedAccess::store(CodeStream &b, const Value *anchorOut, const std::string &idx, const std::string &value) {
  const Value *out = stored(anchorOut);
  std::string at = idx, r = value;
  if (out != anchorOut) {
    // The epilogue: every node after the anchor keeps its linear index (FusionRules).
    std::string bound = fresh("a");
    b.line(std::string("const ") + computeType(anchorOut->dtype()) + " " + bound + " = " + value + ";");
    at = forwardIndex(b, anchorOut, idx);
    r = valueWithBound(b, out, at, anchorOut, idx, bound);
  }
  auto it = ptrs_.find(out);
  std::string outPtr = it != ptrs_.end() ? it->second : (ptrs_[out] = kb_.outputPointer(out));
  b.line("dlc::st(" + outPtr + ", " + at + ", " + r + ");");
}

double FusedAccess::epilogueFlops() const {
  if (!g_)
    return 0;
  double f = 0;
  for (const Node *n : g_->nodes)
    if (n != g_->anchor && !isMetadataOnly(*n))
      f += 1;
  return f;
}

std::string FusedAccess::valueAt(CodeStream &b, const Value *v, const std::string &idx, Memo &memo) {
  if (isScalarConstant(v))
    return scalarLiteral(v);
  if (v == bound_) // every path back from the output maps to the bound element (FusionRules)
    return boundExpr_;
  auto key = std::make_pair(v, idx);
  if (auto it = memo.find(key); it != memo.end())
    return it->second;
  std::string ct = computeType(v->dtype());
  std::string result;
  if (!g_ || !g_->contains(v)) {
    if (auto o = override_.find(v); o != override_.end())
      return o->second;
    result = fresh("t");
    b.line("const " + ct + " " + result + " = dlc::ld<" + ct + ">(" + pointer(v) + ", " + idx + ");");
    memo[key] = result;
    return result;
  }
  const Node &n = *v->definingNode();
  const Shape &os = v->shape();
  auto operandIndex = [&](const std::string &c, const Value *op) {
    if (op->shape() == os)
      return idx;
    return IndexMapper(os).broadcastIndex(op->shape(), c);
  };
  if (isMetadataOnly(n)) {
    result = valueAt(b, n.operand(0), idx, memo);
  } else if (n.kind() == OpKind::BatchNormalization) {
    std::string c = coords(b, os, idx);
    std::string ch = c + "1";
    std::string x = valueAt(b, n.operand(0), idx, memo);
    std::string sc = valueAt(b, n.operand(1), ch, memo), bi = valueAt(b, n.operand(2), ch, memo),
                mean = valueAt(b, n.operand(3), ch, memo), var = valueAt(b, n.operand(4), ch, memo);
    result = fresh("t");
    b.line("const " + ct + " " + result + " = dlc::cvt<" + ct + ">((" + x + " - " + mean + ") * ((" + ct +
           ")1 / dlc::sqrt_(" + var + " + (" + ct + ")" + literal(DType::F32, n.attrFloat("epsilon")) + ")) * " + sc +
           " + " + bi + ");");
  } else if (n.def().cudaExpr) {
    bool broadcast = false;
    for (const Value *op : n.operands())
      broadcast |= op && !isScalarConstant(op) && op->shape() != os;
    std::string c = broadcast ? coords(b, os, idx) : "";
    std::vector<std::string> vals;
    for (const Value *op : n.operands())
      vals.push_back(op ? valueAt(b, op, operandIndex(c, op), memo) : "");
    std::string st = cudaType(v->dtype());
    std::string e = expandExpr(n, vals);
    result = fresh("t");
    b.line("const " + ct + " " + result + " = " + (st == ct ? "dlc::cvt<" + ct + ">(" + e + ")"
                                                           : "dlc::cvt<" + ct + ">(dlc::cvt<" + st + ">(" + e + "))") +
           ";");
  } else {
    switch (n.kind()) {
    case OpKind::Transpose: {
      const Value *x = n.operand(0);
      std::vector<int64_t> perm = n.attrInts("perm");
      if (perm.empty())
        for (int64_t d = x->rank() - 1; d >= 0; --d)
          perm.push_back(d);
      Shape inStrides = stridesOf(x->shape());
      std::vector<int64_t> s(perm.size());
      for (size_t d = 0; d < perm.size(); ++d)
        s[d] = inStrides[perm[d]];
      std::string c = coords(b, os, idx);
      result = valueAt(b, x, "(" + IndexMapper(os).dot(s, c) + ")", memo);
      break;
    }
    case OpKind::Expand: {
      std::string c = coords(b, os, idx);
      result = valueAt(b, n.operand(0), "(" + IndexMapper(os).broadcastIndex(n.operand(0)->shape(), c) + ")", memo);
      break;
    }
    case OpKind::Tile: {
      const Value *x = n.operand(0);
      std::string c = coords(b, os, idx);
      Shape st = stridesOf(x->shape());
      std::string s;
      for (size_t d = 0; d < os.size(); ++d)
        s += (d ? " + " : "") + std::string("(") + c + std::to_string(d) + " % " + ll(x->shape()[d]) + ") * " +
             ll(st[d]);
      result = valueAt(b, x, "(" + (s.empty() ? std::string("0") : s) + ")", memo);
      break;
    }
    case OpKind::Slice: {
      const Value *x = n.operand(0);
      int64_t rank = x->rank();
      const auto &starts = n.attrInts("starts");
      std::vector<int64_t> axes = n.attrInts("axes"), steps = n.attrInts("steps");
      if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i)
          axes.push_back(static_cast<int64_t>(i));
      if (steps.empty())
        steps.assign(starts.size(), 1);
      std::vector<int64_t> start(rank, 0), step(rank, 1);
      for (size_t k = 0; k < axes.size(); ++k) {
        int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k], dim = x->shape()[a], sp = steps[k];
        __int128 s0 = starts[k];
        if (s0 < 0)
          s0 += dim;
        s0 = sp > 0 ? std::clamp<__int128>(s0, 0, dim) : std::clamp<__int128>(s0, 0, dim - 1);
        start[a] = static_cast<int64_t>(s0);
        step[a] = sp;
      }
      Shape inStrides = stridesOf(x->shape());
      std::string c = coords(b, os, idx);
      int64_t base = 0;
      std::string s;
      for (int64_t d = 0; d < rank; ++d) {
        base += start[d] * inStrides[d];
        if (int64_t coef = step[d] * inStrides[d])
          s += " + " + c + std::to_string(d) + " * " + ll(coef);
      }
      result = valueAt(b, x, "(" + ll(base) + s + ")", memo);
      break;
    }
    case OpKind::Gather: {
      const Value *x = n.operand(0), *ind = n.operand(1);
      int64_t axis = n.attrInt("axis");
      if (axis < 0)
        axis += x->rank();
      int64_t q = ind->rank(), dim = x->shape()[axis];
      Shape xs = stridesOf(x->shape()), is = stridesOf(ind->shape());
      std::string c = coords(b, os, idx);
      std::string iexpr = "0";
      for (int64_t d = 0; d < q; ++d)
        iexpr += " + " + c + std::to_string(axis + d) + " * " + ll(is[d]);
      std::string gi = valueAt(b, ind, "(" + iexpr + ")", memo);
      std::string g = fresh("g");
      b.line("long long " + g + " = (long long)" + gi + ";");
      b.line("if (" + g + " < 0) " + g + " += " + ll(dim) + ";");
      std::string src = g + " * " + ll(xs[axis]);
      for (int64_t d = 0; d < axis; ++d)
        src += " + " + c + std::to_string(d) + " * " + ll(xs[d]);
      for (int64_t d = axis + 1; d < x->rank(); ++d)
        src += " + " + c + std::to_string(d + q - 1) + " * " + ll(xs[d]);
      result = valueAt(b, x, "(" + src + ")", memo);
      break;
    }
    case OpKind::Concat: {
      int64_t axis = n.attrInt("axis");
      if (axis < 0)
        axis += v->rank();
      std::string c = coords(b, os, idx);
      result = fresh("t");
      b.line(ct + " " + result + ";");
      int64_t offset = 0;
      size_t k = 0;
      for (const Value *op : n.operands()) {
        int64_t len = op->shape()[axis];
        if (len == 0)
          continue;
        bool last = ++k == n.numOperands();
        std::string head = (offset == 0 ? "if (" : "else if (") + c + std::to_string(axis) + " < " +
                           ll(offset + len) + ")";
        if (last)
          head = offset == 0 ? "if (true)" : "else";
        CodeStream::Block blk(b, head);
        // Index into the operand: the coordinate along `axis` shifted by `offset`.
        Shape st = stridesOf(op->shape());
        std::string s = "0";
        for (int64_t d = 0; d < v->rank(); ++d)
          s += " + " + (d == axis ? "(" + c + std::to_string(d) + " - " + ll(offset) + ")" : c + std::to_string(d)) +
               " * " + ll(st[d]);
        Memo inner = memo; // values computed inside a branch are not visible outside
        std::string val = valueAt(b, op, "(" + s + ")", inner);
        b.line(result + " = " + val + ";");
        offset += len;
      }
      break;
    }
    default:
      result = "/* internal error: cannot inline " + std::string(n.opName()) + " */";
      break;
    }
  }
  memo[key] = result;
  return result;
}

llvm::Error lowerInlineNode(Lowering &l, const Node &n) {
  FusionGroup g;
  g.nodes = {&n};
  g.produced = {n.result()};
  g.root = &n;
  return lowerInlineGroup(l, g);
}

llvm::Error lowerInlineGroup(Lowering &l, const FusionGroup &g) {
  const Value *out = g.root->result();
  // Only metadata nodes: no kernel, the result aliases the input.
  bool allMeta = true;
  for (const Node *n : g.nodes)
    allMeta &= isMetadataOnly(*n);
  if (allMeta) {
    const Value *v = out;
    while (g.contains(v))
      v = v->definingNode()->operand(0);
    l.alias(out, v);
    return llvm::Error::success();
  }
  int64_t total = out->type().numElements();
  l.allocate(out);
  if (total == 0)
    return llvm::Error::success();
  KernelBuilder kb(l, *g.root, g.nodes.size() > 1 ? "fused" : "");
  FusedAccess fa(l, kb, &g);
  // Vectorized form: every node element-wise over one f32 index space.
  bool vec4 = out->dtype() == DType::F32 && total % 4 == 0;
  std::vector<const Value *> externals;
  for (const Node *n : g.nodes) {
    vec4 &= n->result()->type().numElements() == total &&
            (isMetadataOnly(*n) || (n->def().cudaExpr && n->result()->dtype() == DType::F32));
    for (const Value *v : n->operands()) {
      if (!v || g.contains(v) || isScalarConstant(v))
        continue;
      vec4 &= v->dtype() == DType::F32 && (isMetadataOnly(*n) || v->shape() == n->result()->shape());
      if (std::find(externals.begin(), externals.end(), v) == externals.end())
        externals.push_back(v);
    }
  }
  CodeStream &b = kb.body();
  double flops = 0;
  for (const Node *n : g.nodes)
    if (!isMetadataOnly(*n))
      flops += static_cast<double>(n->result()->type().numElements());
  kb.setFlops(flops);
  uint64_t grid;
  uint32_t block;
  std::string outPtr = kb.outputPointer(out);
  if (vec4) {
    b.line("const long long n4 = " + ll(total / 4) + ";");
    CodeStream::Block loop(b, gridStrideLoop("j", "n4"));
    std::vector<std::string> q;
    for (size_t k = 0; k < externals.size(); ++k) {
      q.push_back("q" + std::to_string(k));
      b.line("const float4 " + q[k] + " = reinterpret_cast<const float4 *>(" + fa.pointer(externals[k]) + ")[j];");
    }
    b.line("float4 r;");
    const char *lanes[] = {"x", "y", "z", "w"};
    for (int k = 0; k < 4; ++k) {
      std::map<const Value *, std::string> o;
      for (size_t e = 0; e < externals.size(); ++e)
        o[externals[e]] = q[e] + "." + lanes[k];
      fa.setExternalOverride(o);
      CodeStream::Block laneBlock(b, "");
      b.line(std::string("r.") + lanes[k] + " = " + fa.load(b, out, "(4 * j + " + std::to_string(k) + ")") + ";");
    }
    b.line("reinterpret_cast<float4 *>(" + outPtr + ")[j] = r;");
    elementwiseLaunchShape(total / 4, grid, block);
  } else {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    std::string r = fa.load(b, out, "i");
    b.line("dlc::st(" + outPtr + ", i, " + r + ");");
    elementwiseLaunchShape(total, grid, block);
  }
  kb.launch(grid, block);
  return llvm::Error::success();
}

} // namespace dlc::codegen

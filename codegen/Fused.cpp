//===- Fused.cpp - Inlined producers, epilogues and anchor-free groups -----===//
#include "Fused.h"

#include "dlc/ir/OpHelpers.h"
#include "emitters/EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

FusedAccess::FusedAccess(Lowering &l, ParamList &params, const ir::FusionGroup *group)
    : l_(l), params_(params), g_(group) {}

// Names of fused temporaries start with "f" and end with "_": they cannot clash with
// a functor's parameters (P, i, v).
std::string FusedAccess::fresh(const char *prefix) {
  return "f" + std::string(prefix) + std::to_string(counter_++) + "_";
}

std::string FusedAccess::pointer(const Value *v) {
  auto it = ptrs_.find(v);
  if (it != ptrs_.end())
    return it->second;
  std::string p = params_.pointer(v->dtype(), l_.bufferOf(v), true, v->type().byteSize());
  ptrs_[v] = p;
  return p;
}

std::string FusedAccess::checkPointer(const Node &n) {
  if (dry_)
    return "((unsigned *)0)";
  auto it = checks_.find(&n);
  if (it != checks_.end())
    return it->second;
  std::string p = params_.pointer(DType::U32, l_.checkWord(n, "index out of range"), false, 4);
  checks_[&n] = p;
  return p;
}

std::string FusedAccess::outputPointer(const Value *v) {
  auto it = ptrs_.find(v);
  if (it != ptrs_.end())
    return it->second;
  std::string p = params_.pointer(v->dtype(), l_.bufferOf(v), false, v->type().byteSize());
  ptrs_[v] = p;
  return p;
}

std::string FusedAccess::inOutPointer(const Value *v) {
  if (auto it = ptrs_.find(v); it != ptrs_.end())
    return it->second;
  std::string p = outputPointer(v);
  params_.alsoRead();
  return p;
}

const Value *FusedAccess::stored(const Value *anchorOut) const {
  return g_ && g_->computes(anchorOut) ? g_->root()->result() : anchorOut;
}

std::string FusedAccess::fail(const Node &n, const std::string &why) {
  if (!error_) // the first failure is the one to report
    error_ = errorf("{0} cannot be inlined into a fused kernel: {1}", n.describe(), why);
  return "0";
}

void FusedAccess::splitIndex(CodeStream &b, const std::string &i, const std::string &row,
                             const std::string &col, int64_t cols) {
  b.line("const I " + i + " = " + row + " * (I)" + num(cols) + " + " + col + ";");
  split_ = {i, row, col, cols};
}

std::string FusedAccess::coords(CodeStream &b, const Shape &s, const std::string &idx) {
  std::string prefix = fresh("c");
  if (s.empty())
    return prefix;
  size_t d = s.size();
  if (idx == split_.idx && !split_.idx.empty() && s.size() > 1 && s.back() == split_.cols) {
    b.line("I " + prefix + "q = " + split_.row + ";");
    b.line("const I " + prefix + std::to_string(--d) + " = " + split_.col + ";");
  } else {
    b.line("I " + prefix + "q = " + idx + ";");
  }
  while (d-- > 1)
    b.line("const I " + prefix + std::to_string(d) + " = " +
           (s[d] == 1 ? std::string("0") : params_.divmod(s[d]) + ".split(" + prefix + "q)") + ";");
  b.line("const I " + prefix + "0 = " + prefix + "q;");
  return prefix;
}

std::string FusedAccess::dot(const std::vector<int64_t> &strides, const std::string &prefix,
                             const std::vector<int64_t> &moduli) {
  std::string s;
  for (size_t d = 0; d < strides.size(); ++d) {
    if (strides[d] == 0)
      continue;
    std::string c = prefix + std::to_string(d);
    if (d < moduli.size() && moduli[d] > 0)
      c = params_.divmod(moduli[d]) + ".mod(" + c + ")";
    std::string term = c + (strides[d] == 1 ? "" : " * (I)" + num(strides[d]));
    s += (s.empty() ? "" : " + ") + term;
  }
  return s.empty() ? "(I)0" : s;
}

std::string FusedAccess::broadcastIndex(const Shape &out, const Shape &in,
                                        const std::string &prefix) {
  std::vector<int64_t> strides(out.size(), 0);
  Shape st = stridesOf(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    strides[off + i] = in[i] == 1 ? 0 : st[i];
  return dot(strides, prefix);
}

std::string FusedAccess::load(CodeStream &b, const Value *v, const std::string &idx) {
  Memo memo;
  return valueAt(b, v, idx, memo);
}

std::vector<std::string> FusedAccess::loadAll(CodeStream &b, const std::vector<const Value *> &vs,
                                              const std::string &idx) {
  Memo memo;
  std::vector<std::string> r;
  for (const Value *v : vs)
    r.push_back(valueAt(b, v, idx, memo));
  return r;
}

std::string FusedAccess::loadBound(CodeStream &b, const Value *v, const std::string &idx,
                                   const Value *bound, const std::string &boundExpr) {
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
  while (cur != g_->root()->result()) {
    const Node *next = nullptr;
    for (const Use &u : cur->uses())
      if (g_->contains(u.user)) {
        next = u.user;
        break;
      }
    if (!next)
      break;
    // A permutation of whole dims (FusionRules: the only reindexing in an epilogue)
    // sends operand coordinate `dims[d].dim` to result dim d.
    Fusibility f = fusibility(*next);
    if (f.role == Fusibility::Role::Injective) {
      IndexMap m = f.indexMap(*next);
      std::string c = coords(b, cur->shape(), at);
      Shape outStrides = stridesOf(next->result()->shape());
      std::vector<int64_t> s(cur->rank(), 0);
      for (size_t d = 0; d < m.access.dims.size(); ++d)
        s[m.access.dims[d].dim] = outStrides[d];
      at = "(" + dot(s, c) + ")";
    }
    cur = next->result();
  }
  return at;
}

std::pair<std::string, std::string> FusedAccess::epilogue(CodeStream &b, const Value *anchorOut,
                                                          const std::string &idx,
                                                          const std::string &value) {
  const Value *out = stored(anchorOut);
  if (out == anchorOut)
    return {idx, value};
  // The epilogue: every node after the anchor keeps its linear index (FusionRules).
  std::string bound = fresh("a");
  b.line(std::string("const ") + computeType(anchorOut->dtype()) + " " + bound + " = " + value +
         ";");
  std::string at = forwardIndex(b, anchorOut, idx);
  return {at, valueWithBound(b, out, at, anchorOut, idx, bound)};
}

void FusedAccess::store(CodeStream &b, const Value *anchorOut, const std::string &idx,
                        const std::string &value) {
  auto [at, r] = epilogue(b, anchorOut, idx, value);
  b.line("dlc::st(" + outputPointer(stored(anchorOut)) + ", " + at + ", " + r + ");");
}

void FusedAccess::store2(CodeStream &b, const Value *anchorOut, const std::string &idx,
                         const std::string &v0, const std::string &v1, bool pairs) {
  auto [at0, r0] = epilogue(b, anchorOut, idx, v0);
  auto [at1, r1] = epilogue(b, anchorOut, "(" + idx + " + 1)", v1);
  const std::string out = outputPointer(stored(anchorOut));
  if (pairs && at0 == idx) {
    b.line("dlc::st2(" + out + ", " + idx + ", " + r0 + ", " + r1 + ");");
    return;
  }
  b.line("dlc::st(" + out + ", " + at0 + ", " + r0 + ");");
  b.line("dlc::st(" + out + ", " + at1 + ", " + r1 + ");");
}

std::string FusedAccess::valueAt(CodeStream &b, const Value *v, const std::string &idx,
                                 Memo &memo) {
  if (isScalarConstant(v))
    return scalarLiteral(v);
  if (v == bound_) // every path back from the output maps to the bound element (FusionRules)
    return boundExpr_;
  auto key = std::make_pair(v, idx);
  if (auto it = memo.find(key); it != memo.end())
    return it->second;
  std::string ct = computeType(v->dtype());
  std::string result;
  if (!g_ || !g_->computes(v)) {
    if (auto o = override_.find(v); o != override_.end())
      return o->second;
    result = fresh("t");
    b.line("const " + ct + " " + result + " = dlc::ld<" + ct + ">(" + pointer(v) + ", " + idx +
           ");");
    memo[key] = result;
    return result;
  }
  const Node &n = *v->definingNode();
  Fusibility f = fusibility(n);
  switch (f.role) {
  case Fusibility::Role::Metadata:
    result = valueAt(b, n.operand(0), idx, memo);
    break;
  case Fusibility::Role::Elementwise:
    result = elementwiseAt(b, n, f, idx, memo);
    break;
  case Fusibility::Role::Injective:
    result = injectiveAt(b, n, f.indexMap(n), idx, memo);
    break;
  default:
    return fail(n, std::string(fusionRoleName(f.role)));
  }
  memo[key] = result;
  return result;
}

std::string FusedAccess::operandCoords(CodeStream &b, const Node &n, const Fusibility &f,
                                       const std::string &idx,
                                       std::vector<std::optional<OperandAccess>> &access) {
  const Shape &os = n.result()->shape();
  access.assign(n.numOperands(), std::nullopt);
  bool coordinates = false;
  for (unsigned k = 0; k < n.numOperands(); ++k) {
    const Value *op = n.operand(k);
    if (f.operandAccess)
      access[k] = f.operandAccess(n, k);
    coordinates |= op && !isScalarConstant(op) &&
                   (access[k] || (op->shape() != os && op->type().numElements() != 1));
  }
  return coordinates ? coords(b, os, idx) : "";
}

std::string FusedAccess::elementResult(CodeStream &b, const Node &n, const Fusibility &f,
                                       const std::string &expr) {
  const DType dt = n.result()->dtype();
  std::string ct = computeType(dt), st = cudaType(dt);
  std::string result = fresh("t");
  // The op alone stores its result in the storage type: rounding there keeps a fused
  // kernel's arithmetic the unfused graph's.
  bool round = f.roundsResult && st != ct;
  b.line("const " + ct + " " + result + " = " +
         (round ? "dlc::cvt<" + ct + ">(dlc::cvt<" + st + ">(" + expr + "))"
                : "dlc::cvt<" + ct + ">(" + expr + ")") +
         ";");
  return result;
}

std::string FusedAccess::concatBranch(const IndexMap &m, size_t k, const std::string &c) {
  const IndexMap::Piece &p = m.pieces[k];
  if (k + 1 == m.pieces.size())
    return k == 0 ? "if (true)" : "else";
  return std::string(k == 0 ? "if (" : "else if (") + c + std::to_string(m.axis) + " < (I)" +
         num(p.start + p.size) + ")";
}

std::string FusedAccess::elementwiseAt(CodeStream &b, const Node &n, const Fusibility &f,
                                       const std::string &idx, Memo &memo) {
  if (!n.def().cudaExpr)
    return fail(n, "no expression template");
  const Value *v = n.result();
  const Shape &os = v->shape();
  std::vector<std::optional<OperandAccess>> access;
  std::string c = operandCoords(b, n, f, idx, access);
  std::vector<std::string> vals;
  for (unsigned k = 0; k < n.numOperands(); ++k) {
    const Value *op = n.operand(k);
    if (!op || isScalarConstant(op)) {
      vals.push_back(op ? scalarLiteral(op) : "");
      continue;
    }
    std::string at = access[k]           ? accessIndex(n, *access[k], c)
                     : op->shape() == os ? idx
                     : op->type().numElements() == 1
                         ? std::string("(I)0")
                         : "(" + broadcastIndex(os, op->shape(), c) + ")";
    vals.push_back(valueAt(b, op, at, memo));
  }
  auto e = expandExpr(n, vals, idx);
  if (!e)
    return fail(n, llvm::toString(e.takeError()));
  return elementResult(b, n, f, *e);
}

std::string FusedAccess::accessIndex(const Node &n, const OperandAccess &a, const std::string &c) {
  const Shape &xs = n.operand(a.operand)->shape();
  Shape st = stridesOf(xs);
  std::vector<int64_t> coef(a.dims.size(), 0), moduli(a.dims.size(), 0);
  int64_t offset = 0;
  for (size_t d = 0; d < a.dims.size(); ++d) {
    const DimAccess &da = a.dims[d];
    if (da.dim < 0)
      continue;
    offset += da.start * st[da.dim];
    coef[d] = da.step * st[da.dim];
    moduli[d] = da.modulus;
  }
  // Negative steps make negative coefficients: the sum is still non-negative.
  std::string base = offset == 0 ? "" : "(I)" + num(offset) + " + ";
  return "(" + base + dot(coef, c, moduli) + ")";
}

std::string FusedAccess::gatherIndex(CodeStream &b, const Node &n, const IndexMap &m,
                                     const std::string &c, Memo &memo) {
  // The index, from the end when negative; out of range is a data error (the
  // launch's check word) and reads element 0 instead.
  const Value *x = n.operand(m.access.operand);
  std::string gi = valueAt(b, n.operand(m.indices.operand), accessIndex(n, m.indices, c), memo);
  std::string g = fresh("g");
  b.line("long long " + g + " = (long long)" + gi + ";");
  std::string dimField = num(m.axisSize);
  b.line("if (" + g + " < 0) " + g + " += " + dimField + ";");
  b.line("if (" + g + " < 0 || " + g + " >= " + dimField + ") { dlc::reportDataError(" +
         checkPointer(n) + ", dlc::kErrIndexRange); " + g + " = 0; }");
  std::string rest = accessIndex(n, m.access, c);
  return "((I)" + g + " * (I)" + num(stridesOf(x->shape())[m.axis]) + " + " + rest + ")";
}

std::string FusedAccess::injectiveAt(CodeStream &b, const Node &n, const IndexMap &m,
                                     const std::string &idx, Memo &memo) {
  const Value *v = n.result();
  std::string c = coords(b, v->shape(), idx);
  switch (m.kind) {
  case IndexMap::Kind::Affine:
    return valueAt(b, n.operand(m.access.operand), accessIndex(n, m.access, c), memo);
  case IndexMap::Kind::Gather:
    return valueAt(b, n.operand(m.access.operand), gatherIndex(b, n, m, c, memo), memo);
  case IndexMap::Kind::Concat: {
    std::string ct = computeType(v->dtype());
    std::string result = fresh("t");
    b.line(ct + " " + result + ";");
    for (size_t k = 0; k < m.pieces.size(); ++k) {
      const IndexMap::Piece &p = m.pieces[k];
      CodeStream::Block blk(b, concatBranch(m, k, c));
      Memo inner = memo; // values computed inside a branch are not visible outside
      b.line(result + " = " +
             valueAt(b, n.operand(p.access.operand), accessIndex(n, p.access, c), inner) + ";");
    }
    return result;
  }
  }
  return fail(n, "unknown index map");
}

//===----------------------------------------------------------------------===//
// The row form: a run of lanes along the last dim
//===----------------------------------------------------------------------===//

FusedAccess::LaneRead FusedAccess::laneRead(const Node &n, const OperandAccess &a) const {
  const Shape &xs = n.operand(a.operand)->shape();
  if (a.dims.empty() || xs.empty())
    return LaneRead::Uniform;
  const int64_t xLast = static_cast<int64_t>(xs.size()) - 1;
  const DimAccess &last = a.dims.back();
  if (last.dim < 0 || last.step == 0)
    return LaneRead::Uniform;
  // No other result dim may move or offset x's last dim: a run's base stays aligned.
  for (size_t d = 0; d + 1 < a.dims.size(); ++d)
    if (a.dims[d].dim == xLast && (a.dims[d].step != 0 || a.dims[d].start % lanes_ != 0))
      return LaneRead::None;
  if (last.dim == xLast && last.step == 1 && last.modulus == 0 && last.start % lanes_ == 0 &&
      xs.back() % lanes_ == 0)
    return LaneRead::Contiguous;
  return LaneRead::None;
}

std::vector<std::string> FusedAccess::loadLanes(CodeStream &b, const Value *v,
                                                const std::string &idx, int lanes, bool dry) {
  lanes_ = lanes;
  dry_ = dry;
  laneFail_ = false;
  Memo memo;
  LaneMemo lm;
  std::vector<std::string> r = lanesAt(b, v, idx, memo, lm);
  lanes_ = 0;
  dry_ = false;
  if (laneFail_)
    r.clear();
  return r;
}

std::vector<std::string> FusedAccess::lanesOf(CodeStream &b, const Value *v, const std::string &idx,
                                              LaneRead how, Memo &memo, LaneMemo &lm) {
  if (how == LaneRead::Contiguous)
    return lanesAt(b, v, idx, memo, lm);
  std::string x = how == LaneRead::Uniform ? valueAt(b, v, idx, memo) : "0";
  laneFail_ |= how == LaneRead::None;
  return std::vector<std::string>(static_cast<size_t>(lanes_), x);
}

std::vector<std::string> FusedAccess::lanesAt(CodeStream &b, const Value *v, const std::string &idx,
                                              Memo &memo, LaneMemo &lm) {
  const size_t L = static_cast<size_t>(lanes_);
  if (isScalarConstant(v))
    return std::vector<std::string>(L, scalarLiteral(v));
  std::vector<std::string> r(L, "0");
  // A run stays in one row of v and starts aligned to the vector.
  if (laneFail_ || v->rank() == 0 || v->shape().back() % lanes_ != 0) {
    laneFail_ = true;
    return r;
  }
  auto key = std::make_pair(v, idx);
  if (auto it = lm.find(key); it != lm.end())
    return it->second;
  std::string ct = computeType(v->dtype());
  if (!g_ || !g_->computes(v)) {
    if (!fixedAligned(l_, v, lanes_ * dtypeSize(v->dtype()))) {
      laneFail_ = true;
      return r;
    }
    std::string q = fresh("q"), vt = vecType(v->dtype(), lanes_);
    b.line("const " + vt + " " + q + " = *reinterpret_cast<const " + vt + " *>(" + pointer(v) +
           " + " + idx + ");");
    for (size_t k = 0; k < L; ++k)
      r[k] = "dlc::cvt<" + ct + ">(" + q + ".v[" + std::to_string(k) + "])";
    lm[key] = r;
    return r;
  }
  const Node &n = *v->definingNode();
  Fusibility f = fusibility(n);
  const Shape &os = v->shape();
  switch (f.role) {
  case Fusibility::Role::Metadata: // the same linear index, a row of the operand
    r = lanesAt(b, n.operand(0), idx, memo, lm);
    break;
  case Fusibility::Role::Elementwise: {
    if (!n.def().cudaExpr) {
      laneFail_ = true;
      return r;
    }
    std::vector<std::optional<OperandAccess>> access;
    std::string c = operandCoords(b, n, f, idx, access);
    std::vector<std::vector<std::string>> vals(L);
    for (unsigned k = 0; k < n.numOperands(); ++k) {
      const Value *op = n.operand(k);
      std::vector<std::string> lanes;
      if (!op || isScalarConstant(op)) {
        lanes.assign(L, op ? scalarLiteral(op) : "");
      } else if (access[k]) {
        lanes = lanesOf(b, op, accessIndex(n, *access[k], c), laneRead(n, *access[k]), memo, lm);
      } else if (op->shape() == os) {
        lanes = lanesAt(b, op, idx, memo, lm);
      } else if (op->type().numElements() == 1) {
        lanes = lanesOf(b, op, "(I)0", LaneRead::Uniform, memo, lm);
      } else {
        const Shape &is = op->shape();
        LaneRead how = is.back() == 1           ? LaneRead::Uniform
                       : is.back() == os.back() ? LaneRead::Contiguous
                                                : LaneRead::None;
        lanes = lanesOf(b, op, "(" + broadcastIndex(os, is, c) + ")", how, memo, lm);
      }
      for (size_t l = 0; l < L; ++l)
        vals[l].push_back(lanes[l]);
    }
    for (size_t l = 0; l < L; ++l) {
      auto e = expandExpr(n, vals[l], "(" + idx + " + " + std::to_string(l) + ")");
      if (!e) {
        llvm::consumeError(e.takeError());
        laneFail_ = true;
        return r;
      }
      r[l] = elementResult(b, n, f, *e);
    }
    break;
  }
  case Fusibility::Role::Injective: {
    IndexMap m = f.indexMap(n);
    std::string c = coords(b, os, idx);
    switch (m.kind) {
    case IndexMap::Kind::Affine:
      r = lanesOf(b, n.operand(m.access.operand), accessIndex(n, m.access, c),
                  laneRead(n, m.access), memo, lm);
      break;
    case IndexMap::Kind::Concat: {
      // A run never straddles two pieces.
      const bool alongRun = m.axis + 1 == static_cast<int64_t>(os.size());
      for (const IndexMap::Piece &p : m.pieces)
        laneFail_ |= alongRun && (p.start % lanes_ != 0 || p.size % lanes_ != 0);
      if (laneFail_)
        return r;
      for (size_t l = 0; l < L; ++l) {
        r[l] = fresh("t");
        b.line(ct + " " + r[l] + ";");
      }
      for (size_t k = 0; k < m.pieces.size(); ++k) {
        const IndexMap::Piece &p = m.pieces[k];
        CodeStream::Block blk(b, concatBranch(m, k, c));
        Memo inner = memo;
        LaneMemo innerLanes = lm;
        std::vector<std::string> x =
            lanesOf(b, n.operand(p.access.operand), accessIndex(n, p.access, c),
                    laneRead(n, p.access), inner, innerLanes);
        for (size_t l = 0; l < L; ++l)
          b.line(r[l] + " = " + x[l] + ";");
      }
      break;
    }
    case IndexMap::Kind::Gather: {
      // Gathered rows (an embedding): the index is the same along the run, and the
      // gathered dim is not x's last.
      const Value *x = n.operand(m.access.operand);
      LaneRead how = laneRead(n, m.access);
      if (laneRead(n, m.indices) != LaneRead::Uniform || how == LaneRead::None ||
          m.axis + 1 == static_cast<int64_t>(x->rank())) {
        laneFail_ = true;
        return r;
      }
      r = lanesOf(b, x, gatherIndex(b, n, m, c, memo), how, memo, lm);
      break;
    }
    }
    break;
  }
  default:
    laneFail_ = true;
    return r;
  }
  lm[key] = r;
  return r;
}

//===----------------------------------------------------------------------===//
// Functors
//===----------------------------------------------------------------------===//

namespace {
/// How a functor's device methods begin.
const char *kMethodHead = "template <class I> static __device__ __forceinline__ ";

/// A functor with one device method: `signature` (after the template head and
/// qualifiers), the body written by `body` through the group's FusedAccess.
llvm::Expected<Functor> functorWith(Lowering &l, const FusionGroup *g, const Value *typed,
                                    const std::string &signature,
                                    const std::function<void(CodeStream &, FusedAccess &)> &body) {
  Functor f;
  f.valueType = computeType(typed->dtype());
  FusedAccess fa(l, f.params, g);
  CodeStream b;
  {
    CodeStream::Indent in(b);
    b.line(kMethodHead + signature + " {");
    CodeStream::Indent inBody(b);
    body(b, fa);
  }
  if (auto e = fa.takeError())
    return e;
  f.methods = b.str() + "  }\n";
  return f;
}
} // namespace

llvm::Expected<Functor> loadFunctor(Lowering &l, const FusionGroup *g, const Value *v) {
  return functorWith(
      l, g, v, "Value load(const Params &P, I i)",
      [&](CodeStream &b, FusedAccess &fa) { b.line("return " + fa.load(b, v, "i") + ";"); });
}

int loadRunLanes(Lowering &l, const FusionGroup *g, const Value *v, int64_t divides) {
  for (int lanes : {8, 4, 2}) {
    if (divides % lanes != 0)
      continue;
    Functor trial;
    FusedAccess ta(l, trial.params, g);
    CodeStream tb;
    bool ok = !ta.loadLanes(tb, v, "i", lanes, true).empty();
    if (auto e = ta.takeError()) {
      llvm::consumeError(std::move(e));
      ok = false;
    }
    if (ok)
      return lanes;
  }
  return 0;
}

llvm::Expected<Functor> loadRunFunctor(Lowering &l, const FusionGroup *g, const Value *v,
                                       int lanes) {
  // Two methods of one functor (one Params): load, then loadRun.
  return functorWith(
      l, g, v, "Value load(const Params &P, I i)", [&](CodeStream &b, FusedAccess &fa) {
        b.line("return " + fa.load(b, v, "i") + ";");
        b.unindent();
        b.line("}");
        b.line(std::string(kMethodHead) + "void loadRun(const Params &P, I i, Value *r) {");
        b.indent();
        std::vector<std::string> r = fa.loadLanes(b, v, "i", lanes, false);
        for (size_t k = 0; k < r.size(); ++k)
          b.line("r[" + std::to_string(k) + "] = " + r[k] + ";");
      });
}

llvm::Expected<Functor> storeFunctor(Lowering &l, const FusionGroup *g, const Value *anchorOut) {
  return functorWith(l, g, anchorOut, "void store(const Params &P, I i, Value v)",
                     [&](CodeStream &b, FusedAccess &fa) { fa.store(b, anchorOut, "i", "v"); });
}

llvm::Expected<Functor> storePairFunctor(Lowering &l, const FusionGroup *g, const Value *anchorOut,
                                         bool pairs) {
  // Two methods of one functor (one Params): the second written after the first.
  return functorWith(l, g, anchorOut, "void store(const Params &P, I i, Value v)",
                     [&](CodeStream &b, FusedAccess &fa) {
                       fa.store(b, anchorOut, "i", "v");
                       b.unindent();
                       b.line("}");
                       b.line(std::string(kMethodHead) +
                              "void store2(const Params &P, I i, Value v0, Value v1) {");
                       b.indent();
                       fa.store2(b, anchorOut, "i", "v0", "v1", pairs);
                     });
}

llvm::Expected<AnchorFunctors> anchorFunctors(Lowering &l, const Value *in, const Value *out,
                                              int runLanes) {
  auto fin = runLanes ? loadRunFunctor(l, l.group(), in, runLanes) : loadFunctor(l, l.group(), in);
  if (!fin)
    return fin.takeError();
  auto fout = storeFunctor(l, l.group(), out);
  if (!fout)
    return fout.takeError();
  AnchorFunctors r{std::move(*fin), std::move(*fout), "", ""};
  r.inName = l.functorName(r.in);
  r.outName = l.functorName(r.out);
  return r;
}

llvm::Expected<Functor> boundFunctor(Lowering &l, const FusionGroup *g, const Value *v,
                                     const Value *bound) {
  // Two methods of one functor (one Params): the body written twice.
  const int64_t cols = v->rank() ? v->shape().back() : 1;
  return functorWith(
      l, g, v, "Value apply(const Params &P, I i, Value x)", [&](CodeStream &b, FusedAccess &fa) {
        b.line("return " + (v == bound ? std::string("x") : fa.loadBound(b, v, "i", bound, "x")) +
               ";");
        b.unindent();
        b.line("}");
        b.line(std::string(kMethodHead) + "Value apply2(const Params &P, I row, I col, Value x) {");
        b.indent();
        if (v == bound) {
          b.line("return x;");
          return;
        }
        fa.splitIndex(b, "i", "row", "col", cols);
        b.line("return " + fa.loadBound(b, v, "i", bound, "x") + ";");
      });
}

//===----------------------------------------------------------------------===//
// Anchor-free groups
//===----------------------------------------------------------------------===//

llvm::Error lowerInlineNode(Lowering &l, const Node &n) {
  FusionGroup g;
  g.nodes = {const_cast<Node *>(&n)};
  return lowerInlineGroup(l, g);
}

/// The buffers of an element-wise group's inputs that it reads only at the index it
/// writes, element for element (same element size, whole buffers): its output may
/// take their memory when they die here (MemoryPlan.h).
static std::vector<uint32_t> inPlaceInputs(Lowering &l, const FusionGroup &g, BufferRef out) {
  const Value *result = g.root()->result();
  int64_t total = result->type().numElements();
  size_t es = dtypeSize(result->dtype());
  if (out.offset != 0)
    return {};
  for (const Node *n : g.nodes) {
    Fusibility::Role role = fusibility(*n).role;
    if (n->result()->type().numElements() != total ||
        (role != Fusibility::Role::Metadata && role != Fusibility::Role::Elementwise))
      return {};
  }
  std::vector<uint32_t> yes, no;
  for (const Node *n : g.nodes)
    for (unsigned k = 0; k < n->numOperands(); ++k) {
      const Value *v = n->operand(k);
      if (!v || g.computes(v) || isScalarConstant(v))
        continue;
      BufferRef r = l.bufferOf(v);
      bool identity = r.offset == 0 && dtypeSize(v->dtype()) == es &&
                      v->type().numElements() == total && fusibility(*n).readsAtOwnIndex(*n, k);
      (identity ? yes : no).push_back(r.buffer);
    }
  std::vector<uint32_t> buffers;
  for (uint32_t b : yes)
    if (std::find(no.begin(), no.end(), b) == no.end() &&
        std::find(buffers.begin(), buffers.end(), b) == buffers.end())
      buffers.push_back(b);
  return buffers;
}

namespace {
/// The vector type an element-wise kernel of one float dtype moves per thread.
struct VectorForm {
  int width = 1;         // lanes
  const char *type = ""; // CUDA vector type
  int elementBytes = 4;
  const char *packFn = nullptr; // builds the vector from float lanes (null: brace-init)
  int bytes() const { return width * elementBytes; }
  /// Lane k of vector q, as float.
  std::string lane(const std::string &q, int k) const {
    if (width == 4)
      return q + "." + "xyzw"[k];
    return std::string(k == 0 ? "__low2float(" : "__high2float(") + q + ")";
  }
  /// The vector of lanes r0, r1, ...
  std::string pack() const {
    std::string s = packFn ? std::string(packFn) + "(" : std::string(type) + "{";
    for (int k = 0; k < width; ++k)
      s += (k ? ", r" : "r") + std::to_string(k);
    return s + (packFn ? ")" : "}");
  }
};

VectorForm vectorFormFor(DType t) {
  switch (t) {
  case DType::F32:
    return {4, "float4", 4, nullptr};
  case DType::F16:
    return {2, "__half2", 2, "__floats2half2_rn"};
  case DType::BF16:
    return {2, "__nv_bfloat162", 2, "__floats2bfloat162_rn"};
  default:
    return {};
  }
}
} // namespace

/// The longest run of lowerInlineGroup's row form for group g: 16 bytes of its
/// narrowest external or output type (at most 8 lanes) where the output's last dim and
/// buffer allow; 0 where the output cannot take a vector store.
static int rowLanes(Lowering &l, const FusionGroup &g) {
  const Value *out = g.root()->result();
  if (out->rank() == 0)
    return 0;
  size_t narrowest = dtypeSize(out->dtype());
  for (const Node *n : g.nodes)
    for (const Value *v : n->operands())
      if (v && !g.computes(v) && !isScalarConstant(v))
        narrowest = std::min(narrowest, dtypeSize(v->dtype()));
  const int64_t lanes = vectorRun(l, {out}, out->shape().back(),
                                  std::min<int64_t>(8, 16 / std::max<size_t>(1, narrowest)));
  return lanes > 1 ? static_cast<int>(lanes) : 0;
}

llvm::Error lowerInlineGroup(Lowering &l, const FusionGroup &g) {
  const Value *out = g.root()->result();
  auto metadata = [](const Node *n) { return fusibility(*n).role == Fusibility::Role::Metadata; };
  // Only metadata nodes: no kernel, the result aliases the input.
  if (std::all_of(g.nodes.begin(), g.nodes.end(), metadata)) {
    const Value *v = out;
    while (g.computes(v))
      v = v->definingNode()->operand(0);
    l.alias(out, v);
    return llvm::Error::success();
  }
  int64_t total = out->type().numElements();
  BufferRef outRef = l.allocate(out);
  if (total == 0)
    return llvm::Error::success();
  Functor f;
  FusedAccess fa(l, f.params, &g);
  // The row form: a thread computes a run of `lanes` elements along the last dim,
  // splitting its index into coordinates once and reading each operand that varies
  // along the run as one vector (16 bytes for the narrowest type: 8 FP16 channels of
  // an NHWC tensor), and stores the run as one vector.
  const int maxLanes = rowLanes(l, g);
  const int lanes = maxLanes ? loadRunLanes(l, &g, out, maxLanes) : 0;
  const bool row = lanes > 0;
  const VectorForm vf = vectorFormFor(out->dtype());
  bool vec = !row && vf.width > 1 && total % vf.width == 0 && outRef.offset % vf.bytes() == 0 &&
             !l.isInterface(out);
  std::vector<const Value *> externals;
  for (const Node *n : g.nodes) {
    vec &= n->result()->type().numElements() == total &&
           (metadata(n) || (fusibility(*n).role == Fusibility::Role::Elementwise &&
                            n->result()->dtype() == out->dtype()));
    for (unsigned k = 0; k < n->numOperands(); ++k) {
      const Value *v = n->operand(k);
      if (!v || g.computes(v) || isScalarConstant(v))
        continue;
      vec &= v->dtype() == out->dtype() && fusibility(*n).readsAtOwnIndex(*n, k) &&
             l.bufferOf(v).offset % vf.bytes() == 0 && !l.isInterface(v);
      if (std::find(externals.begin(), externals.end(), v) == externals.end())
        externals.push_back(v);
    }
  }
  double flops = 0;
  for (const Node *n : g.nodes)
    if (!metadata(n))
      flops += static_cast<double>(n->result()->type().numElements());
  CodeStream b;
  {
    CodeStream::Indent in(b);
    b.line(std::string(kMethodHead) + "void run(const Params &P, I i) {");
    CodeStream::Indent body(b);
    if (row) {
      b.line("const I iv = i * (I)" + std::to_string(lanes) + ";");
      std::vector<std::string> r = fa.loadLanes(b, out, "iv", lanes, false);
      std::string st = cudaType(out->dtype()), vt = vecType(out->dtype(), lanes);
      b.line(vt + " w;");
      for (size_t k = 0; k < r.size(); ++k)
        b.line("w.v[" + std::to_string(k) + "] = dlc::cvt<" + st + ">(" + r[k] + ");");
      b.line("*reinterpret_cast<" + vt + " *>(" + fa.outputPointer(out) + " + iv) = w;");
    } else if (vec) {
      std::string outPtr = fa.outputPointer(out);
      std::vector<std::string> q;
      for (size_t k = 0; k < externals.size(); ++k) {
        q.push_back("q" + std::to_string(k));
        b.line(std::string("const ") + vf.type + " " + q[k] + " = reinterpret_cast<const " +
               vf.type + " *>(" + fa.pointer(externals[k]) + ")[i];");
      }
      for (int k = 0; k < vf.width; ++k) {
        std::map<const Value *, std::string> o;
        for (size_t e = 0; e < externals.size(); ++e)
          o[externals[e]] = vf.lane(q[e], k);
        fa.setExternalOverride(o);
        b.line("float r" + std::to_string(k) + ";");
        CodeStream::Block laneBlock(b, "");
        b.line(
            "r" + std::to_string(k) + " = " +
            fa.load(b, out, "(" + std::to_string(vf.width) + " * i + " + std::to_string(k) + ")") +
            ";");
      }
      b.line(std::string("reinterpret_cast<") + vf.type + " *>(" + outPtr + ")[i] = " + vf.pack() +
             ";");
    } else {
      b.line("dlc::st(" + fa.outputPointer(out) + ", i, " + fa.load(b, out, "i") + ");");
    }
  }
  if (auto e = fa.takeError())
    return e;
  f.methods = b.str() + "  }\n";
  f.valueType = computeType(out->dtype());
  int64_t n = row ? total / lanes : vec ? total / vf.width : total;
  std::string fn = l.functorName(f);
  Instantiation inst;
  inst.tmpl = "dlc::elementwise";
  // Every index the functor computes is an element index of a tensor of the group.
  int64_t maxIndex = total;
  for (const Node *node : g.nodes)
    for (const Value *v : node->operands())
      if (v)
        maxIndex = std::max(maxIndex, v->type().numElements());
  inst.targs = {l.indexType(maxIndex), fn};
  inst.argsType = "dlc::ElemArgs<" + fn + ">";
  inst.functors = {fn};
  uint32_t k = l.instantiate(inst);
  LaunchArgs args;
  args.blob.i64(n);
  args.functor(f);
  l.launch(*g.root(), k, args, gridFor(n, 256), 256, 0, flops);
  for (uint32_t in : inPlaceInputs(l, g, outRef))
    l.allowInPlace(in, outRef.buffer);
  return llvm::Error::success();
}

llvm::Expected<size_t> lowerUpdateLanes(Lowering &l,
                                        const std::vector<const FusionGroup *> &lanes) {
  struct LaneCode {
    Functor f;
    int64_t n = 0;
    double flops = 0;
    size_t paramBytes = 0;
    size_t variables = 0;
  };
  // Each lane's functor: every update value at element i from the lane's operands,
  // then the stores into the variables (all loads come first, so an element is read
  // before it is written). Lanes whose code is the same share a functor.
  std::vector<std::string> order;
  std::map<std::string, std::vector<LaneCode>> byFunctor;
  for (const FusionGroup *lane : lanes) {
    const FusionGroup &g = *lane;
    std::vector<const Value *> values, variables;
    for (const GraphOutput &o : l.graph().outputs())
      if (o.isUpdate() && g.computes(o.value)) {
        values.push_back(o.value);
        variables.push_back(o.variable);
      }
    if (values.empty())
      return errorf("update lane ending at {0} updates no variable", g.root()->describe());
    LaneCode lc;
    lc.n = values.front()->type().numElements();
    if (lc.n == 0)
      continue;
    FusedAccess fa(l, lc.f.params, &g);
    std::vector<std::string> ptrs;
    for (const Value *v : variables)
      ptrs.push_back(fa.inOutPointer(v));
    CodeStream b;
    {
      CodeStream::Indent in(b);
      b.line(std::string(kMethodHead) + "void run(const Params &P, I i) {");
      CodeStream::Indent body(b);
      std::vector<std::string> x = fa.loadAll(b, values, "i");
      for (size_t k = 0; k < variables.size(); ++k)
        b.line("dlc::st(" + ptrs[k] + ", i, " + x[k] + ");");
    }
    if (auto e = fa.takeError())
      return e;
    lc.f.methods = b.str() + "  }\n";
    lc.f.valueType = computeType(values.front()->dtype());
    lc.flops = static_cast<double>(lc.n) * static_cast<double>(g.nodes.size());
    ParamBlob blob;
    lc.f.params.append(blob);
    lc.paramBytes = blob.bytes.size();
    lc.variables = variables.size();
    std::string name = l.functorName(lc.f);
    if (!byFunctor.count(name))
      order.push_back(name);
    byFunctor[name].push_back(std::move(lc));
  }
  size_t launches = 0;
  for (const std::string &fn : order) {
    std::vector<LaneCode> &ls = byFunctor[fn];
    // As many lanes per launch as its parameters hold: block starts, sizes, Params.
    size_t perLaunch = (pkg::kMaxParamBytes - 8) / (16 + ls.front().paramBytes);
    if (perLaunch == 0)
      return errorf("an update lane needs {0} bytes of launch parameters (at most {1})",
                    ls.front().paramBytes + 24, pkg::kMaxParamBytes);
    for (size_t first = 0; first < ls.size(); first += perLaunch) {
      size_t count = std::min(perLaunch, ls.size() - first);
      std::vector<int64_t> starts{0}, sizes;
      int64_t maxIndex = 0;
      double flops = 0;
      size_t variables = 0;
      for (size_t k = first; k < first + count; ++k) {
        sizes.push_back(ls[k].n);
        starts.push_back(starts.back() + (ls[k].n + kMultiTensorChunk - 1) / kMultiTensorChunk);
        maxIndex = std::max(maxIndex, ls[k].n + kMultiTensorChunk);
        flops += ls[k].flops;
        variables += ls[k].variables;
      }
      Instantiation inst;
      inst.tmpl = "dlc::multi_tensor";
      inst.targs = {l.indexType(maxIndex), fn, std::to_string(count)};
      inst.argsType = "dlc::MultiTensorArgs<" + fn + ", " + std::to_string(count) + ">";
      inst.functors = {fn};
      uint32_t kernel = l.instantiate(inst);
      LaunchArgs args;
      args.blob.raw(starts.data(), 8 * starts.size(), 8);
      args.blob.raw(sizes.data(), 8 * sizes.size(), 8);
      for (size_t k = first; k < first + count; ++k)
        args.functor(ls[k].f);
      l.launch("multi-tensor update: " + std::to_string(variables) + " variables in " +
                   std::to_string(count) + " lanes",
               kernel, args, static_cast<uint32_t>(starts.back()), 256, flops);
      ++launches;
    }
  }
  return launches;
}

void registerFusedLowerings(LoweringRegistry &r) {
  r.group(GroupKind::Elementwise, lowerInlineGroup);
}

} // namespace dlc::codegen

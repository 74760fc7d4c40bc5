#include "EmitterUtils.h"

#include "dlc/ir/FusionGroup.h"

namespace dlc::codegen {

using namespace ir;

bool isScalarConstant(const Value *v) {
  return v && v->isConstant() && v->type().numElements() == 1 && v->dtype() != DType::BF16 &&
         v->dtype() != DType::F16;
}

std::string scalarLiteral(const Value *v) {
  const Tensor &t = v->data();
  DType dt = v->dtype();
  if (isUnsignedInt(dt))
    return std::to_string(loadElement<uint64_t>(dt, t.raw(), 0)) + "ULL";
  if (isSignedInt(dt))
    return literalInt(loadElement<int64_t>(dt, t.raw(), 0));
  return literal(dt, t.getDouble(0));
}

bool fixedAligned(Lowering &l, const Value *v, uint64_t bytes) {
  return !l.isInterface(v) && l.bufferOf(v).offset % bytes == 0;
}

int64_t vectorRun(Lowering &l, std::initializer_list<const Value *> vs, int64_t count,
                  int64_t maxLanes) {
  for (int64_t lanes = maxLanes; lanes > 1; lanes /= 2)
    if (count % lanes == 0 && std::all_of(vs.begin(), vs.end(), [&](const Value *v) {
          return fixedAligned(l, v, static_cast<uint64_t>(lanes) * dtypeSize(v->dtype()));
        }))
      return lanes;
  return 1;
}

std::string vecType(DType dt, int64_t lanes) {
  return "dlc::VecOf<" + std::string(cudaType(dt)) + ", " + std::to_string(lanes) + ">";
}

namespace {
/// A strided view of shape `from` reshaped to `to` (same element count), where every
/// group of dims the reshape merges or splits is contiguous in the view (numpy's
/// no-copy reshape); none otherwise.
std::optional<std::vector<int64_t>>
reshapeStrides(const Shape &from, const std::vector<int64_t> &strides, const Shape &to) {
  std::vector<int64_t> os, ost; // `from` without its size-1 dims
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1) {
      os.push_back(from[d]);
      ost.push_back(strides[d]);
    }
  std::vector<int64_t> out(to.size(), 0);
  size_t oi = 0, ni = 0;
  while (ni < to.size() && oi < os.size()) {
    if (to[ni] == 1) {
      ++ni;
      continue;
    }
    size_t oj = oi + 1, nj = ni + 1;
    int64_t op = os[oi], np = to[ni];
    while (op != np) {
      if (np < op) {
        if (nj == to.size())
          return std::nullopt;
        np *= to[nj++];
      } else {
        if (oj == os.size())
          return std::nullopt;
        op *= os[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (ost[k] != os[k + 1] * ost[k + 1])
        return std::nullopt;
    out[nj - 1] = ost[oj - 1];
    for (size_t k = nj - 1; k > ni; --k)
      out[k - 1] = out[k] * to[k];
    ni = nj;
    oi = oj;
  }
  return out;
}
} // namespace

std::optional<StridedAccess> stridedAccess(Lowering &l, const Value *v) {
  const FusionGroup *fg = l.group();
  if (!fg || !fg->computes(v)) {
    StridedAccess a;
    a.source = v;
    Shape st = stridesOf(v->shape());
    a.strides.assign(st.begin(), st.end());
    return a;
  }
  const Node &n = *v->definingNode();
  const Fusibility f = fusibility(n);
  if (f.role == Fusibility::Role::Metadata) {
    auto a = stridedAccess(l, n.operand(0));
    if (!a)
      return std::nullopt;
    auto st = reshapeStrides(n.operand(0)->shape(), a->strides, v->shape());
    if (!st)
      return std::nullopt;
    a->strides = std::move(*st);
    return a;
  }
  if (f.role != Fusibility::Role::Injective)
    return std::nullopt;
  const IndexMap m = f.indexMap(n);
  if (m.kind != IndexMap::Kind::Affine)
    return std::nullopt;
  auto a = stridedAccess(l, n.operand(m.access.operand));
  if (!a)
    return std::nullopt;
  StridedAccess r;
  r.source = a->source;
  r.offset = a->offset;
  r.strides.assign(static_cast<size_t>(v->rank()), 0);
  for (size_t d = 0; d < m.access.dims.size(); ++d) {
    const DimAccess &da = m.access.dims[d];
    if (da.dim < 0) // (a broadcast dim: stride 0)
      continue;
    if (da.modulus != 0)
      return std::nullopt;
    r.offset += da.start * a->strides[static_cast<size_t>(da.dim)];
    r.strides[d] = da.step * a->strides[static_cast<size_t>(da.dim)];
  }
  return r;
}

uint32_t blockFor(int64_t len) {
  uint32_t b = 32;
  while (b < 256 && b < len)
    b *= 2;
  return b;
}

std::optional<RowAccess> rowAccess(Lowering &l, const Value *x, const Value *y, int64_t len,
                                   const std::function<bool(int64_t)> &allows) {
  const DType dt = x->dtype();
  const FusionGroup *fg = l.group();
  if ((dt != DType::F32 && dt != DType::F16 && dt != DType::BF16) || (fg && fg->computes(x)))
    return std::nullopt;
  const uint64_t es = dtypeSize(dt);
  RowAccess r;
  r.vec = static_cast<int64_t>(16 / es);
  while (r.vec > 1 &&
         (len % r.vec != 0 || !fixedAligned(l, x, r.vec * es) || (allows && !allows(r.vec))))
    r.vec /= 2;
  r.rawOut = (!fg || fg->epilogue.empty()) && y->dtype() == dt && fixedAligned(l, y, r.vec * es);
  return r;
}

} // namespace dlc::codegen

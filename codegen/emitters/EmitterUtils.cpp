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

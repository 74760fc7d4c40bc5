#include "EmitterUtils.h"

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

} // namespace dlc::codegen

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

void IndexMapper::emitCoords(CodeStream &b, const std::string &linear,
                             const std::string &prefix) const {
  if (shape_.empty())
    return;
  b.line("long long " + prefix + "_rem = " + linear + ";");
  for (int64_t d = rank() - 1; d >= 0; --d) {
    std::string c = prefix + std::to_string(d);
    if (d == 0) {
      b.line("const long long " + c + " = " + prefix + "_rem;");
    } else {
      b.line("const long long " + c + " = " + prefix + "_rem % " + ll(shape_[d]) + ";");
      b.line(prefix + "_rem /= " + ll(shape_[d]) + ";");
    }
  }
}

std::string IndexMapper::dot(const std::vector<int64_t> &strides, const std::string &prefix) const {
  std::string s;
  for (size_t d = 0; d < strides.size(); ++d) {
    if (strides[d] == 0)
      continue;
    std::string term = prefix + std::to_string(d) + (strides[d] == 1 ? "" : " * " + ll(strides[d]));
    s += (s.empty() ? "" : " + ") + term;
  }
  return s.empty() ? "0" : s;
}

std::string IndexMapper::broadcastIndex(const Shape &in, const std::string &prefix) const {
  std::vector<int64_t> strides(shape_.size(), 0);
  Shape st = stridesOf(in);
  size_t off = shape_.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    strides[off + i] = in[i] == 1 ? 0 : st[i];
  return dot(strides, prefix);
}

std::string gridStrideLoop(const std::string &var, const std::string &n) {
  return "for (long long " + var + " = blockIdx.x * (long long)blockDim.x + threadIdx.x; " + var +
         " < " + n + "; " + var + " += (long long)gridDim.x * blockDim.x)";
}

} // namespace dlc::codegen

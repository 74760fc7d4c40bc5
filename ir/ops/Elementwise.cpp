//===- Elementwise.cpp - Element-wise arithmetic, math and activations -----===//
//
// Binary ops broadcast numpy-style. Reference kernels compute in the operand's
// compute type (float for f32/f16/bf16, double for f64, int64/uint64 for
// integers) and round the result to the result type.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"
#include "dlc/ir/GradBuilder.h"
#include "dlc/ir/Philox.h"
#include "dlc/support/Gelu.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace dlc::ir {
namespace {
using namespace ops;

//===----------------------------------------------------------------------===//
// Binary ops
//===----------------------------------------------------------------------===//

template <class CT> CT wrapAdd(CT a, CT b) {
  if constexpr (std::is_same_v<CT, int64_t>)
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <class CT> CT wrapSub(CT a, CT b) {
  if constexpr (std::is_same_v<CT, int64_t>)
    return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  else
    return a - b;
}
template <class CT> CT wrapMul(CT a, CT b) {
  if constexpr (std::is_same_v<CT, int64_t>)
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}

/// The scalar function of each binary op. Integer division truncates toward zero;
/// division by zero yields 0 for integers (undefined in ONNX; we pick a value, never trap).
template <OpKind K, class CT> auto binaryScalar(CT a, CT b) {
  if constexpr (std::is_same_v<CT, bool>) {
    if constexpr (K == OpKind::And)
      return a && b;
    else if constexpr (K == OpKind::Or)
      return a || b;
    else if constexpr (K == OpKind::Xor)
      return a != b;
    else if constexpr (K == OpKind::Equal)
      return a == b;
    else
      return a != b; // not reachable: verification rejects other bool arithmetic
  } else if constexpr (K == OpKind::Add) {
    return wrapAdd(a, b);
  } else if constexpr (K == OpKind::Sub) {
    return wrapSub(a, b);
  } else if constexpr (K == OpKind::Mul) {
    return wrapMul(a, b);
  } else if constexpr (K == OpKind::Div) {
    if constexpr (std::is_integral_v<CT>) {
      if (b == 0)
        return CT(0);
      if constexpr (std::is_signed_v<CT>)
        if (a == std::numeric_limits<CT>::min() && b == -1)
          return a;
      return CT(a / b);
    } else {
      return CT(a / b);
    }
  } else if constexpr (K == OpKind::Min || K == OpKind::Max) {
    if constexpr (std::is_floating_point_v<CT>)
      if (std::isnan(a) || std::isnan(b))
        return std::numeric_limits<CT>::quiet_NaN();
    return K == OpKind::Min ? std::min(a, b) : std::max(a, b);
  } else if constexpr (K == OpKind::Equal) {
    return a == b;
  } else if constexpr (K == OpKind::Less) {
    return a < b;
  } else if constexpr (K == OpKind::Greater) {
    return a > b;
  } else if constexpr (K == OpKind::GreaterOrEqual) {
    return a >= b;
  } else if constexpr (K == OpKind::LessOrEqual) {
    return a <= b;
  } else if constexpr (K == OpKind::PRelu) {
    return a < CT(0) ? wrapMul(a, b) : a;
  } else if constexpr (K == OpKind::BitwiseAnd || K == OpKind::BitwiseOr ||
                       K == OpKind::BitwiseXor) {
    if constexpr (std::is_integral_v<CT>)
      return CT(K == OpKind::BitwiseAnd ? (a & b) : K == OpKind::BitwiseOr ? (a | b) : (a ^ b));
    else
      return a; // not reachable: verification takes integers only
  } else {
    static_assert(K == OpKind::And || K == OpKind::Or || K == OpKind::Xor, "unhandled binary op");
    return K == OpKind::And  ? (a != 0 && b != 0)
           : K == OpKind::Or ? (a != 0 || b != 0)
                             : ((a != 0) != (b != 0));
  }
}

/// Folds all operands left to right with broadcasting (variadic Min/Max use this too).
template <OpKind K> llvm::Error refBinary(const Node &, const Inputs &in, Outputs &out) {
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = decltype(ct);
    using RT = decltype(binaryScalar<K, CT>(CT{}, CT{}));
    const Shape &os = out[0].shape();
    int64_t n = out[0].numElements();
    std::vector<CT> acc;
    {
      auto a = in[0]->template toVector<CT>();
      BroadcastIndex ia(in[0]->shape(), os);
      acc.resize(n);
      for (int64_t i = 0; i < n; ++i)
        acc[i] = a[ia(i)];
    }
    std::vector<RT> res(n);
    for (size_t k = 1; k < in.size(); ++k) {
      auto b = in[k]->template toVector<CT>();
      BroadcastIndex ib(in[k]->shape(), os);
      for (int64_t i = 0; i < n; ++i)
        res[i] = binaryScalar<K, CT>(acc[i], b[ib(i)]);
      if constexpr (std::is_same_v<RT, CT>)
        if (k + 1 < in.size())
          for (int64_t i = 0; i < n; ++i)
            acc[i] = res[i];
    }
    if (in.size() == 1) // variadic Min/Max with one operand is a copy
      for (int64_t i = 0; i < n; ++i)
        res[i] = static_cast<RT>(acc[i]);
    out[0] = Tensor::fromVector(out[0].type(), res);
    return ok();
  });
}

template <unsigned Set> llvm::Error verifySameTyped(const Node &n) {
  for (unsigned i = 0; i < n.numOperands(); ++i)
    if (auto e = requireType(n, i, Set))
      return e;
  return requireAllSameType(n);
}

InferResult inferBroadcast(const Node &n) {
  auto s = broadcastOperands(n);
  if (!s)
    return s.takeError();
  return TypeList{{n.operand(0)->dtype(), *s}};
}

InferResult inferBroadcastBool(const Node &n) {
  auto s = broadcastOperands(n);
  if (!s)
    return s.takeError();
  return TypeList{{DType::Bool, *s}};
}

// Pow(X, Y): Y may have another numeric type; the result has X's type.
llvm::Error verifyPow(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  return requireType(n, 1, kNumeric);
}

llvm::Error refPow(const Node &, const Inputs &in, Outputs &out) {
  const Shape &os = out[0].shape();
  int64_t n = out[0].numElements();
  BroadcastIndex ia(in[0]->shape(), os), ib(in[1]->shape(), os);
  if (in[0]->dtype() == DType::F64 || !isFloat(in[0]->dtype())) {
    auto a = in[0]->toVector<double>(), b = in[1]->toVector<double>();
    std::vector<double> r(n);
    for (int64_t i = 0; i < n; ++i)
      r[i] = std::pow(a[ia(i)], b[ib(i)]);
    out[0] = Tensor::fromVector(out[0].type(), r);
  } else {
    auto a = in[0]->toVector<float>(), b = in[1]->toVector<float>();
    std::vector<float> r(n);
    for (int64_t i = 0; i < n; ++i)
      r[i] = std::pow(a[ia(i)], b[ib(i)]);
    out[0] = Tensor::fromVector(out[0].type(), r);
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// Unary ops
//===----------------------------------------------------------------------===//

struct UnaryParams {
  float alpha = 0, beta = 0, gamma = 0, bias = 0, lambd = 0;
  bool tanhApprox = false;
  explicit UnaryParams(const Node &n) {
    auto get = [&](const char *name, float &dst) {
      if (const Attribute *a = n.attr(name))
        dst = a->f();
    };
    get("alpha", alpha);
    get("beta", beta);
    get("gamma", gamma);
    get("bias", bias);
    get("lambd", lambd);
    if (const Attribute *g = n.attr("approximate"))
      tanhApprox = g->s() == "tanh";
  }
};

template <OpKind K, class CT> CT unaryScalar(CT x, const UnaryParams &p) {
  if constexpr (std::is_same_v<CT, bool>) {
    return !x; // only Not accepts bool
  } else if constexpr (K == OpKind::Neg) {
    return wrapSub(CT(0), x);
  } else if constexpr (K == OpKind::Abs) {
    if constexpr (std::is_unsigned_v<CT>)
      return x;
    else
      return x < 0 ? wrapSub(CT(0), x) : x;
  } else if constexpr (K == OpKind::Relu) {
    return x > CT(0) ? x : CT(0);
  } else if constexpr (K == OpKind::Not) {
    return x == CT(0) ? CT(1) : CT(0);
  } else if constexpr (K == OpKind::BitwiseNot && std::is_integral_v<CT>) {
    return CT(~x);
  } else if constexpr (K == OpKind::Sign) {
    return x > CT(0) ? CT(1) : (x < CT(0) ? wrapSub(CT(0), CT(1)) : CT(0));
  } else if constexpr (K == OpKind::Shrink) {
    if (x < CT(-p.lambd))
      return CT(x + CT(p.bias));
    if (x > CT(p.lambd))
      return CT(x - CT(p.bias));
    return CT(0);
  } else if constexpr (std::is_integral_v<CT>) {
    return x; // float-only ops; verification rejects integer operands
  } else {
    const CT one = 1, zero = 0;
    if constexpr (K == OpKind::Sqrt)
      return std::sqrt(x);
    if constexpr (K == OpKind::Exp)
      return std::exp(x);
    if constexpr (K == OpKind::Log)
      return std::log(x);
    if constexpr (K == OpKind::Reciprocal)
      return one / x;
    if constexpr (K == OpKind::Erf)
      return std::erf(x);
    if constexpr (K == OpKind::Tanh)
      return std::tanh(x);
    if constexpr (K == OpKind::Sigmoid)
      return one / (one + std::exp(-x));
    if constexpr (K == OpKind::LeakyRelu)
      return x < zero ? CT(p.alpha) * x : x;
    if constexpr (K == OpKind::Elu)
      return x < zero ? CT(p.alpha) * (std::exp(x) - one) : x;
    if constexpr (K == OpKind::Gelu) {
      if (p.tanhApprox)
        return geluTanh(x);
      return CT(0.5) * x * (one + std::erf(x / std::sqrt(CT(2))));
    }
    if constexpr (K == OpKind::HardSigmoid)
      return std::max(zero, std::min(one, CT(p.alpha) * x + CT(p.beta)));
    if constexpr (K == OpKind::HardSwish)
      return x * std::max(zero, std::min(one, x / CT(6) + CT(0.5)));
    if constexpr (K == OpKind::Floor)
      return std::floor(x);
    if constexpr (K == OpKind::Ceil)
      return std::ceil(x);
    if constexpr (K == OpKind::Round)
      return std::nearbyint(x); // half to even
    if constexpr (K == OpKind::Sin)
      return std::sin(x);
    if constexpr (K == OpKind::Cos)
      return std::cos(x);
    if constexpr (K == OpKind::Tan)
      return std::tan(x);
    if constexpr (K == OpKind::Asin)
      return std::asin(x);
    if constexpr (K == OpKind::Acos)
      return std::acos(x);
    if constexpr (K == OpKind::Atan)
      return std::atan(x);
    if constexpr (K == OpKind::Sinh)
      return std::sinh(x);
    if constexpr (K == OpKind::Cosh)
      return std::cosh(x);
    if constexpr (K == OpKind::Asinh)
      return std::asinh(x);
    if constexpr (K == OpKind::Acosh)
      return std::acosh(x);
    if constexpr (K == OpKind::Atanh)
      return std::atanh(x);
    if constexpr (K == OpKind::Softplus)
      return x > CT(30) ? x : std::log1p(std::exp(x));
    if constexpr (K == OpKind::Softsign)
      return x / (one + std::fabs(x));
    if constexpr (K == OpKind::Mish)
      return x * std::tanh(x > CT(30) ? x : std::log1p(std::exp(x)));
    if constexpr (K == OpKind::Selu)
      return x > zero ? CT(p.gamma) * x : CT(p.gamma) * (CT(p.alpha) * std::exp(x) - CT(p.alpha));
    if constexpr (K == OpKind::Celu)
      return std::max(zero, x) + std::min(zero, CT(p.alpha) * (std::exp(x / CT(p.alpha)) - one));
    if constexpr (K == OpKind::ThresholdedRelu)
      return x > CT(p.alpha) ? x : zero;
    return x; // ops with their own reference kernel (IsNaN, IsInf) never get here
  }
}

template <OpKind K> llvm::Error refUnary(const Node &n, const Inputs &in, Outputs &out) {
  UnaryParams p(n);
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = decltype(ct);
    auto x = in[0]->template toVector<CT>();
    std::vector<CT> r(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      r[i] = unaryScalar<K, CT>(x[i], p);
    out[0] = Tensor::fromVector(out[0].type(), r);
    return ok();
  });
}

template <unsigned Set> llvm::Error verifyUnary(const Node &n) {
  return requireType(n, 0, Set);
}

//===----------------------------------------------------------------------===//
// Clip, Where
//===----------------------------------------------------------------------===//

llvm::Error verifyClip(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  for (unsigned i = 1; i < n.numOperands(); ++i) {
    if (!n.operand(i))
      continue;
    if (auto e = requireSameType(n, 0, i))
      return e;
    if (n.operand(i)->type().numElements() != 1)
      return errorf("operand {0} (min/max) must be a scalar, got {1}", i,
                    n.operand(i)->type().str());
  }
  return ok();
}

llvm::Error refClip(const Node &, const Inputs &in, Outputs &out) {
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = decltype(ct);
    auto x = in[0]->template toVector<CT>();
    CT lo = std::numeric_limits<CT>::lowest(), hi = std::numeric_limits<CT>::max();
    if (in.size() > 1 && in[1])
      lo = in[1]->template toVector<CT>()[0];
    if (in.size() > 2 && in[2])
      hi = in[2]->template toVector<CT>()[0];
    for (size_t i = 0; i < x.size(); ++i) // keeps NaN
      x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : CT(x[i]));
    out[0] = Tensor::fromVector(out[0].type(), x);
    return ok();
  });
}

llvm::Error verifyWhere(const Node &n) {
  if (auto e = requireType(n, 0, kBool))
    return e;
  return requireSameType(n, 1, 2);
}

InferResult inferWhere(const Node &n) {
  auto s = broadcastOperands(n);
  if (!s)
    return s.takeError();
  return TypeList{{n.operand(1)->dtype(), *s}};
}

llvm::Error refWhere(const Node &, const Inputs &in, Outputs &out) {
  return dispatch(in[1]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = decltype(ct);
    const Shape &os = out[0].shape();
    auto c = in[0]->template toVector<bool>();
    auto x = in[1]->template toVector<CT>(), y = in[2]->template toVector<CT>();
    BroadcastIndex ic(in[0]->shape(), os), ix(in[1]->shape(), os), iy(in[2]->shape(), os);
    std::vector<CT> r(out[0].numElements());
    for (size_t i = 0; i < r.size(); ++i)
      r[i] = c[ic(i)] ? x[ix(i)] : y[iy(i)];
    out[0] = Tensor::fromVector(out[0].type(), r);
    return ok();
  });
}

/// Pow by a small constant integer or 0.5 (x*x, sqrt(x)) is as safe in FP16 as a
/// Mul; a general power overflows easily and stays FP32.
Fp16Policy fp16Pow(const Node &n) {
  const Value *e = n.operand(1);
  if (!e->isConstant() || e->type().numElements() != 1)
    return Fp16Policy::Deny;
  double p = e->data().getDouble(0);
  return p == 0.5 || p == 1 || p == 2 || p == 3 ? Fp16Policy::Allow : Fp16Policy::Deny;
}

//===----------------------------------------------------------------------===//
// IsInf / IsNaN (bool results), Mod, BitShift
//===----------------------------------------------------------------------===//

template <OpKind K> llvm::Error refPredicate(const Node &n, const Inputs &in, Outputs &out) {
  auto x = in[0]->toVector<double>();
  bool neg = true, pos = true;
  if (K == OpKind::IsInf) {
    neg = n.attrInt("detect_negative") != 0;
    pos = n.attrInt("detect_positive") != 0;
  }
  std::vector<bool> r(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    r[i] = K == OpKind::IsNaN ? std::isnan(x[i])
                              : std::isinf(x[i]) && ((x[i] > 0 && pos) || (x[i] < 0 && neg));
  out[0] = Tensor::fromVector(out[0].type(), r);
  return ok();
}

InferResult inferSameShapeBool(const Node &n) {
  return TypeList{{DType::Bool, n.operand(0)->shape()}};
}

llvm::Error verifyMod(const Node &n) {
  if (auto e = verifySameTyped<kNumeric>(n))
    return e;
  if (isFloat(n.operand(0)->dtype()) && n.attrInt("fmod") != 1)
    return makeError("floating-point Mod requires fmod = 1");
  return ok();
}

llvm::Error refMod(const Node &n, const Inputs &in, Outputs &out) {
  bool fmodMode = n.attrInt("fmod") != 0;
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = std::conditional_t<std::is_same_v<decltype(ct), bool>, int64_t, decltype(ct)>;
    const Shape &os = out[0].shape();
    auto a = in[0]->template toVector<CT>(), b = in[1]->template toVector<CT>();
    BroadcastIndex ia(in[0]->shape(), os), ib(in[1]->shape(), os);
    std::vector<CT> r(out[0].numElements());
    for (size_t i = 0; i < r.size(); ++i) {
      CT x = a[ia(i)], y = b[ib(i)];
      if constexpr (std::is_floating_point_v<CT>) {
        r[i] = std::fmod(x, y);
      } else {
        // x % 0 is 0 (undefined in ONNX; never a trap), and x % -1 is 0 (INT_MIN % -1
        // traps on x86).
        if (y == 0 || (std::is_signed_v<CT> && y == CT(-1))) {
          r[i] = 0;
          continue;
        }
        CT m = x % y; // sign of the dividend (C fmod semantics)
        if constexpr (std::is_signed_v<CT>)
          if (!fmodMode && m != 0 && ((m < 0) != (y < 0))) // Python semantics: sign of divisor
            m += y;
        r[i] = m;
      }
    }
    out[0] = Tensor::fromVector(out[0].type(), r);
    return ok();
  });
}

llvm::Error verifyBitShift(const Node &n) {
  if (auto e = verifySameTyped<kUInt>(n))
    return e;
  const std::string &d = n.attrString("direction");
  if (d != "LEFT" && d != "RIGHT")
    return errorf("direction must be \"LEFT\" or \"RIGHT\", got \"{0}\"", d);
  return ok();
}

llvm::Error refBitShift(const Node &n, const Inputs &in, Outputs &out) {
  bool left = n.attrString("direction") == "LEFT";
  unsigned bits = static_cast<unsigned>(dtypeSize(in[0]->dtype()) * 8);
  const Shape &os = out[0].shape();
  auto a = in[0]->toVector<uint64_t>(), b = in[1]->toVector<uint64_t>();
  BroadcastIndex ia(in[0]->shape(), os), ib(in[1]->shape(), os);
  std::vector<uint64_t> r(out[0].numElements());
  for (size_t i = 0; i < r.size(); ++i) {
    uint64_t x = a[ia(i)], sh = b[ib(i)];
    r[i] = sh >= bits ? 0 : (left ? x << sh : x >> sh);
  }
  out[0] = Tensor::fromVector(out[0].type(), r);
  return ok();
}

//===----------------------------------------------------------------------===//
// Dropout(X, step) {ratio, seed}: training mode. Element i is kept (and scaled by
// 1 / (1 - ratio)) when Philox's uniform number for (seed, step, i) is at least
// ratio. A pure function of its operands and attributes (the counter-based RNG
// needs no state), so every pass may treat it like any other op; the training step
// advances `step` (kDropoutStepName) once per step.
//===----------------------------------------------------------------------===//

/// In inference mode, Dropout passes X through (its mask has no inference form).
std::optional<std::vector<Value *>> dropoutForInference(Graph &, const Node &n,
                                                        const std::vector<Value *> &operands) {
  std::vector<Value *> results(n.numResults(), nullptr);
  results[0] = operands[0];
  return results;
}

llvm::Error verifyDropout(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireType(n, 1, kInt))
    return e;
  if (n.operand(1)->type().numElements() != 1)
    return makeError("the step must have one element");
  float r = n.attrFloat("ratio");
  if (!(r >= 0 && r < 1))
    return errorf("ratio must be in [0, 1), got {0}", r);
  return ok();
}

llvm::Error refDropout(const Node &n, const Inputs &in, Outputs &out) {
  float ratio = n.attrFloat("ratio"), scale = 1.0f / (1.0f - ratio);
  auto seed = static_cast<unsigned long long>(n.attrInt("seed"));
  auto step = static_cast<unsigned long long>(in[1]->getInt(0));
  auto x = in[0]->toVector<float>();
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = philox::uniform(seed, step, i) >= ratio ? x[i] * scale : 0.0f;
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

llvm::Error verifyPRelu(const Node &n) {
  if (auto e = verifySameTyped<kSigned>(n))
    return e;
  auto s = broadcastShapes(n.operand(0)->shape(), n.operand(1)->shape());
  if (!s || *s != n.operand(0)->shape())
    return errorf("slope {0} must broadcast to X {1}", shapeStr(n.operand(1)->shape()),
                  shapeStr(n.operand(0)->shape()));
  return ok();
}

//===----------------------------------------------------------------------===//
// Definitions
//===----------------------------------------------------------------------===//

template <OpKind K>
void binary(OpTable &t, unsigned types, bool boolResult, const char *expr, int maxOperands = 2) {
  t.def(K)
      .cudaExpr(expr)
      .operands(maxOperands == kVariadic ? 1 : 2, maxOperands)
      .fusible(Fusibility::elementwise())
      .fp16(boolResult ? Fp16Policy::Follow : Fp16Policy::Allow)
      .layout(LayoutRule::agnostic())
      .verify(types == kNumeric ? verifySameTyped<kNumeric>
              : types == kBool  ? verifySameTyped<kBool>
              : types == kInt   ? verifySameTyped<kInt>
                                : verifySameTyped<kAny>)
      .infer(boolResult ? inferBroadcastBool : inferBroadcast)
      .reference(refBinary<K>);
}

template <OpKind K> OpBuilder unary(OpTable &t, unsigned types, Fp16Policy fp16, const char *expr) {
  return t.def(K)
      .cudaExpr(expr)
      .operands(1)
      .fusible(Fusibility::elementwise())
      .fp16(fp16)
      .layout(LayoutRule::agnostic())
      .verify(types == kFloat     ? verifyUnary<kFloat>
              : types == kSigned  ? verifyUnary<kSigned>
              : types == kNumeric ? verifyUnary<kNumeric>
              : types == kInt     ? verifyUnary<kInt>
                                  : verifyUnary<kBool>)
      .infer(inferSameAsOperand0)
      .reference(refUnary<K>);
}

//===----------------------------------------------------------------------===//
// Gradient rules (vector-Jacobian products; see dlc/ir/GradBuilder.h)
//===----------------------------------------------------------------------===//

Value *one(GradBuilder &b, const Value *like) {
  return b.scalar(1, like->dtype());
}
Value *zero(GradBuilder &b, const Value *like) {
  return b.scalar(0, like->dtype());
}
Value *x0(const Node &n) {
  return n.operand(0);
}
Value *y0(const Node &n) {
  return n.result(0);
}

llvm::Error gradAdd(GradBuilder &b, const Node &n) {
  for (unsigned i = 0; i < n.numOperands(); ++i)
    b.accumulate(i, b.grad());
  return ok();
}
llvm::Error gradSub(GradBuilder &b, const Node &) {
  b.accumulate(0, b.grad());
  if (b.wants(1))
    b.accumulate(1, b.neg(b.grad()));
  return ok();
}
llvm::Error gradMul(GradBuilder &b, const Node &n) {
  if (b.wants(0))
    b.accumulate(0, b.mul(b.grad(), n.operand(1)));
  if (b.wants(1))
    b.accumulate(1, b.mul(b.grad(), n.operand(0)));
  return ok();
}
llvm::Error gradDiv(GradBuilder &b, const Node &n) {
  if (b.wants(0))
    b.accumulate(0, b.div(b.grad(), n.operand(1)));
  if (b.wants(1)) // d(a/b)/db = -(a/b)/b
    b.accumulate(1, b.neg(b.div(b.mul(b.grad(), y0(n)), n.operand(1))));
  return ok();
}
llvm::Error gradPow(GradBuilder &b, const Node &n) {
  Value *a = n.operand(0), *e = n.operand(1);
  if (b.wants(0)) // e * a^(e-1)
    b.accumulate(0, b.mul(b.grad(), b.mul(e, b.op(OpKind::Pow, {a, b.sub(e, one(b, e))}))));
  if (b.wants(1)) // a^e * ln a
    b.accumulate(1, b.mul(b.grad(), b.mul(y0(n), b.op(OpKind::Log, {a}))));
  return ok();
}
/// Max/Min of two operands: the gradient goes to the operand that was selected
/// (the first one on ties).
template <OpKind Cmp> llvm::Error gradSelectBinary(GradBuilder &b, const Node &n) {
  if (n.numOperands() != 2)
    return makeError("only the two-operand form is differentiable");
  Value *pick0 = b.op(Cmp, {n.operand(0), n.operand(1)});
  b.accumulate(0, b.select(pick0, b.grad(), zero(b, b.grad())));
  b.accumulate(1, b.select(pick0, zero(b, b.grad()), b.grad()));
  return ok();
}
llvm::Error gradNeg(GradBuilder &b, const Node &) {
  return b.accumulate(0, b.neg(b.grad())), ok();
}
llvm::Error gradExp(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.mul(b.grad(), y0(n))), ok();
}
llvm::Error gradLog(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.div(b.grad(), x0(n))), ok();
}
llvm::Error gradSqrt(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.div(b.scale(b.grad(), 0.5), y0(n))), ok();
}
llvm::Error gradReciprocal(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.neg(b.mul(b.grad(), b.mul(y0(n), y0(n))))), ok();
}
llvm::Error gradTanh(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.mul(b.grad(), b.sub(one(b, y0(n)), b.mul(y0(n), y0(n))))), ok();
}
llvm::Error gradSigmoid(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.mul(b.grad(), b.mul(y0(n), b.sub(one(b, y0(n)), y0(n))))), ok();
}
llvm::Error gradRelu(GradBuilder &b, const Node &n) {
  Value *g = b.grad();
  return b.accumulate(0, b.select(b.op(OpKind::Greater, {x0(n), zero(b, g)}), g, zero(b, g))), ok();
}
llvm::Error gradLeakyRelu(GradBuilder &b, const Node &n) {
  Value *g = b.grad();
  Value *pos = b.op(OpKind::Greater, {x0(n), zero(b, g)});
  return b.accumulate(0, b.select(pos, g, b.scale(g, n.attrFloat("alpha")))), ok();
}
llvm::Error gradElu(GradBuilder &b, const Node &n) {
  // x > 0: 1; else alpha * e^x = y + alpha
  Value *g = b.grad();
  Value *pos = b.op(OpKind::Greater, {x0(n), zero(b, g)});
  Value *neg = b.mul(g, b.add(y0(n), b.scalar(n.attrFloat("alpha"), g->dtype())));
  return b.accumulate(0, b.select(pos, g, neg)), ok();
}
llvm::Error gradPRelu(GradBuilder &b, const Node &n) {
  Value *g = b.grad(), *x = x0(n);
  Value *pos = b.op(OpKind::Greater, {x, zero(b, g)});
  if (b.wants(0))
    b.accumulate(0, b.select(pos, g, b.mul(g, n.operand(1))));
  if (b.wants(1))
    b.accumulate(1, b.select(pos, zero(b, g), b.mul(g, x)));
  return ok();
}
llvm::Error gradAbs(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.mul(b.grad(), b.op(OpKind::Sign, {x0(n)}))), ok();
}
llvm::Error gradErf(GradBuilder &b, const Node &n) {
  // 2/sqrt(pi) * e^(-x^2)
  Value *x = x0(n);
  Value *d = b.scale(b.op(OpKind::Exp, {b.neg(b.mul(x, x))}), 2.0 / std::sqrt(M_PI));
  return b.accumulate(0, b.mul(b.grad(), d)), ok();
}
llvm::Error gradGelu(GradBuilder &b, const Node &n) {
  Value *x = x0(n), *d;
  auto c = [&](double v) { return b.scalar(v, x->dtype()); };
  if (n.attrString("approximate") == "tanh") {
    // u = k(x + 0.044715 x^3), t = tanh u: 0.5(1 + t) + 0.5 x (1 - t^2) k (1 + 3*0.044715 x^2)
    const double k = kGeluTanhScale, a = kGeluTanhCubic;
    Value *x2 = b.mul(x, x);
    Value *t = b.op(OpKind::Tanh, {b.scale(b.add(x, b.scale(b.mul(x2, x), a)), k)});
    Value *left = b.scale(b.add(c(1), t), 0.5);
    Value *dt = b.mul(b.sub(c(1), b.mul(t, t)), b.scale(b.add(c(1), b.scale(x2, 3 * a)), k));
    d = b.add(left, b.scale(b.mul(x, dt), 0.5));
  } else {
    // Phi(x) + x phi(x)
    Value *cdf = b.scale(b.add(c(1), b.op(OpKind::Erf, {b.scale(x, M_SQRT1_2)})), 0.5);
    Value *pdf =
        b.scale(b.op(OpKind::Exp, {b.scale(b.mul(x, x), -0.5)}), 1.0 / std::sqrt(2 * M_PI));
    d = b.add(cdf, b.mul(x, pdf));
  }
  return b.accumulate(0, b.mul(b.grad(), d)), ok();
}
llvm::Error gradSoftplus(GradBuilder &b, const Node &n) {
  return b.accumulate(0, b.mul(b.grad(), b.op(OpKind::Sigmoid, {x0(n)}))), ok();
}
llvm::Error gradHardSigmoid(GradBuilder &b, const Node &n) {
  Value *g = b.grad(), *x = x0(n);
  float alpha = n.attrFloat("alpha"), beta = n.attrFloat("beta");
  // alpha inside the linear segment 0 < alpha x + beta < 1
  Value *lin = b.add(b.scale(x, alpha), b.scalar(beta, x->dtype()));
  Value *in = b.op(OpKind::And, {b.op(OpKind::Greater, {lin, zero(b, x)}),
                                 b.op(OpKind::Less, {lin, one(b, x)})});
  return b.accumulate(0, b.select(in, b.scale(g, alpha), zero(b, g))), ok();
}
llvm::Error gradHardSwish(GradBuilder &b, const Node &n) {
  // x < -3: 0; x > 3: 1; else (2x + 3) / 6
  Value *g = b.grad(), *x = x0(n);
  auto c = [&](double v) { return b.scalar(v, x->dtype()); };
  Value *mid = b.mul(g, b.add(b.scale(x, 1.0 / 3), c(0.5)));
  Value *hi = b.select(b.op(OpKind::Greater, {x, c(3)}), g, mid);
  return b.accumulate(0, b.select(b.op(OpKind::Less, {x, c(-3)}), zero(b, g), hi)), ok();
}
llvm::Error gradClip(GradBuilder &b, const Node &n) {
  // The gradient passes where the input lies inside [min, max].
  Value *g = b.grad(), *x = x0(n), *in = nullptr;
  if (n.operand(1))
    in = b.op(OpKind::GreaterOrEqual, {x, n.operand(1)});
  if (n.operand(2)) {
    Value *le = b.op(OpKind::LessOrEqual, {x, n.operand(2)});
    in = in ? b.op(OpKind::And, {in, le}) : le;
  }
  return b.accumulate(0, in ? b.select(in, g, zero(b, g)) : g), ok();
}
/// The same mask and scale applied to the gradient: the same op on dY.
llvm::Error gradDropout(GradBuilder &b, const Node &n) {
  b.accumulate(0, b.op(OpKind::Dropout, {b.grad(), n.operand(1)}, n.attrs()));
  return ok();
}

llvm::Error gradWhere(GradBuilder &b, const Node &n) {
  Value *g = b.grad();
  if (b.wants(1))
    b.accumulate(1, b.select(n.operand(0), g, zero(b, g)));
  if (b.wants(2))
    b.accumulate(2, b.select(n.operand(0), zero(b, g), g));
  return ok();
}

} // namespace

void defineElementwiseOps(OpTable &t) {
  using FP = Fp16Policy;
  binary<OpKind::Add>(t, kNumeric, false, "$0 + $1");
  binary<OpKind::Sub>(t, kNumeric, false, "$0 - $1");
  binary<OpKind::Mul>(t, kNumeric, false, "$0 * $1");
  binary<OpKind::Div>(t, kNumeric, false, "dlc::div_($0, $1)");
  binary<OpKind::Min>(t, kNumeric, false, "dlc::minNan($0, $1)", kVariadic);
  binary<OpKind::Max>(t, kNumeric, false, "dlc::maxNan($0, $1)", kVariadic);
  binary<OpKind::Equal>(t, kAny, true, "($0 == $1)");
  binary<OpKind::Less>(t, kNumeric, true, "($0 < $1)");
  binary<OpKind::Greater>(t, kNumeric, true, "($0 > $1)");
  binary<OpKind::And>(t, kBool, true, "($0 && $1)");
  binary<OpKind::Or>(t, kBool, true, "($0 || $1)");
  binary<OpKind::Xor>(t, kBool, true, "($0 != $1)");
  binary<OpKind::BitwiseAnd>(t, kInt, false, "($T)($0 & $1)");
  binary<OpKind::BitwiseOr>(t, kInt, false, "($T)($0 | $1)");
  binary<OpKind::BitwiseXor>(t, kInt, false, "($T)($0 ^ $1)");
  t[OpKind::BitwiseAnd].fp16 = t[OpKind::BitwiseOr].fp16 = t[OpKind::BitwiseXor].fp16 =
      FP::Follow; // integers only
  binary<OpKind::GreaterOrEqual>(t, kNumeric, true, "($0 >= $1)");
  binary<OpKind::LessOrEqual>(t, kNumeric, true, "($0 <= $1)");
  binary<OpKind::PRelu>(t, kNumeric, false, "($0 < ($T)0 ? $0 * $1 : $0)");
  t[OpKind::PRelu].verify = verifyPRelu;
  t.def(OpKind::Mod)
      .cudaExpr("dlc::mod_($0, $1, ${fmod})")
      .operands(2)
      .attr("fmod", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::elementwise())
      .fp16(FP::Deny)
      .layout(LayoutRule::agnostic())
      .verify(verifyMod)
      .infer(inferBroadcast)
      .reference(refMod);
  t.def(OpKind::BitShift)
      .cudaExpr("dlc::shift_($0, $1, ${direction})")
      .operands(2)
      .attr("direction", AttrKind::String)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Follow)
      .layout(LayoutRule::agnostic())
      .verify(verifyBitShift)
      .infer(inferBroadcast)
      .reference(refBitShift);
  t.def(OpKind::Pow)
      .cudaExpr("dlc::pow_($0, $1)")
      .operands(2)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Deny, fp16Pow)
      .layout(LayoutRule::agnostic())
      .verify(verifyPow)
      .infer(inferBroadcast)
      .reference(refPow);

  unary<OpKind::Sqrt>(t, kFloat, FP::Allow, "dlc::sqrt_($0)");
  unary<OpKind::Exp>(t, kFloat, FP::Deny, "dlc::exp_($0)");
  unary<OpKind::Log>(t, kFloat, FP::Deny, "dlc::log_($0)");
  unary<OpKind::Neg>(t, kSigned, FP::Allow, "($T)0 - $0");
  unary<OpKind::Abs>(t, kNumeric, FP::Allow, "($0 < ($T)0 ? ($T)0 - $0 : $0)");
  unary<OpKind::Reciprocal>(t, kFloat, FP::Allow, "($T)1 / $0");
  unary<OpKind::Erf>(t, kFloat, FP::Allow, "dlc::erf_($0)");
  unary<OpKind::Tanh>(t, kFloat, FP::Allow, "dlc::tanh_($0)");
  unary<OpKind::Sigmoid>(t, kFloat, FP::Allow, "($T)1 / (($T)1 + dlc::exp_(-$0))");
  unary<OpKind::Relu>(t, kSigned, FP::Allow, "($0 > ($T)0 ? $0 : ($T)0)");
  unary<OpKind::Not>(t, kBool, FP::Follow, "!$0");
  unary<OpKind::BitwiseNot>(t, kInt, FP::Follow, "($T)(~$0)");
  unary<OpKind::LeakyRelu>(t, kFloat, FP::Allow, "($0 < ($T)0 ? ($T)${alpha} * $0 : $0)")
      .attr("alpha", AttrKind::Float, 0.01f);
  unary<OpKind::Elu>(t, kFloat, FP::Allow,
                     "($0 < ($T)0 ? ($T)${alpha} * (dlc::exp_($0) - ($T)1) : $0)")
      .attr("alpha", AttrKind::Float, 1.0f);
  unary<OpKind::Gelu>(t, kFloat, FP::Allow, "dlc::gelu_($0, ${approximate})")
      .attr("approximate", AttrKind::String, "none");
  unary<OpKind::HardSigmoid>(
      t, kFloat, FP::Allow,
      "dlc::stdmax(($T)0, dlc::stdmin(($T)1, ($T)${alpha} * $0 + ($T)${beta}))")
      .attr("alpha", AttrKind::Float, 0.2f)
      .attr("beta", AttrKind::Float, 0.5f);
  unary<OpKind::HardSwish>(t, kFloat, FP::Allow,
                           "$0 * dlc::stdmax(($T)0, dlc::stdmin(($T)1, $0 / ($T)6 + ($T)0.5))");
  unary<OpKind::Sign>(t, kNumeric, FP::Allow,
                      "($0 > ($T)0 ? ($T)1 : ($0 < ($T)0 ? ($T)0 - ($T)1 : ($T)0))");
  unary<OpKind::Floor>(t, kFloat, FP::Allow, "dlc::floor_($0)");
  unary<OpKind::Ceil>(t, kFloat, FP::Allow, "dlc::ceil_($0)");
  unary<OpKind::Round>(t, kFloat, FP::Allow, "dlc::rint_($0)");
  unary<OpKind::Sin>(t, kFloat, FP::Deny, "dlc::sin_($0)");
  unary<OpKind::Cos>(t, kFloat, FP::Deny, "dlc::cos_($0)");
  unary<OpKind::Tan>(t, kFloat, FP::Deny, "dlc::tan_($0)");
  unary<OpKind::Asin>(t, kFloat, FP::Deny, "dlc::asin_($0)");
  unary<OpKind::Acos>(t, kFloat, FP::Deny, "dlc::acos_($0)");
  unary<OpKind::Atan>(t, kFloat, FP::Deny, "dlc::atan_($0)");
  unary<OpKind::Sinh>(t, kFloat, FP::Deny, "dlc::sinh_($0)");
  unary<OpKind::Cosh>(t, kFloat, FP::Deny, "dlc::cosh_($0)");
  unary<OpKind::Asinh>(t, kFloat, FP::Deny, "dlc::asinh_($0)");
  unary<OpKind::Acosh>(t, kFloat, FP::Deny, "dlc::acosh_($0)");
  unary<OpKind::Atanh>(t, kFloat, FP::Deny, "dlc::atanh_($0)");
  unary<OpKind::Softplus>(t, kFloat, FP::Allow, "dlc::softplus_($0)");
  unary<OpKind::Softsign>(t, kFloat, FP::Allow, "$0 / (($T)1 + dlc::fabs_($0))");
  unary<OpKind::Mish>(t, kFloat, FP::Allow, "$0 * dlc::tanh_(dlc::softplus_($0))");
  unary<OpKind::Selu>(t, kFloat, FP::Allow,
                      "($0 > ($T)0 ? ($T)${gamma} * $0 : ($T)${gamma} * (($T)${alpha} * "
                      "dlc::exp_($0) - ($T)${alpha}))")
      .attr("alpha", AttrKind::Float, 1.67326319217681884765625f)
      .attr("gamma", AttrKind::Float, 1.05070102214813232421875f);
  unary<OpKind::Celu>(t, kFloat, FP::Allow,
                      "dlc::stdmax(($T)0, $0) + dlc::stdmin(($T)0, ($T)${alpha} * (dlc::exp_($0 / "
                      "($T)${alpha}) - ($T)1))")
      .attr("alpha", AttrKind::Float, 1.0f);
  unary<OpKind::Shrink>(t, kNumeric, FP::Allow,
                        "($0 < ($T)(-${lambd}) ? ($T)($0 + ($T)${bias}) : ($0 > ($T)${lambd} ? "
                        "($T)($0 - ($T)${bias}) : ($T)0))")
      .attr("bias", AttrKind::Float, 0.0f)
      .attr("lambd", AttrKind::Float, 0.5f);
  unary<OpKind::ThresholdedRelu>(t, kFloat, FP::Allow, "($0 > ($T)${alpha} ? $0 : ($T)0)")
      .attr("alpha", AttrKind::Float, 1.0f);
  unary<OpKind::IsNaN>(t, kFloat, FP::Follow, "dlc::isnan_($0)")
      .infer(inferSameShapeBool)
      .reference(refPredicate<OpKind::IsNaN>);
  unary<OpKind::IsInf>(
      t, kFloat, FP::Follow,
      "(dlc::isinf_($0) && (($0 > 0 && ${detect_positive}) || ($0 < 0 && ${detect_negative})))")
      .attr("detect_negative", AttrKind::Int, int64_t{1})
      .attr("detect_positive", AttrKind::Int, int64_t{1})
      .infer(inferSameShapeBool)
      .reference(refPredicate<OpKind::IsInf>);

  t.def(OpKind::Clip)
      .cudaExpr("dlc::clip_($0, $1?, $2?)")
      .operands(1, 3)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Allow)
      .layout(LayoutRule::agnostic())
      .verify(verifyClip)
      .infer(inferSameAsOperand0)
      .reference(refClip);
  t.def(OpKind::Where)
      .cudaExpr("($0 ? $1 : $2)")
      .selects()
      .operands(3)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Follow)
      .layout(LayoutRule::agnostic())
      .verify(verifyWhere)
      .infer(inferWhere)
      .reference(refWhere);
  t.def(OpKind::Dropout)
      .cudaExpr("dlc::dropout_($0, $1, ${seed}, ${ratio}, $i)")
      .operands(2)
      .attr("ratio", AttrKind::Float, 0.5f)
      .attr("seed", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::elementwise())
      .fp16(FP::Allow)
      .layout(LayoutRule::fixed()) // the mask follows the element order
      .verify(verifyDropout)
      .infer(inferSameAsOperand0)
      .reference(refDropout)
      .gradient(gradDropout)
      .modes(nullptr, dropoutForInference);
  defineConversionOps(t);

  t[OpKind::Add].neutral = OpDef::Neutral{0.0, true};
  t[OpKind::Sub].neutral = OpDef::Neutral{0.0, false};
  t[OpKind::Mul].neutral = OpDef::Neutral{1.0, true};
  t[OpKind::Div].neutral = OpDef::Neutral{1.0, false};
  // What a GEMM library's epilogue applies of them (FusionRules.h: matchGemmEpilogue).
  t[OpKind::Add].fusibility.gemmEpilogue = GemmEpilogueOp::Add;
  t[OpKind::Relu].fusibility.gemmEpilogue = GemmEpilogueOp::Relu;
  t[OpKind::Gelu].fusibility.gemmEpilogue = GemmEpilogueOp::GeluTanh;
  t[OpKind::Gelu].fusibility.refine = [](const Node &n) {
    Fusibility f = n.def().fusibility;
    if (n.attrString("approximate") != "tanh")
      f.gemmEpilogue = GemmEpilogueOp::None; // cuBLASLt's GELU is the tanh form
    return f;
  };

  for (auto [k, f] : std::initializer_list<std::pair<OpKind, GradFn>>{
           {OpKind::Add, gradAdd},
           {OpKind::Sub, gradSub},
           {OpKind::Mul, gradMul},
           {OpKind::Div, gradDiv},
           {OpKind::Pow, gradPow},
           {OpKind::Max, gradSelectBinary<OpKind::GreaterOrEqual>},
           {OpKind::Min, gradSelectBinary<OpKind::LessOrEqual>},
           {OpKind::Neg, gradNeg},
           {OpKind::Exp, gradExp},
           {OpKind::Log, gradLog},
           {OpKind::Sqrt, gradSqrt},
           {OpKind::Reciprocal, gradReciprocal},
           {OpKind::Tanh, gradTanh},
           {OpKind::Sigmoid, gradSigmoid},
           {OpKind::Relu, gradRelu},
           {OpKind::LeakyRelu, gradLeakyRelu},
           {OpKind::Elu, gradElu},
           {OpKind::PRelu, gradPRelu},
           {OpKind::Abs, gradAbs},
           {OpKind::Erf, gradErf},
           {OpKind::Gelu, gradGelu},
           {OpKind::Softplus, gradSoftplus},
           {OpKind::HardSigmoid, gradHardSigmoid},
           {OpKind::HardSwish, gradHardSwish},
           {OpKind::Clip, gradClip},
           {OpKind::Where, gradWhere},
           {OpKind::Cast, gradPassThrough},
       })
    t[k].gradient = f;
}

} // namespace dlc::ir

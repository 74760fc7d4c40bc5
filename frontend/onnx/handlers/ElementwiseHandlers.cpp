//===- ElementwiseHandlers.cpp - ONNX element-wise ops ---------------------===//
#include "Common.h"
#include "dlc/ir/GradBuilder.h"

namespace dlc::frontend {
namespace {

using namespace ir;

llvm::Error importClip(NodeImporter &ni) {
  std::vector<Value *> ops{ni.input(0)};
  if (ni.opset() < 11) { // min/max were attributes
    DType dt = ni.input(0)->dtype();
    ops.push_back(ni.hasAttr("min") ? ni.scalar(dt, ni.attrFloat("min", 0)) : nullptr);
    ops.push_back(ni.hasAttr("max") ? ni.scalar(dt, ni.attrFloat("max", 0)) : nullptr);
    while (!ops.empty() && !ops.back())
      ops.pop_back();
  } else {
    ops = allInputs(ni);
  }
  DLC_TRY(r, ni.op(OpKind::Clip, ops));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// Cast and CastLike: to float8 saturating (saturate=1, the default; IR Cast to float8
/// saturates), other conversions as C casts them.
llvm::Error castTo(NodeImporter &ni, DType to) {
  if (isFloat8(to) && ni.attrInt("saturate", 1) == 0)
    return ni.unsupported("a cast to float8 without saturation (saturate=0)");
  DLC_TRY(r, ni.op(OpKind::Cast, {ni.input(0)}, {{"to", Attribute(std::string(dtypeName(to)))}}));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

llvm::Error importCast(NodeImporter &ni) {
  int64_t to = ni.attrInt("to", 0);
  auto dt = dtypeFromOnnx(static_cast<int32_t>(to));
  if (!dt)
    return ni.unsupported("cast to " + onnxTypeName(static_cast<int32_t>(to)));
  return castTo(ni, *dt);
}

llvm::Error importCastLike(NodeImporter &ni) {
  return castTo(ni, ni.input(1)->dtype());
}

llvm::Error importIdentity(NodeImporter &ni) {
  ni.setOutput(0, ni.input(0));
  return llvm::Error::success();
}

llvm::Error importDropout(NodeImporter &ni) {
  if (ni.hasInput(2) && !ni.constInput(2))
    return ni.error("training_mode must be a compile-time constant" + ni.bindHint(2));
  if (const Tensor *tm = ni.constInput(2))
    if (tm->getInt(0) != 0) {
      const Tensor *ratio = ni.hasInput(1) ? ni.constInput(1) : nullptr;
      if (ni.hasInput(1) && !ratio)
        return ni.error("ratio must be a compile-time constant" + ni.bindHint(1));
      double r = ratio ? ratio->getDouble(0) : 0.5;
      if (r != 0) {
        // Random masks only make sense in a training step (dlc compile --train).
        if (!ni.importer().options().initializersAsVariables)
          return ni.unsupported(
              "Dropout in training mode (random masks) outside `dlc compile --train`");
        ir::Graph &g = ni.graph();
        Value *step = g.findValue(ir::kDropoutStepName);
        if (!step)
          step = g.addParameter(ir::kDropoutStepName, Tensor(TensorType(DType::I64, {})), false);
        // Each Dropout draws its own stream: the seed is its position among them.
        int64_t seed = 0;
        for (const ir::Node &n : g.nodes())
          seed += n.kind() == OpKind::Dropout;
        AttrMap attrs{{"ratio", static_cast<float>(r)}, {"seed", seed + 1}};
        DLC_TRY(y, ni.op(OpKind::Dropout, {ni.input(0), step}, attrs));
        ni.setOutput(0, y);
        if (ni.wantsOutput(1)) { // the mask: the same draw on ones, nonzero where kept
          Value *x = ni.input(0);
          Tensor one(TensorType(x->dtype(), {}));
          storeElement<float>(x->dtype(), one.mutableRaw(), 0, 1.0f);
          DLC_TRY(ones, ni.op(OpKind::Expand, {g.addConstant("", one)},
                              {{"shape", Attribute(std::vector<int64_t>(x->shape()))}}));
          DLC_TRY(kept, ni.op(OpKind::Dropout, {ones, step}, attrs));
          Tensor zero(TensorType(x->dtype(), {}));
          DLC_TRY(mask, ni.op(OpKind::Greater, {kept, g.addConstant("", zero)}));
          ni.setOutput(1, mask);
        }
        return llvm::Error::success();
      }
    }
  ni.setOutput(0, ni.input(0));
  if (ni.wantsOutput(1)) { // the mask of an inference-mode dropout keeps everything
    Tensor one(TensorType(DType::Bool, {1}));
    storeElement<bool>(DType::Bool, one.mutableRaw(), 0, true);
    DLC_TRY(mask, ni.op(OpKind::ConstantOfShape, {},
                        {{"shape", Attribute(ni.input(0)->shape())}, {"value", Attribute(one)}}));
    ni.setOutput(1, mask);
  }
  return llvm::Error::success();
}

/// PRelu: a 1-D slope with one value per channel (opset 6 semantics, kept by the
/// version converter) applies along axis 1.
llvm::Error importPRelu(NodeImporter &ni) {
  Value *x = ni.input(0), *slope = ni.input(1);
  if (slope->rank() == 1 && x->rank() > 2 && slope->shape()[0] == x->shape()[1] &&
      slope->shape()[0] != x->shape().back()) {
    Shape s(x->rank() - 1, 1);
    s[0] = slope->shape()[0];
    DLC_TRY(r, ni.op(OpKind::Reshape, {slope}, {{"shape", Attribute(s)}}));
    slope = r;
  }
  DLC_TRY(y, ni.op(OpKind::PRelu, {x, slope}));
  ni.setOutput(0, y);
  return llvm::Error::success();
}

/// Sum and Mean: a chain of broadcasting Adds (divided by the count for Mean).
llvm::Error importSumMean(NodeImporter &ni) {
  auto ins = allInputs(ni);
  if (ins.empty())
    return ni.error("needs at least one input");
  Value *acc = ins[0];
  for (size_t i = 1; i < ins.size(); ++i) {
    DLC_TRY(s, ni.op(OpKind::Add, {acc, ins[i]}));
    acc = s;
  }
  if (ni.opType() == "Mean" && ins.size() > 1) {
    DLC_TRY(m, ni.op(OpKind::Div, {acc, ni.scalar(acc->dtype(), static_cast<double>(ins.size()))}));
    acc = m;
  }
  if (ins.size() == 1) { // a copy; keep a node so the output has its own value
    DLC_TRY(c, ni.op(OpKind::Identity, {acc}));
    acc = c;
  }
  ni.setOutput(0, acc);
  return llvm::Error::success();
}

} // namespace

void registerElementwiseHandlers(std::vector<HandlerEntry> &t) {
#define DIRECT(NAME)                                                                               \
  t.push_back({#NAME, 7, kMaxOpset, direct<OpKind::NAME>, "",                                      \
               static_cast<int>(opDef(OpKind::NAME).minOperands)})
  DIRECT(Add);
  DIRECT(Sub);
  DIRECT(Mul);
  DIRECT(Div);
  DIRECT(Pow);
  DIRECT(Min);
  DIRECT(Max);
  DIRECT(Sqrt);
  DIRECT(Exp);
  DIRECT(Log);
  DIRECT(Neg);
  DIRECT(Abs);
  DIRECT(Reciprocal);
  DIRECT(Erf);
  DIRECT(Tanh);
  DIRECT(Sigmoid);
  DIRECT(Relu);
  DIRECT(LeakyRelu);
  DIRECT(Elu);
  DIRECT(Gelu);
  DIRECT(HardSigmoid);
  DIRECT(HardSwish);
  DIRECT(Where);
  DIRECT(Equal);
  DIRECT(Less);
  DIRECT(Greater);
  DIRECT(LessOrEqual);
  DIRECT(GreaterOrEqual);
  DIRECT(Not);
  DIRECT(And);
  DIRECT(Or);
  DIRECT(Xor);
  DIRECT(Sign);
  DIRECT(Floor);
  DIRECT(Ceil);
  DIRECT(Round);
  DIRECT(Sin);
  DIRECT(Cos);
  DIRECT(Tan);
  DIRECT(Asin);
  DIRECT(Acos);
  DIRECT(Atan);
  DIRECT(Sinh);
  DIRECT(Cosh);
  DIRECT(Asinh);
  DIRECT(Acosh);
  DIRECT(Atanh);
  DIRECT(Softplus);
  DIRECT(Softsign);
  DIRECT(Mish);
  DIRECT(Selu);
  DIRECT(Celu);
  DIRECT(Shrink);
  DIRECT(ThresholdedRelu);
  DIRECT(IsInf);
  DIRECT(IsNaN);
  DIRECT(Mod);
  DIRECT(BitShift);
  DIRECT(BitwiseAnd);
  DIRECT(BitwiseOr);
  DIRECT(BitwiseXor);
  DIRECT(BitwiseNot);
#undef DIRECT
  t.push_back({"PRelu", 7, kMaxOpset, importPRelu});
  t.push_back({"Clip", 6, kMaxOpset, importClip});
  t.push_back({"Cast", 6, kMaxOpset, importCast});
  t.push_back({"CastLike", 15, kMaxOpset, importCastLike});
  t.push_back({"Identity", 1, kMaxOpset, importIdentity});
  t.push_back({"Dropout", 7, kMaxOpset, importDropout});
  t.push_back({"Sum", 6, kMaxOpset, importSumMean});
  t.push_back({"Mean", 6, kMaxOpset, importSumMean});
}

} // namespace dlc::frontend

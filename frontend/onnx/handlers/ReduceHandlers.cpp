//===- ReduceHandlers.cpp - ONNX reductions, softmax family, losses --------===//
#include "Common.h"

namespace dlc::frontend {
namespace {

using namespace ir;

/// Axes of a Reduce* node: an attribute before the opset where they became an input
/// (13 for ReduceSum, 18 for the others).
llvm::Expected<AttrMap> reduceAttrs(NodeImporter &ni) {
  int inputSince = ni.opType() == "ReduceSum" ? 13 : 18;
  std::vector<int64_t> axes;
  int64_t noop = 0;
  if (ni.opset() < inputSince) {
    axes = ni.attrInts("axes");
  } else {
    if (ni.hasInput(1)) {
      auto a = ni.constInts(1, "axes");
      if (!a)
        return a.takeError();
      axes = *a;
    }
    noop = ni.attrInt("noop_with_empty_axes", 0);
  }
  AttrMap m{{"keepdims", Attribute(ni.attrInt("keepdims", 1))}};
  if (!axes.empty())
    m["axes"] = Attribute(axes);
  if (noop)
    m["noop_with_empty_axes"] = Attribute(noop);
  return m;
}

template <OpKind K> llvm::Error importReduce(NodeImporter &ni) {
  DLC_TRY(attrs, reduceAttrs(ni));
  Value *x = ni.input(0);
  // Opset 20: ReduceMax/ReduceMin of bool (any/all), on 0/1 bytes.
  bool boolean = (K == OpKind::ReduceMax || K == OpKind::ReduceMin) && x &&
                 x->dtype() == DType::Bool && ni.opset() >= 20;
  if (boolean) {
    DLC_TRY(u8, ni.op(OpKind::Cast, {x}, {{"to", Attribute(std::string("u8"))}}));
    x = u8;
  }
  DLC_TRY(r, ni.op(K, {x}, attrs));
  Value *out = r;
  if (boolean) {
    DLC_TRY(b, ni.op(OpKind::Cast, {r}, {{"to", Attribute(std::string("bool"))}}));
    out = b;
  }
  ni.setOutput(0, out);
  return llvm::Error::success();
}

/// ReduceL1/L2/SumSquare/LogSum/LogSumExp as compositions (their ONNX function bodies).
llvm::Error importReduceComposite(NodeImporter &ni) {
  DLC_TRY(attrs, reduceAttrs(ni));
  Value *x = ni.input(0);
  const std::string &op = ni.opType();
  Value *r = nullptr;
  if (op == "ReduceL1") {
    DLC_TRY(a, ni.op(OpKind::Abs, {x}));
    DLC_TRY(s, ni.op(OpKind::ReduceSum, {a}, attrs));
    r = s;
  } else if (op == "ReduceL2" || op == "ReduceSumSquare") {
    DLC_TRY(sq, ni.op(OpKind::Mul, {x, x}));
    DLC_TRY(s, ni.op(OpKind::ReduceSum, {sq}, attrs));
    r = s;
    if (op == "ReduceL2") {
      DLC_TRY(rt, ni.op(OpKind::Sqrt, {s}));
      r = rt;
    }
  } else if (op == "ReduceLogSum") {
    DLC_TRY(s, ni.op(OpKind::ReduceSum, {x}, attrs));
    DLC_TRY(l, ni.op(OpKind::Log, {s}));
    r = l;
  } else { // ReduceLogSumExp, stabilized: m + log(sum(exp(x - m)))
    AttrMap keep = attrs;
    keep["keepdims"] = Attribute(int64_t{1});
    DLC_TRY(m, ni.op(OpKind::ReduceMax, {x}, keep));
    DLC_TRY(d, ni.op(OpKind::Sub, {x, m}));
    DLC_TRY(e, ni.op(OpKind::Exp, {d}));
    DLC_TRY(s, ni.op(OpKind::ReduceSum, {e}, attrs));
    DLC_TRY(l, ni.op(OpKind::Log, {s}));
    Value *mm = m;
    if (attrs["keepdims"].i() == 0) {
      DLC_TRY(sq, ni.op(OpKind::Reshape, {m}, {{"shape", Attribute(l->shape())}}));
      mm = sq;
    }
    DLC_TRY(sum, ni.op(OpKind::Add, {l, mm}));
    r = sum;
  }
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// Softmax, LogSoftmax, Hardmax. Before opset 13 they work on the input flattened to
/// 2-D at `axis` (default 1); that becomes Reshape -> op(axis = 1) -> Reshape.
template <OpKind K> llvm::Error importSoftmaxLike(NodeImporter &ni) {
  Value *x = ni.input(0);
  if (ni.opset() >= 13) {
    DLC_TRY(r, ni.op(K, {x}, {{"axis", Attribute(ni.attrInt("axis", -1))}}));
    ni.setOutput(0, r);
    return llvm::Error::success();
  }
  int64_t rank = x->rank(), axis = ni.attrInt("axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return ni.error("axis out of range");
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? a : b) *= x->shape()[i];
  DLC_TRY(flat, ni.op(OpKind::Reshape, {x}, {{"shape", Attribute(Shape{a, b})}}));
  DLC_TRY(s, ni.op(K, {flat}, {{"axis", Attribute(int64_t{1})}}));
  DLC_TRY(r, ni.op(OpKind::Reshape, {s}, {{"shape", Attribute(x->shape())}}));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

llvm::Error importTopK(NodeImporter &ni) {
  int64_t k;
  if (ni.opset() < 10) {
    k = ni.attrInt("k", 0);
  } else {
    DLC_TRY(kv, ni.constInts(1, "K"));
    if (kv.size() != 1)
      return ni.error("K must have one element");
    k = kv[0];
  }
  AttrMap a{{"k", Attribute(k)},
            {"axis", Attribute(ni.attrInt("axis", -1))},
            {"largest", Attribute(ni.attrInt("largest", 1))},
            {"sorted", Attribute(ni.attrInt("sorted", 1))}};
  DLC_TRY(r, ni.opMulti(OpKind::TopK, {ni.input(0)}, a, 2));
  ni.setOutput(0, r[0]);
  ni.setOutput(1, r[1]);
  return llvm::Error::success();
}

llvm::Error importCumSum(NodeImporter &ni) {
  DLC_TRY(axis, ni.constInts(1, "axis"));
  if (axis.size() != 1)
    return ni.error("axis must have one element");
  DLC_TRY(r, ni.op(OpKind::CumSum, {ni.input(0)},
                   {{"axis", Attribute(axis[0])},
                    {"exclusive", Attribute(ni.attrInt("exclusive", 0))},
                    {"reverse", Attribute(ni.attrInt("reverse", 0))}}));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

llvm::Error importNLL(NodeImporter &ni) {
  auto attrs = ni.copyAttrs(OpKind::NegativeLogLikelihoodLoss);
  if (!attrs)
    return attrs.takeError();
  DLC_TRY(r, ni.op(OpKind::NegativeLogLikelihoodLoss, allInputs(ni), std::move(*attrs)));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// SoftmaxCrossEntropyLoss = LogSoftmax over the class axis, then NLL.
llvm::Error importSCE(NodeImporter &ni) {
  auto attrs = ni.copyAttrs(OpKind::NegativeLogLikelihoodLoss);
  if (!attrs)
    return attrs.takeError();
  DLC_TRY(logp, ni.op(OpKind::LogSoftmax, {ni.input(0)}, {{"axis", Attribute(int64_t{1})}}));
  std::vector<Value *> ops{logp, ni.input(1)};
  if (ni.hasInput(2))
    ops.push_back(ni.input(2));
  DLC_TRY(loss, ni.op(OpKind::NegativeLogLikelihoodLoss, ops, std::move(*attrs)));
  ni.setOutput(0, loss);
  ni.setOutput(1, logp);
  return llvm::Error::success();
}

} // namespace

void registerReduceHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"ReduceMean", 1, kMaxOpset, importReduce<OpKind::ReduceMean>});
  t.push_back({"ReduceSum", 1, kMaxOpset, importReduce<OpKind::ReduceSum>});
  t.push_back({"ReduceMax", 1, kMaxOpset, importReduce<OpKind::ReduceMax>});
  t.push_back({"ReduceMin", 1, kMaxOpset, importReduce<OpKind::ReduceMin>});
  t.push_back({"ReduceProd", 1, kMaxOpset, importReduce<OpKind::ReduceProd>});
  for (const char *op :
       {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    t.push_back({op, 1, kMaxOpset, importReduceComposite});
  t.push_back({"Softmax", 1, kMaxOpset, importSoftmaxLike<OpKind::Softmax>});
  t.push_back({"LogSoftmax", 1, kMaxOpset, importSoftmaxLike<OpKind::LogSoftmax>});
  t.push_back({"Hardmax", 1, kMaxOpset, importSoftmaxLike<OpKind::Hardmax>});
  t.push_back({"ArgMax", 1, kMaxOpset, direct<OpKind::ArgMax>});
  t.push_back({"ArgMin", 1, kMaxOpset, direct<OpKind::ArgMin>});
  t.push_back({"TopK", 1, kMaxOpset, importTopK});
  t.push_back({"CumSum", 11, kMaxOpset, importCumSum});
  t.push_back({"NegativeLogLikelihoodLoss", 12, kMaxOpset, importNLL});
  t.push_back({"SoftmaxCrossEntropyLoss", 12, kMaxOpset, importSCE});
}

} // namespace dlc::frontend

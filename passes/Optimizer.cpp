//===- Optimizer.cpp - The optimizer's step of every parameter -------------===//
//
// `optimizer` consumes the gradient outputs (grad.NAME) and appends, per trainable
// parameter, the update of the parameter and of its optimizer state (momentum,
// Adam's moments) as graph updates; Adam's bias corrections come from a step-count
// state variable. With FP16's loss scaling (kLossScaleName present), the gradients
// are unscaled first and checked for Inf/NaN: a step with one keeps every parameter
// and state (a skipped step) and halves the scale, and `lossScaleGrowthInterval`
// clean steps in a row double it (PyTorch's GradScaler).
//===----------------------------------------------------------------------===//
#include "TrainingSupport.h"

namespace dlc::passes {

using namespace ir;

std::vector<GradientOutput> gradientOutputs(const Graph &g) {
  std::vector<GradientOutput> out;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const GraphOutput &o = g.outputs()[i];
    if (o.isUpdate() || o.name.rfind("grad.", 0) != 0)
      continue;
    Value *p = g.findValue(o.name.substr(5));
    if (p && p->isTrainable() && gradientOutputName(*p) == o.name)
      out.push_back({{p, o.value}, i});
  }
  return out;
}

void removeGradientOutputs(Graph &g) {
  std::vector<GradientOutput> grads = gradientOutputs(g);
  std::vector<GraphOutput> kept;
  for (size_t i = 0, k = 0; i < g.outputs().size(); ++i)
    if (k < grads.size() && grads[k].output == i)
      ++k;
    else
      kept.push_back(g.outputs()[i]);
  g.setOutputs(std::move(kept));
}

OptimizerBuilder::OptimizerBuilder(Graph &g, GradBuilder &b, const TrainingOptions &opts,
                                   TrainingSummary &sum, Value *skip)
    : g_(g), b_(b), opts_(opts), sum_(sum), skip_(skip) {
  if (opts.optimizer != OptimizerKind::Adam && opts.optimizer != OptimizerKind::AdamW)
    return;
  Value *t = scalarState(g, "optimizer.step", 0);
  Value *t1 = b.add(t, b.scalar(1, DType::F32));
  update(t, t1);
  // The bias corrections 1 - beta^t.
  bc1_ = b.sub(b.scalar(1, DType::F32), b.op(OpKind::Pow, {b.scalar(opts.beta1, DType::F32), t1}));
  bc2_ = b.sub(b.scalar(1, DType::F32), b.op(OpKind::Pow, {b.scalar(opts.beta2, DType::F32), t1}));
  ++sum.stateVariables;
}

void OptimizerBuilder::update(Value *var, Value *next) {
  g_.addUpdate(var, skip_ ? b_.select(skip_, var, next) : next);
}

Value *OptimizerBuilder::step(Value *p, Value *d) {
  DType dt = p->dtype();
  const TrainingOptions &o = opts_;
  if (o.weightDecay != 0 && o.optimizer != OptimizerKind::AdamW)
    d = b_.add(d, b_.scale(p, o.weightDecay)); // L2 in the gradient (torch's weight_decay)
  switch (o.optimizer) {
  case OptimizerKind::SGD:
    return b_.sub(p, b_.scale(d, o.lr));
  case OptimizerKind::Momentum: {
    Value *v = zerosState(g_, p, "momentum");
    Value *v1 = b_.add(b_.scale(v, o.momentum), d);
    update(v, v1);
    ++sum_.stateVariables;
    return b_.sub(p, b_.scale(v1, o.lr));
  }
  case OptimizerKind::Adam:
  case OptimizerKind::AdamW: {
    Value *m = zerosState(g_, p, "adam_m"), *v = zerosState(g_, p, "adam_v");
    Value *m1 = b_.add(b_.scale(m, o.beta1), b_.scale(d, 1 - o.beta1));
    Value *v1 = b_.add(b_.scale(v, o.beta2), b_.scale(b_.mul(d, d), 1 - o.beta2));
    update(m, m1);
    update(v, v1);
    sum_.stateVariables += 2;
    // p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    Value *base = o.optimizer == OptimizerKind::AdamW && o.weightDecay != 0
                      ? b_.scale(p, 1 - o.lr * o.weightDecay)
                      : p;
    Value *denom =
        b_.add(b_.div(b_.op(OpKind::Sqrt, {v1}), b_.cast(b_.op(OpKind::Sqrt, {bc2_}), dt)),
               b_.scalar(o.eps, dt));
    Value *stepSize = b_.cast(b_.div(b_.scalar(o.lr, DType::F32), bc1_), dt);
    return b_.sub(base, b_.mul(stepSize, b_.div(m1, denom)));
  }
  }
  return nullptr;
}

namespace {

/// Dynamic loss scaling's bookkeeping: unscales the gradients in place, and returns
/// the flag "some gradient is Inf or NaN" (a bool scalar); appends the updates of
/// the scale and of the clean-step count.
Value *unscaleAndCheck(Graph &g, GradBuilder &b, std::vector<GradientOutput> &grads, Value *scale,
                       Value *goodSteps, const TrainingOptions &opts) {
  Value *inv = b.div(b.scalar(1, DType::F32), scale);
  Value *bad = nullptr;
  for (GradientOutput &go : grads) {
    Value *&grad = go.gradient.grad;
    grad = b.mul(grad, b.cast(inv, grad->dtype()));
    // max over the tensor of (isnan | isinf), as 0/1.
    Value *flags = b.op(OpKind::Or, {b.op(OpKind::IsNaN, {grad}), b.op(OpKind::IsInf, {grad})});
    Value *any = b.op(OpKind::ReduceMax, {b.cast(flags, DType::F32)}, {{"keepdims", int64_t{0}}});
    bad = bad ? b.op(OpKind::Max, {bad, any}) : any;
  }
  Value *found = b.op(OpKind::Greater, {bad, b.scalar(0, DType::F32)});
  // clean: good + 1, doubling the scale (and restarting the count) at the interval.
  Value *good1 = b.add(goodSteps, b.scalar(1, DType::F32));
  Value *grow =
      b.op(OpKind::GreaterOrEqual,
           {good1, b.scalar(static_cast<double>(opts.lossScaleGrowthInterval), DType::F32)});
  Value *cleanScale = b.select(grow, b.scale(scale, opts.lossScaleGrowth), scale);
  Value *cleanGood = b.select(grow, b.scalar(0, DType::F32), good1);
  g.addUpdate(scale, b.select(found, b.scale(scale, opts.lossScaleBackoff), cleanScale));
  g.addUpdate(goodSteps, b.select(found, b.scalar(0, DType::F32), cleanGood));
  return found;
}

class Optimizer : public Pass {
public:
  std::string_view name() const override { return "optimizer"; }

  bool run(Graph &g, PassContext &ctx) override {
    const TrainingOptions *opts = trainingOptions(ctx, name());
    if (!opts)
      return false;
    TrainingSummary &sum = trainingSummary(ctx);
    std::vector<GradientOutput> grads = gradientOutputs(g);
    if (grads.empty()) {
      ctx.fail(makeError("optimizer: the graph has no gradient outputs (run autodiff first)"));
      return false;
    }
    GradBuilder b(g);
    Value *scale = g.findValue(kLossScaleName), *goodSteps = g.findValue(kGoodStepsName);
    // A step whose gradients overflowed keeps every parameter and optimizer state.
    Value *skip = scale && goodSteps && scale->isParameter()
                      ? unscaleAndCheck(g, b, grads, scale, goodSteps, *opts)
                      : nullptr;
    OptimizerBuilder optimizer(g, b, *opts, sum, skip);
    for (const GradientOutput &go : grads) {
      ++sum.parameters;
      sum.parameterElements += static_cast<size_t>(go.gradient.parameter->type().numElements());
    }
    for (const GradientOutput &go : grads) {
      Value *next = optimizer.step(go.gradient.parameter, go.gradient.grad);
      if (auto e = b.takeError()) {
        ctx.fail(std::move(e));
        return true;
      }
      optimizer.update(go.gradient.parameter, next);
    }
    if (auto e = b.takeError())
      ctx.fail(std::move(e));
    removeGradientOutputs(g);
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createOptimizer() {
  return std::make_unique<Optimizer>();
}

} // namespace dlc::passes

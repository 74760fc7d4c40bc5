//===- Training.cpp - The training step as a graph -------------------------===//
#include "dlc/passes/Training.h"

#include "dlc/ir/GradBuilder.h"
#include "dlc/passes/Autodiff.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

namespace dlc::passes {

using namespace ir;

llvm::Expected<LossKind> parseLossKind(std::string_view s) {
  if (s == "cross-entropy")
    return LossKind::CrossEntropy;
  if (s == "mse")
    return LossKind::MSE;
  if (s == "none")
    return LossKind::None;
  return errorf("unknown --loss '{0}' (expected cross-entropy, mse or none)", s);
}

llvm::Expected<OptimizerKind> parseOptimizerKind(std::string_view s) {
  if (s == "sgd")
    return OptimizerKind::SGD;
  if (s == "momentum")
    return OptimizerKind::Momentum;
  if (s == "adam")
    return OptimizerKind::Adam;
  if (s == "adamw")
    return OptimizerKind::AdamW;
  return errorf("unknown --optimizer '{0}' (expected sgd, momentum, adam or adamw)", s);
}

std::string_view lossKindName(LossKind k) {
  switch (k) {
  case LossKind::CrossEntropy:
    return "cross-entropy";
  case LossKind::MSE:
    return "mse";
  case LossKind::None:
    return "none";
  }
  return "?";
}

std::string_view optimizerKindName(OptimizerKind k) {
  switch (k) {
  case OptimizerKind::SGD:
    return "sgd";
  case OptimizerKind::Momentum:
    return "momentum";
  case OptimizerKind::Adam:
    return "adam";
  case OptimizerKind::AdamW:
    return "adamw";
  }
  return "?";
}

namespace {

/// BatchNormalization trains with batch statistics, and its running statistics
/// become state variables updated by the node's second and third results (ONNX's
/// momentum formula). An inference-form node (PyTorch's eval-mode export) gets the
/// training form; a training-form node (a TrainingMode.TRAINING export, whose
/// running-statistics results lead nowhere) keeps its own.
llvm::Expected<size_t> batchNormsToTraining(Graph &g) {
  size_t count = 0;
  for (Node *n : g.nodeList()) {
    if (n->kind() != OpKind::BatchNormalization)
      continue;
    Value *mean = n->operand(3), *var = n->operand(4);
    for (Value *s : {mean, var}) {
      if (s->isConstant())
        g.makeParameter(s, false);
      else if (s->isParameter())
        g.setTrainable(s, false);
      else
        return errorf("{0}: the running statistics must be initializers to be trained",
                      n->describe());
    }
    Node *t = n;
    if (n->numResults() < 3) {
      AttrMap attrs = n->attrs();
      attrs["training_mode"] = int64_t{1};
      std::vector<Value *> ops(n->operands().begin(), n->operands().end());
      auto made = g.createInferred(OpKind::BatchNormalization, ops, attrs, 3, n->name(), n);
      if (!made)
        return made.takeError();
      t = *made;
      g.replaceAllUsesWith(n->result(0), t->result(0));
      g.eraseNode(n);
    }
    g.addUpdate(mean, t->result(1));
    g.addUpdate(var, t->result(2));
    ++count;
  }
  return count;
}

/// Appends the loss of the prediction `y`; returns it. The label input is created
/// by the first call (the training loss) and reused by the next (the evaluation's).
llvm::Expected<Value *> appendLoss(Graph &g, GradBuilder &b, Value *y, const TrainingOptions &opts,
                                   Value *&label) {
  if (!isFloat(y->dtype()))
    return errorf("the model's output '{0}' is {1}; training needs a floating-point output",
                  y->name(), y->type().str());
  if (opts.loss == LossKind::None) {
    if (y->type().numElements() != 1)
      return errorf(
          "--loss none needs the model's first output to be the scalar loss, but '{0}' is {1}",
          y->name(), y->type().str());
    return y;
  }
  if (!label && g.findValue(opts.label))
    return errorf("the label name '{0}' is already taken by a value of the model (choose another "
                  "with --label)",
                  opts.label);
  Value *loss;
  if (opts.loss == LossKind::CrossEntropy) {
    if (y->rank() < 2)
      return errorf(
          "--loss cross-entropy needs class scores [N, C, ...], but the output '{0}' is {1}",
          y->name(), y->type().str());
    Shape ls{y->shape()[0]};
    ls.insert(ls.end(), y->shape().begin() + 2, y->shape().end());
    if (!label)
      label = g.addInput(opts.label, TensorType{DType::I64, ls});
    Value *logp = b.op(OpKind::LogSoftmax, {y}, {{"axis", int64_t{1}}});
    loss = b.op(OpKind::NegativeLogLikelihoodLoss, {logp, label},
                {{"reduction", std::string("mean")}});
  } else {
    if (!label)
      label = g.addInput(opts.label, y->type());
    Value *d = b.sub(y, label);
    loss = b.op(OpKind::ReduceMean, {b.mul(d, d)}, {{"keepdims", int64_t{0}}});
  }
  if (auto e = b.takeError())
    return e;
  return loss;
}

/// The model in inference mode beside the training step, sharing its inputs and
/// variables: a copy of every node the model's outputs depend on, with
/// BatchNormalization back in inference form (reading the running statistics) and
/// Dropout the identity. Returns the copies of `outputs`, or nothing when a node
/// cannot be put in inference form (a Dropout mask in use): the package then has no
/// evaluation schedule, and evaluation runs the training step without its updates.
std::optional<std::vector<Value *>> cloneForEvaluation(Graph &g,
                                                       const std::vector<GraphOutput> &outputs) {
  std::unordered_set<const Value *> needed;
  for (const GraphOutput &o : outputs)
    needed.insert(o.value);
  std::vector<Node *> nodes = g.nodeList(), forward;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    bool used = false;
    for (unsigned r = 0; r < (*it)->numResults(); ++r)
      used |= needed.count((*it)->result(r)) != 0;
    if (used) {
      forward.push_back(*it);
      needed.insert((*it)->operands().begin(), (*it)->operands().end());
    }
  }
  std::unordered_map<const Value *, Value *> map;
  auto mapped = [&](Value *v) -> Value * {
    auto it = map.find(v);
    return it == map.end() ? v : it->second;
  };
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    Node *n = *it;
    std::vector<Value *> ops;
    for (Value *v : n->operands())
      ops.push_back(v ? mapped(v) : nullptr);
    if (n->kind() == OpKind::Dropout) {
      for (unsigned r = 1; r < n->numResults(); ++r)
        if (needed.count(n->result(r)))
          return std::nullopt;
      map[n->result(0)] = ops[0];
      continue;
    }
    AttrMap attrs = n->attrs();
    unsigned results = n->numResults();
    if (n->kind() == OpKind::BatchNormalization && n->attrInt("training_mode") != 0) {
      attrs["training_mode"] = int64_t{0};
      results = 1;
    }
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (unsigned r = 0; r < results; ++r) {
      types.push_back(n->result(r)->type());
      names.push_back(g.uniqueName(n->result(r)->name() + ".eval"));
    }
    Node *c = g.createNode(n->kind(), ops, types, attrs, n->name() + ".eval", nullptr, names);
    for (unsigned r = 0; r < results; ++r)
      map[n->result(r)] = c->result(r);
  }
  std::vector<Value *> out;
  for (const GraphOutput &o : outputs)
    out.push_back(mapped(o.value));
  return out;
}

Value *zerosState(Graph &g, Value *like, const std::string &what) {
  return g.addParameter(like->name() + "." + what, Tensor(like->type()), false);
}

Value *scalarState(Graph &g, const std::string &name, float init) {
  Tensor t(TensorType{DType::F32, {}});
  t.mutableData<float>()[0] = init;
  return g.addParameter(name, std::move(t), false);
}

/// Runs the precision pass on the forward graph and the loss (see Training.h).
llvm::Error lowerForward(Graph &g, const PrecisionOptions &po) {
  if (auto e = decomposeForGradients(g))
    return e;
  const PassInfo *info = findPass("precision");
  if (!info)
    return makeError("internal error: no precision pass");
  PassContext ctx;
  ctx.precision = po;
  info->create()->run(g, ctx);
  if (!ctx.errors.empty())
    return errorf("mixed-precision training: {0}", ctx.errors.front());
  return llvm::Error::success();
}

/// Dynamic loss scaling's bookkeeping: unscales the gradients in place, and returns
/// the flag "some gradient is Inf or NaN" (a bool scalar); appends the updates of
/// the scale and of the clean-step count.
Value *unscaleAndCheck(Graph &g, GradBuilder &b, std::vector<Gradient> &grads, Value *scale,
                       Value *goodSteps, const TrainingOptions &opts) {
  Value *inv = b.div(b.scalar(1, DType::F32), scale);
  Value *bad = nullptr;
  for (Gradient &gr : grads) {
    gr.grad = b.mul(gr.grad, b.cast(inv, gr.grad->dtype()));
    // max over the tensor of (isnan | isinf), as 0/1.
    Value *flags =
        b.op(OpKind::Or, {b.op(OpKind::IsNaN, {gr.grad}), b.op(OpKind::IsInf, {gr.grad})});
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

/// --sync-batchnorm: each BatchNormalization in training mode becomes ops whose batch
/// mean and variance are averaged over the ranks (AllReduce), so that every replica
/// normalizes with the statistics of the global batch and updates the same running
/// statistics; autodiff then averages the statistics' gradients the same way
/// (AllReduce's gradient rule). Returns how many it rewrote.
size_t synchronizeBatchNorms(Graph &g, GradBuilder &b) {
  size_t count = 0;
  for (Node *n : g.nodeList()) {
    if (n->kind() != OpKind::BatchNormalization || !n->attrInt("training_mode") ||
        n->numResults() != 3)
      continue;
    Value *x = n->operand(0);
    DType dt = x->dtype();
    int64_t r = x->rank(), C = x->shape()[1];
    Shape cs(static_cast<size_t>(r), 1);
    cs[1] = C;
    std::vector<int64_t> axes{0};
    for (int64_t i = 2; i < r; ++i)
      axes.push_back(i);
    AttrMap meanAttrs{{"axes", axes}, {"keepdims", int64_t{1}}};
    double eps = n->attrFloat("epsilon"), momentum = n->attrFloat("momentum");
    Value *mean = b.op(OpKind::AllReduce, {b.op(OpKind::ReduceMean, {x}, meanAttrs)});
    Value *xc = b.sub(x, mean);
    Value *var = b.op(OpKind::AllReduce, {b.op(OpKind::ReduceMean, {b.mul(xc, xc)}, meanAttrs)});
    Value *rstd = b.op(OpKind::Reciprocal, {b.op(OpKind::Sqrt, {b.add(var, b.scalar(eps, dt))})});
    Value *y =
        b.add(b.mul(b.mul(xc, rstd), b.reshape(n->operand(1), cs)), b.reshape(n->operand(2), cs));
    auto running = [&](Value *old, Value *batch) {
      return b.add(b.scale(old, momentum), b.scale(b.reshape(batch, Shape{C}), 1 - momentum));
    };
    Value *rm = running(n->operand(3), mean), *rv = running(n->operand(4), var);
    if (!y || !rm || !rv)
      continue; // the builder's error surfaces from buildTrainingStep
    Value *results[] = {y, rm, rv};
    for (unsigned i = 0; i < 3; ++i)
      g.replaceAllUsesWith(n->result(i), results[i]); // and the running statistics' updates
    g.eraseNode(n);
    ++count;
  }
  if (count)
    g.topologicalSort();
  return count;
}

/// Data parallelism: the gradients in the order the backward pass produces them,
/// cut into buckets of one dtype and at most `limit` bytes (a larger gradient is a
/// bucket of its own), each averaged over the ranks by one AllReduce that comes right
/// after the node producing the bucket's last gradient, so that its reduction
/// overlaps the rest of the backward pass. The gradients are replaced by the means.
void bucketGradients(Graph &g, std::vector<Gradient> &grads, uint64_t limit, TrainingSummary &sum) {
  std::unordered_map<const Node *, int64_t> position;
  int64_t i = 0;
  for (Node &n : g.nodes())
    position[&n] = i++;
  auto producedAt = [&](const Gradient &gr) -> int64_t {
    const Node *d = gr.grad->definingNode();
    return d ? position.at(d) : -1;
  };
  std::vector<size_t> order(grads.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return producedAt(grads[a]) < producedAt(grads[b]); });
  std::vector<std::vector<size_t>> buckets;
  uint64_t bytes = 0;
  for (size_t k : order) {
    uint64_t b = grads[k].grad->type().byteSize();
    if (buckets.empty() || bytes + b > limit ||
        grads[buckets.back().front()].grad->dtype() != grads[k].grad->dtype()) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(k);
    bytes += b;
    sum.allReduceBytes += b;
  }
  for (size_t id = 0; id < buckets.size(); ++id) {
    std::vector<Value *> operands;
    std::vector<TensorType> types;
    std::vector<std::string> names;
    const Node *last = nullptr;
    for (size_t k : buckets[id]) {
      operands.push_back(grads[k].grad);
      types.push_back(grads[k].grad->type());
      names.push_back(g.uniqueName(grads[k].parameter->name() + ".grad.mean"));
      if (const Node *d = grads[k].grad->definingNode())
        last = d;
    }
    // Before the node after the last producer (the producers are in node order).
    Node *before = nullptr;
    if (last) {
      std::vector<Node *> nodes = g.nodeList();
      auto it = std::find(nodes.begin(), nodes.end(), last);
      if (it != nodes.end() && it + 1 != nodes.end())
        before = *(it + 1);
    } else if (g.numNodes()) {
      before = g.nodeList().front();
    }
    AttrMap attrs{{"bucket_bytes", static_cast<int64_t>(limit)}};
    Node *ar = g.createNode(OpKind::AllReduce, operands, types, attrs,
                            "all-reduce bucket " + std::to_string(id), before, names);
    for (size_t j = 0; j < buckets[id].size(); ++j)
      grads[buckets[id][j]].grad = ar->result(static_cast<unsigned>(j));
  }
  sum.buckets = buckets.size();
}

/// ZeRO-1 over `ranks` ranks: the parameters and gradients as one flat vector of
/// `ranks` equal shares (zero-padded). Each rank averages only its share of the
/// gradients (ReduceScatter), steps the optimizer on its share of the parameters
/// (RankShard) with optimizer state of that share's size (ir::kShardedStatePrefix),
/// and the new shares are gathered (AllGather) into every parameter.
template <class Optimize, class Update>
llvm::Error shardOptimizer(Graph &g, GradBuilder &b, const std::vector<Gradient> &grads,
                           int64_t ranks, Optimize optimize, Update update, TrainingSummary &sum) {
  DType dt = grads.front().parameter->dtype();
  std::vector<Value *> flatGrads, flatParams;
  int64_t total = 0;
  for (const Gradient &gr : grads) {
    if (gr.parameter->dtype() != dt)
      return errorf("--zero shards one flat vector of parameters: '{0}' is {1}, '{2}' {3}",
                    grads.front().parameter->name(), dtypeName(dt), gr.parameter->name(),
                    dtypeName(gr.parameter->dtype()));
    int64_t n = gr.parameter->type().numElements();
    flatGrads.push_back(b.reshape(gr.grad, Shape{n}));
    flatParams.push_back(b.reshape(gr.parameter, Shape{n}));
    total += n;
  }
  int64_t share = (total + ranks - 1) / ranks, pad = share * ranks - total;
  if (pad) {
    flatGrads.push_back(b.full(0, dt, Shape{pad}));
    flatParams.push_back(b.full(0, dt, Shape{pad}));
  }
  auto concat = [&](std::vector<Value *> &parts) {
    return parts.size() == 1 ? parts.front() : b.op(OpKind::Concat, parts, {{"axis", int64_t{0}}});
  };
  AttrMap r{{"ranks", ranks}};
  Value *gradShare = b.op(OpKind::ReduceScatter, {concat(flatGrads)}, r);
  Value *paramShare = b.op(OpKind::RankShard, {concat(flatParams)}, r);
  if (auto e = b.takeError())
    return e;
  g.renameValue(paramShare, std::string(kShardedStatePrefix) + "params");
  Value *next = optimize(paramShare, gradShare);
  Value *all = b.op(OpKind::AllGather, {next}, r);
  int64_t offset = 0;
  for (const Gradient &gr : grads) {
    int64_t n = gr.parameter->type().numElements();
    Value *piece = b.op(OpKind::Slice, {all},
                        {{"starts", std::vector<int64_t>{offset}},
                         {"ends", std::vector<int64_t>{offset + n}},
                         {"axes", std::vector<int64_t>{0}}});
    update(gr.parameter, b.reshape(piece, gr.parameter->shape()));
    offset += n;
  }
  if (auto e = b.takeError())
    return e;
  sum.zeroShareElements = static_cast<size_t>(share);
  return llvm::Error::success();
}

} // namespace

llvm::Expected<TrainingSummary> buildTrainingStep(Graph &g, const TrainingOptions &opts) {
  TrainingSummary sum;
  auto firstOutput = llvm::find_if(g.outputs(), [](const GraphOutput &o) { return !o.isUpdate(); });
  if (firstOutput == g.outputs().end())
    return makeError("the model has no output to train");
  Value *y = firstOutput->value;

  auto bns = batchNormsToTraining(g);
  if (!bns)
    return bns.takeError();
  sum.batchNorms = *bns;
  GradBuilder b(g);
  // Dropout's RNG stream advances once per step.
  if (Value *step = g.findValue(kDropoutStepName); step && step->isParameter()) {
    g.addUpdate(step, b.add(step, b.scalar(1, DType::I64)));
    ++sum.stateVariables;
  }

  std::optional<std::regex> freeze;
  if (opts.freeze) {
    try {
      freeze.emplace(*opts.freeze, std::regex::ECMAScript);
    } catch (const std::regex_error &e) {
      return errorf("--freeze '{0}' is not a valid regular expression: {1}", *opts.freeze,
                    e.what());
    }
  }
  size_t frozen = 0;
  size_t promoted = promoteTrainableConstants(g, [&](const std::string &name) {
    bool f = freeze && std::regex_search(name, *freeze);
    frozen += f;
    return f;
  });
  if (freeze && frozen == 0)
    return errorf("--freeze '{0}' matches no trainable initializer of the model", *opts.freeze);
  if (promoted == 0)
    return makeError(
        frozen ? "--freeze leaves the model with no trainable parameters"
               : "the model has no trainable parameters (no floating-point initializers)");
  sum.frozen = frozen;

  std::vector<GraphOutput> modelOutputs;
  for (const GraphOutput &o : g.outputs())
    if (!o.isUpdate())
      modelOutputs.push_back(o);
  auto evalValues = cloneForEvaluation(g, modelOutputs);

  Value *label = nullptr;
  auto loss = appendLoss(g, b, y, opts, label);
  if (!loss)
    return loss.takeError();
  if (*loss != y)
    g.renameValue(*loss, g.uniqueName("loss"));
  sum.loss = (*loss)->name();
  // The loss first, then the model's outputs, the evaluation's, then the updates.
  std::vector<GraphOutput> outs{{sum.loss, *loss}};
  for (const GraphOutput &o : modelOutputs)
    if (o.value != *loss)
      outs.push_back(o);
  if (evalValues) {
    auto evalLoss = appendLoss(g, b, evalValues->front(), opts, label);
    if (!evalLoss)
      return evalLoss.takeError();
    outs.push_back({std::string(kEvalOutputPrefix) + sum.loss, *evalLoss});
    for (size_t i = 0; i < modelOutputs.size(); ++i)
      if (modelOutputs[i].value != *loss)
        outs.push_back({std::string(kEvalOutputPrefix) + modelOutputs[i].name, (*evalValues)[i]});
    sum.evaluation = true;
  }
  for (const GraphOutput &o : g.outputs())
    if (o.isUpdate())
      outs.push_back(o);
  g.setOutputs(std::move(outs));

  if (opts.syncBatchNorm) {
    if (!opts.bucketBytes)
      return makeError("--sync-batchnorm goes with --data-parallel");
    sum.syncBatchNorm = synchronizeBatchNorms(g, b) > 0; // none: nothing to synchronize
    if (auto e = b.takeError())
      return e;
  }
  Value *lossValue = *loss, *scale = nullptr, *goodSteps = nullptr;
  if (opts.precision) {
    if (auto e = lowerForward(g, *opts.precision))
      return e;
    lossValue = g.outputs().front().value; // the FP32 loss (a cast when lowered)
    if (opts.precision->reduced == DType::F16) {
      scale = scalarState(g, kLossScaleName, static_cast<float>(opts.initLossScale));
      goodSteps = scalarState(g, kGoodStepsName, 0);
      sum.stateVariables += 2;
      sum.lossScaling = true;
    }
  }
  auto grads = buildGradients(g, lossValue, scale);
  if (!grads)
    return grads.takeError();
  if (opts.zeroRanks && (!opts.bucketBytes || *opts.zeroRanks < 2 || scale))
    return makeError(!opts.bucketBytes ? "--zero goes with --data-parallel"
                     : scale ? "--zero with --fp16's loss scaling is not supported (use --bf16)"
                             : "--zero needs at least 2 ranks");
  if (opts.bucketBytes && !opts.zeroRanks) // ZeRO-1 reduce-scatters the gradients instead
    bucketGradients(g, *grads, *opts.bucketBytes, sum);
  // A step whose gradients overflowed keeps every parameter and optimizer state.
  Value *skip = scale ? unscaleAndCheck(g, b, *grads, scale, goodSteps, opts) : nullptr;
  auto update = [&](Value *var, Value *next) {
    g.addUpdate(var, skip ? b.select(skip, var, next) : next);
  };

  // The optimizer, one element-wise chain per parameter (the fusion pass makes
  // each a single kernel). Hyper-parameters are compile-time constants.
  Value *bc1 = nullptr, *bc2 = nullptr;
  if (opts.optimizer == OptimizerKind::Adam || opts.optimizer == OptimizerKind::AdamW) {
    Value *t = scalarState(g, "optimizer.step", 0);
    Value *t1 = b.add(t, b.scalar(1, DType::F32));
    update(t, t1);
    // The bias corrections 1 - beta^t.
    bc1 = b.sub(b.scalar(1, DType::F32), b.op(OpKind::Pow, {b.scalar(opts.beta1, DType::F32), t1}));
    bc2 = b.sub(b.scalar(1, DType::F32), b.op(OpKind::Pow, {b.scalar(opts.beta2, DType::F32), t1}));
    ++sum.stateVariables;
  }
  // The optimizer's step of one parameter (or ZeRO-1's shard of all of them) from
  // its gradient: appends the state's updates, returns the new value.
  auto optimize = [&](Value *p, Value *d) -> Value * {
    DType dt = p->dtype();
    if (opts.weightDecay != 0 && opts.optimizer != OptimizerKind::AdamW)
      d = b.add(d, b.scale(p, opts.weightDecay)); // L2 in the gradient (torch's weight_decay)
    switch (opts.optimizer) {
    case OptimizerKind::SGD:
      return b.sub(p, b.scale(d, opts.lr));
    case OptimizerKind::Momentum: {
      Value *v = zerosState(g, p, "momentum");
      Value *v1 = b.add(b.scale(v, opts.momentum), d);
      update(v, v1);
      ++sum.stateVariables;
      return b.sub(p, b.scale(v1, opts.lr));
    }
    case OptimizerKind::Adam:
    case OptimizerKind::AdamW: {
      Value *m = zerosState(g, p, "adam_m"), *v = zerosState(g, p, "adam_v");
      Value *m1 = b.add(b.scale(m, opts.beta1), b.scale(d, 1 - opts.beta1));
      Value *v1 = b.add(b.scale(v, opts.beta2), b.scale(b.mul(d, d), 1 - opts.beta2));
      update(m, m1);
      update(v, v1);
      sum.stateVariables += 2;
      // p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
      Value *base = opts.optimizer == OptimizerKind::AdamW && opts.weightDecay != 0
                        ? b.scale(p, 1 - opts.lr * opts.weightDecay)
                        : p;
      Value *denom = b.add(b.div(b.op(OpKind::Sqrt, {v1}), b.cast(b.op(OpKind::Sqrt, {bc2}), dt)),
                           b.scalar(opts.eps, dt));
      Value *stepSize = b.cast(b.div(b.scalar(opts.lr, DType::F32), bc1), dt);
      return b.sub(base, b.mul(stepSize, b.div(m1, denom)));
    }
    }
    return nullptr;
  };
  for (const Gradient &gr : *grads) {
    ++sum.parameters;
    sum.parameterElements += static_cast<size_t>(gr.parameter->type().numElements());
  }
  if (opts.zeroRanks) {
    if (auto e = shardOptimizer(g, b, *grads, *opts.zeroRanks, optimize, update, sum))
      return e;
    return sum;
  }
  for (const Gradient &gr : *grads) {
    Value *next = optimize(gr.parameter, gr.grad);
    if (auto e = b.takeError())
      return e;
    update(gr.parameter, next);
  }
  return sum;
}

} // namespace dlc::passes

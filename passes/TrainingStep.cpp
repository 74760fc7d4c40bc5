//===- TrainingStep.cpp - The training step's forward half ------------------===//
//
// `train-step` turns an inference graph into the forward half of a training step
// (Training.h runs the rest of the pipeline):
//   1. every op with a training form takes it (OpDef::trainingForm: BatchNormalization
//      on batch statistics, its running statistics state variables it updates);
//   2. Dropout's step counter advances once per step;
//   3. the trainable constants become parameters (promoteTrainableConstants, --freeze);
//   4. the model in inference mode (OpDef::inferenceForm) is copied beside the step,
//      sharing its inputs and variables, as outputs kEvalOutputPrefix + NAME;
//   5. the loss is appended and becomes the first output;
//   6. FP16 training gets the loss-scale state (kLossScaleName, kGoodStepsName).
//===----------------------------------------------------------------------===//
#include "TrainingSupport.h"

#include <cmath>
#include <regex>
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

const TrainingOptions *trainingOptions(PassContext &ctx, std::string_view pass) {
  if (!ctx.training)
    ctx.fail(errorf("the {0} pass needs the training options (dlc opt --train ...)", pass));
  return ctx.training;
}

TrainingSummary &trainingSummary(PassContext &ctx) {
  static thread_local TrainingSummary unread; // for callers that want no summary
  return ctx.trainingSummary ? *ctx.trainingSummary : unread;
}

Value *zerosState(Graph &g, Value *like, const std::string &what) {
  return g.addParameter(like->name() + "." + what, Tensor(like->type()), false);
}

Value *scalarState(Graph &g, const std::string &name, float init) {
  Tensor t(TensorType{DType::F32, {}});
  t.mutableData<float>()[0] = init;
  return g.addParameter(name, std::move(t), false);
}

namespace {

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
/// variables: a copy of every node the model's outputs depend on, each in its
/// inference form (OpDef::inferenceForm). Returns the copies of `outputs`, or nothing
/// when a node cannot be put in inference form (a Dropout mask in use): the package
/// then has no evaluation schedule, and evaluation runs the training step without
/// its updates.
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
    if (InferenceFormFn form = n->def().inferenceForm)
      if (auto results = form(g, *n, ops)) {
        for (unsigned r = 0; r < n->numResults(); ++r) {
          if (!(*results)[r] && needed.count(n->result(r)))
            return std::nullopt;
          map[n->result(r)] = (*results)[r];
        }
        continue;
      }
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (unsigned r = 0; r < n->numResults(); ++r) {
      types.push_back(n->result(r)->type());
      names.push_back(g.uniqueName(n->result(r)->name() + ".eval"));
    }
    Node *c = g.createNode(n->kind(), ops, types, n->attrs(), n->name() + ".eval", nullptr, names);
    for (unsigned r = 0; r < n->numResults(); ++r)
      map[n->result(r)] = c->result(r);
  }
  std::vector<Value *> out;
  for (const GraphOutput &o : outputs)
    out.push_back(mapped(o.value));
  return out;
}

class TrainingStep : public Pass {
public:
  std::string_view name() const override { return "train-step"; }

  bool run(Graph &g, PassContext &ctx) override {
    const TrainingOptions *opts = trainingOptions(ctx, name());
    if (!opts)
      return false;
    if (auto e = build(g, *opts, trainingSummary(ctx)))
      ctx.fail(std::move(e));
    return true;
  }

private:
  static llvm::Error build(Graph &g, const TrainingOptions &opts, TrainingSummary &sum) {
    auto firstOutput =
        llvm::find_if(g.outputs(), [](const GraphOutput &o) { return !o.isUpdate(); });
    if (firstOutput == g.outputs().end())
      return makeError("the model has no output to train");
    Value *y = firstOutput->value;

    for (Node *n : g.nodeList())
      if (TrainingFormFn form = n->def().trainingForm) {
        if (auto e = form(g, *n))
          return e;
        ++sum.batchNorms;
      }
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

    // FP16's dynamic loss scaling: autodiff seeds the loss gradient with the scale,
    // and the optimizer unscales (Optimizer.cpp).
    if (opts.precision && opts.precision->reduced == DType::F16) {
      scalarState(g, kLossScaleName, static_cast<float>(opts.initLossScale));
      scalarState(g, kGoodStepsName, 0);
      sum.stateVariables += 2;
      sum.lossScaling = true;
    }
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createTrainingStep() {
  return std::make_unique<TrainingStep>();
}

Pipeline trainingPipeline(const TrainingOptions &opts) {
  PipelineStage stage;
  auto add = [&](const char *pass) { stage.passes.emplace_back(pass); };
  add("train-step");
  if (opts.syncBatchNorm)
    add("sync-batchnorm");
  if (opts.precision) {
    // The precision pass sees the primitives of the ops that gradients cross
    // through their decomposition (LSTM, GRU).
    add("decompose");
    add("precision");
  }
  add("autodiff");
  if (opts.zeroRanks) {
    add("zero-shard");
  } else {
    if (opts.bucketBytes)
      add("allreduce-gradients");
    add("optimizer");
  }
  return {stage};
}

llvm::Error validateTrainingOptions(const TrainingOptions &opts) {
  auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  if (opts.label.empty())
    return makeError("--label must not be empty");
  struct Num {
    const char *name;
    double value;
    bool belowOne; // in [0, 1), else any finite number >= 0
  };
  for (Num n : {Num{"lr", opts.lr, false}, Num{"momentum", opts.momentum, true},
                Num{"beta1", opts.beta1, true}, Num{"beta2", opts.beta2, true},
                Num{"eps", opts.eps, true}, Num{"weight-decay", opts.weightDecay, false}})
    if (!std::isfinite(n.value) || n.value < 0 || (n.belowOne && n.value >= 1))
      return errorf("--{0} must be a number {1}, got {2}", n.name,
                    n.belowOne ? "in [0, 1)" : ">= 0", text(n.value));
  if (!std::isfinite(opts.initLossScale) || opts.initLossScale < 1 || opts.initLossScale > 3.0e38)
    return errorf("--loss-scale must be a number in [1, 3e38], got {0}", text(opts.initLossScale));
  if (opts.bucketBytes && (*opts.bucketBytes < 1 || *opts.bucketBytes > (1ull << 40)))
    return makeError("--bucket-mb must be a number of MiB in (0, 1048576]");
  if (opts.syncBatchNorm && !opts.bucketBytes)
    return makeError("--sync-batchnorm goes with --data-parallel");
  bool lossScaling = opts.precision && opts.precision->reduced == DType::F16;
  if (opts.zeroRanks &&
      (!opts.bucketBytes || *opts.zeroRanks < 2 || *opts.zeroRanks > 65536 || lossScaling))
    return makeError(!opts.bucketBytes ? "--zero goes with --data-parallel"
                     : lossScaling
                         ? "--zero with --fp16's loss scaling is not supported (use --bf16)"
                         : "--zero must be a number of ranks in [2, 65536]");
  return llvm::Error::success();
}

llvm::Expected<TrainingSummary> buildTrainingStep(Graph &g, const TrainingOptions &opts,
                                                  const PassManagerOptions &pm) {
  if (auto e = validateTrainingOptions(opts))
    return e;
  TrainingSummary sum;
  PassContext ctx;
  ctx.training = &opts;
  ctx.trainingSummary = &sum;
  if (opts.precision)
    ctx.precision = *opts.precision;
  PassManagerOptions quiet = pm;
  quiet.namePassInErrors = false;
  PassManager manager(quiet);
  if (auto e = manager.run(g, trainingPipeline(opts), ctx))
    return e;
  return sum;
}

} // namespace dlc::passes

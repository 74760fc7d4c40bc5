//===- ZeroShard.cpp - ZeRO-1: the optimizer step on this rank's share ------===//
//
// `zero-shard` takes the optimizer's place in data-parallel training with --zero N:
// the parameters and gradients (the grad.NAME outputs) become one flat vector of N
// equal shares (zero-padded). Each rank averages only its share of the gradients
// (ReduceScatter), steps the optimizer on its share of the parameters (RankShard),
// with optimizer state of that share's size (ir::kShardedStatePrefix), and the new
// shares are gathered (AllGather) into every parameter.
//===----------------------------------------------------------------------===//
#include "TrainingSupport.h"

namespace dlc::passes {

using namespace ir;

namespace {

class ZeroShard : public Pass {
public:
  std::string_view name() const override { return "zero-shard"; }

  bool run(Graph &g, PassContext &ctx) override {
    const TrainingOptions *opts = trainingOptions(ctx, name());
    if (!opts)
      return false;
    if (!opts->zeroRanks || *opts->zeroRanks < 2) {
      ctx.fail(makeError("zero-shard needs --zero N with N >= 2 ranks"));
      return false;
    }
    if (Value *scale = g.findValue(kLossScaleName); scale && scale->isParameter()) {
      ctx.fail(makeError("--zero with --fp16's loss scaling is not supported (use --bf16)"));
      return false;
    }
    std::vector<GradientOutput> grads = gradientOutputs(g);
    if (grads.empty()) {
      ctx.fail(makeError("zero-shard: the graph has no gradient outputs (run autodiff first)"));
      return false;
    }
    TrainingSummary &sum = trainingSummary(ctx);
    GradBuilder b(g);
    OptimizerBuilder optimizer(g, b, *opts, sum, nullptr);
    for (const GradientOutput &go : grads) {
      ++sum.parameters;
      sum.parameterElements += static_cast<size_t>(go.gradient.parameter->type().numElements());
    }
    if (auto e = shard(g, b, grads, *opts->zeroRanks, optimizer, sum))
      ctx.fail(std::move(e));
    removeGradientOutputs(g);
    return true;
  }

private:
  static llvm::Error shard(Graph &g, GradBuilder &b, const std::vector<GradientOutput> &grads,
                           int64_t ranks, OptimizerBuilder &optimizer, TrainingSummary &sum) {
    DType dt = grads.front().gradient.parameter->dtype();
    std::vector<Value *> flatGrads, flatParams;
    int64_t total = 0;
    for (const GradientOutput &go : grads) {
      const Gradient &gr = go.gradient;
      if (gr.parameter->dtype() != dt)
        return errorf("--zero shards one flat vector of parameters: '{0}' is {1}, '{2}' {3}",
                      grads.front().gradient.parameter->name(), dtypeName(dt), gr.parameter->name(),
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
      return parts.size() == 1 ? parts.front()
                               : b.op(OpKind::Concat, parts, {{"axis", int64_t{0}}});
    };
    AttrMap r{{"ranks", ranks}};
    Value *gradShare = b.op(OpKind::ReduceScatter, {concat(flatGrads)}, r);
    Value *paramShare = b.op(OpKind::RankShard, {concat(flatParams)}, r);
    if (auto e = b.takeError())
      return e;
    g.renameValue(paramShare, std::string(kShardedStatePrefix) + "params");
    Value *next = optimizer.step(paramShare, gradShare);
    Value *all = b.op(OpKind::AllGather, {next}, r);
    int64_t offset = 0;
    for (const GradientOutput &go : grads) {
      Value *p = go.gradient.parameter;
      int64_t n = p->type().numElements();
      Value *piece = b.op(OpKind::Slice, {all},
                          {{"starts", std::vector<int64_t>{offset}},
                           {"ends", std::vector<int64_t>{offset + n}},
                           {"axes", std::vector<int64_t>{0}}});
      optimizer.update(p, b.reshape(piece, p->shape()));
      offset += n;
    }
    if (auto e = b.takeError())
      return e;
    sum.zeroShareElements = static_cast<size_t>(share);
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createZeroShard() {
  return std::make_unique<ZeroShard>();
}

} // namespace dlc::passes

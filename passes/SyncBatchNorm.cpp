//===- SyncBatchNorm.cpp - BatchNorm on the global batch's statistics -----===//
//
// `sync-batchnorm` (data-parallel training, --sync-batchnorm): each BatchNormalization
// in training mode becomes ops whose batch mean and variance are averaged over the
// ranks (AllReduce), so that every replica normalizes with the statistics of the
// global batch and updates the same running statistics; autodiff then averages the
// statistics' gradients the same way (AllReduce's gradient rule). It runs after
// train-step, so the evaluation copy keeps plain BatchNorm on the running statistics.
//===----------------------------------------------------------------------===//
#include "TrainingSupport.h"

namespace dlc::passes {

using namespace ir;

namespace {

/// Returns how many BatchNorms it rewrote.
size_t synchronizeBatchNorms(Graph &g, GradBuilder &b) {
  size_t count = 0;
  for (Node *n : g.nodesOf(OpKind::BatchNormalization)) {
    if (!n->attrInt("training_mode") || n->numResults() != 3)
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

class SyncBatchNorm : public Pass {
public:
  std::string_view name() const override { return "sync-batchnorm"; }

  bool run(Graph &g, PassContext &ctx) override {
    GradBuilder b(g);
    size_t count = synchronizeBatchNorms(g, b);
    if (auto e = b.takeError())
      ctx.fail(std::move(e));
    trainingSummary(ctx).syncBatchNorm = count > 0; // none: nothing to synchronize
    return count > 0;
  }
};

} // namespace

std::unique_ptr<Pass> createSyncBatchNorm() {
  return std::make_unique<SyncBatchNorm>();
}

} // namespace dlc::passes

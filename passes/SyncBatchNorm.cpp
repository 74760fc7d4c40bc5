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
#include "dlc/ir/OpHelpers.h"

namespace dlc::passes {

using namespace ir;

namespace {

/// Returns how many BatchNorms it rewrote.
size_t synchronizeBatchNorms(Graph &g, GradBuilder &b) {
  size_t count = 0;
  for (Node *n : g.nodesOf(OpKind::BatchNormalization)) {
    if (!n->attrInt("training_mode") || n->numResults() != 3)
      continue;
    std::vector<Value *> results = batchNormTrainingOps(b, *n, /*allReduce=*/true);
    if (b.failed())
      continue; // the builder's error surfaces from buildTrainingStep
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

//===- AllReduceGradients.cpp - Data parallelism's gradient buckets --------===//
//
// `allreduce-gradients` averages the gradients (the grad.NAME outputs) over the
// ranks of data-parallel training: in the order the backward pass produces them,
// cut into buckets of one dtype and at most TrainingOptions::bucketBytes (a larger
// gradient is a bucket of its own), each averaged by one AllReduce that comes right
// after the node producing the bucket's last gradient, so that its reduction
// overlaps the rest of the backward pass. The outputs then name the means.
//===----------------------------------------------------------------------===//
#include "TrainingSupport.h"

#include <numeric>
#include <unordered_map>

namespace dlc::passes {

using namespace ir;

namespace {

class AllReduceGradients : public Pass {
public:
  std::string_view name() const override { return "allreduce-gradients"; }

  bool run(Graph &g, PassContext &ctx) override {
    const TrainingOptions *opts = trainingOptions(ctx, name());
    if (!opts)
      return false;
    if (!opts->bucketBytes) {
      ctx.fail(makeError("allreduce-gradients needs --data-parallel"));
      return false;
    }
    std::vector<GradientOutput> grads = gradientOutputs(g);
    TrainingSummary &sum = trainingSummary(ctx);
    uint64_t limit = *opts->bucketBytes;
    std::unordered_map<const Node *, int64_t> position;
    int64_t i = 0;
    for (Node &n : g.nodes())
      position[&n] = i++;
    auto producedAt = [&](const GradientOutput &go) -> int64_t {
      const Node *d = go.gradient.grad->definingNode();
      return d ? position.at(d) : -1;
    };
    std::vector<size_t> order(grads.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return producedAt(grads[a]) < producedAt(grads[b]);
    });
    std::vector<std::vector<size_t>> buckets;
    uint64_t bytes = 0;
    auto gradOf = [&](size_t k) { return grads[k].gradient.grad; };
    for (size_t k : order) {
      uint64_t b = gradOf(k)->type().byteSize();
      if (buckets.empty() || bytes + b > limit ||
          gradOf(buckets.back().front())->dtype() != gradOf(k)->dtype()) {
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
        operands.push_back(gradOf(k));
        types.push_back(gradOf(k)->type());
        names.push_back(g.uniqueName(grads[k].gradient.parameter->name() + ".grad.mean"));
        if (const Node *d = gradOf(k)->definingNode())
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
        g.setOutputValue(grads[buckets[id][j]].output, ar->result(static_cast<unsigned>(j)));
    }
    sum.buckets = buckets.size();
    return !buckets.empty();
  }
};

} // namespace

std::unique_ptr<Pass> createAllReduceGradients() {
  return std::make_unique<AllReduceGradients>();
}

} // namespace dlc::passes

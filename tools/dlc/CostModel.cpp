//===- CostModel.cpp - The roofline model behind `dlc inspect` -------------===//
#include "CostModel.h"

#include <algorithm>

namespace dlc::tool {

const std::vector<GpuSpec> &gpuSpecs() {
  static const std::vector<GpuSpec> specs = {{"A100", 2039e9, 19.5e12}, {"H100", 3350e9, 66.9e12}};
  return specs;
}

double StepCost::micros(const GpuSpec &gpu) const {
  return 1e6 * std::max(static_cast<double>(bytes()) / gpu.dramBytesPerSecond, flops / gpu.fp32FlopsPerSecond);
}

double PackageCost::micros(const GpuSpec &gpu) const {
  double t = 0;
  for (const StepCost &s : steps)
    t += s.micros(gpu);
  return t;
}

static uint64_t tensorBytes(const pkg::TensorInfo &t) {
  uint64_t n = pkg::dtypeSize(t.dtype());
  if (t.shape())
    for (int64_t d : *t.shape())
      n *= static_cast<uint64_t>(d);
  return n;
}

PackageCost costOf(const pkg::PackageFile &pf) {
  const pkg::Package &m = pf.meta();
  PackageCost c;
  if (m.steps())
    for (const pkg::Step *s : *m.steps()) {
      StepCost sc;
      sc.node = s->node() ? s->node()->str() : "";
      if (const pkg::Launch *l = s->op_as_Launch()) {
        sc.kind = "launch";
        sc.kernel = static_cast<int>(l->kernel());
        sc.bytesRead = l->bytes_read();
        sc.bytesWritten = l->bytes_written();
        sc.flops = l->flops();
      } else if (const pkg::Gemm *g = s->op_as_Gemm()) {
        sc.kind = "gemm";
        uint64_t es = pkg::dtypeSize(g->dtype()), batch = static_cast<uint64_t>(g->batch());
        uint64_t M = g->m(), N = g->n(), K = g->k();
        sc.bytesRead = (g->stride_a() ? batch : 1) * M * K * es + (g->stride_b() ? batch : 1) * K * N * es +
                       (g->beta() != 0 ? batch * M * N * es : 0) + (g->bias() ? N * es : 0);
        sc.bytesWritten = batch * M * N * es;
        sc.flops = 2.0 * static_cast<double>(batch) * static_cast<double>(M) * static_cast<double>(N) *
                   static_cast<double>(K);
      } else if (const pkg::Copy *cp = s->op_as_Copy()) {
        sc.kind = "copy";
        sc.bytesRead = sc.bytesWritten = cp->bytes();
      } else if (const pkg::Memset *ms = s->op_as_Memset()) {
        sc.kind = "memset";
        sc.bytesWritten = ms->bytes();
      }
      c.bytesRead += sc.bytesRead;
      c.bytesWritten += sc.bytesWritten;
      c.flops += sc.flops;
      c.steps.push_back(std::move(sc));
    }
  c.lowerBoundBytes = m.weight_bytes();
  for (const auto *list : {m.inputs(), m.outputs()})
    if (list)
      for (const pkg::TensorInfo *t : *list)
        c.lowerBoundBytes += tensorBytes(*t);
  return c;
}

} // namespace dlc::tool

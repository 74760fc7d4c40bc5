//===- MemoryPlan.h - Arena offsets from buffer lifetimes --------*- C++ -*-===//
//
// The arena holds every intermediate of a schedule. A buffer is live from the first
// step that references it to the last (graph inputs and outputs, and buffers the
// runtime reads after the run, for the whole schedule); two buffers may share bytes
// when their lifetimes are disjoint. Element-wise kernels that read an input only at
// the index they write may write their output over that input when the input dies
// there (LaunchStep::inplace). Offsets are assigned greedily by size into the
// best-fitting gap among the placed buffers whose lifetimes overlap (TFLite's
// greedy-by-size), 256-byte aligned.
//===----------------------------------------------------------------------===//
#pragma once

#include "Lowering.h"

namespace dlc::codegen {

struct MemoryPlanStats {
  uint64_t arenaBytes = 0;
  /// Every referenced intermediate in its own buffer (the arena without a plan).
  uint64_t naiveBytes = 0;
  /// The most bytes live at any step (after in-place merges): no plan does better.
  uint64_t maxLiveBytes = 0;
  /// Buffers that took over an input's memory in place.
  uint32_t inplaceMerges = 0;
};

inline constexpr uint64_t kArenaAlign = 256;
/// `n` rounded up to kArenaAlign.
inline uint64_t arenaAligned(uint64_t n) {
  return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

/// Calls f(BufferRef) for every buffer reference of a step.
template <class F> void forEachBufferRef(const StepDesc &s, F f) {
  if (const auto *l = std::get_if<LaunchStep>(&s.op)) {
    for (const auto &r : l->params.relocs)
      f(r.second);
  } else if (const auto *g = std::get_if<GemmStep>(&s.op)) {
    f(g->a);
    f(g->b);
    f(g->c);
    if (g->bias)
      f(*g->bias);
    if (g->cIn)
      f(*g->cIn);
    if (g->workspaceBytes)
      f(g->workspace);
    if (g->fallback)
      for (const auto &r : g->fallback->params.relocs)
        f(r.second);
  } else if (const auto *v = std::get_if<CudnnConvStep>(&s.op)) {
    f(v->x);
    f(v->w);
    f(v->y);
    if (v->workspaceBytes)
      f(v->workspace);
    if (v->bias)
      f(*v->bias);
  } else if (const auto *a = std::get_if<CudnnSdpaStep>(&s.op)) {
    for (const BufferRef &r : {a->q, a->k, a->v, a->o})
      f(r);
    if (a->workspaceBytes)
      f(a->workspace);
  } else if (const auto *c = std::get_if<CopyStep>(&s.op)) {
    f(c->src);
    f(c->dst);
  } else if (const auto *m = std::get_if<MemsetStep>(&s.op)) {
    f(m->dst);
  } else if (const auto *a = std::get_if<CollectiveStep>(&s.op)) {
    f(a->staging);
    for (const BufferRef &r : a->sources)
      f(r);
    if (a->output)
      f(*a->output);
  } else if (const auto *w = std::get_if<CollectiveWaitStep>(&s.op)) {
    f(w->staging); // in use by the collective until its wait
    if (w->output)
      f(*w->output);
  }
}

/// Assigns the offsets of p's arena buffers and sets p.arenaBytes. `pinned` buffers
/// (besides inputs and outputs) stay live for the whole schedule.
MemoryPlanStats planMemory(Program &p, const std::vector<uint32_t> &pinned = {});

} // namespace dlc::codegen

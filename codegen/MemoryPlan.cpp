//===- MemoryPlan.cpp - Arena offsets from buffer lifetimes ----------------===//
#include "MemoryPlan.h"

#include <algorithm>
#include <numeric>

namespace dlc::codegen {

namespace {

constexpr int64_t kNever = -2;

struct Life {
  int64_t first = kNever, last = kNever; // step indices; -1 before the first, n after the last
  uint64_t bytes = 0;                    // aligned
  bool used() const { return first != kNever; }
  bool overlaps(const Life &o) const { return first <= o.last && o.first <= last; }
};

} // namespace

MemoryPlanStats planMemory(Program &p, const std::vector<uint32_t> &pinned) {
  const size_t nb = p.buffers.size();
  const int64_t ns = static_cast<int64_t>(p.steps.size());
  std::vector<Life> life(nb);
  auto touch = [&](uint32_t b, int64_t s) {
    Life &l = life[b];
    l.first = l.used() ? std::min(l.first, s) : s;
    l.last = std::max(l.last, s);
  };
  for (int64_t s = 0; s < ns; ++s)
    forEachBufferRef(p.steps[s], [&](const BufferRef &r) { touch(r.buffer, s); });
  std::vector<bool> whole(nb, false);
  for (const TensorDesc &t : p.inputs)
    whole[t.buffer] = true;
  for (const TensorDesc &t : p.outputs)
    whole[t.buffer] = true;
  for (uint32_t b : pinned)
    whole[b] = true;
  for (size_t b = 0; b < nb; ++b) {
    if (whole[b]) {
      life[b].first = -1;
      life[b].last = ns;
    }
    life[b].bytes = arenaAligned(p.buffers[b].bytes);
  }

  MemoryPlanStats st;
  auto isArena = [&](size_t b) { return p.buffers[b].region == pkg::Region::Arena; };
  for (size_t b = 0; b < nb; ++b)
    if (isArena(b) && life[b].used())
      st.naiveBytes += life[b].bytes;

  // In-place merges: the output takes the input's memory when the input's (merged)
  // lifetime ends at the step that writes the output.
  std::vector<uint32_t> rep(nb);
  std::iota(rep.begin(), rep.end(), 0u);
  auto find = [&](uint32_t b) {
    while (rep[b] != b)
      b = rep[b] = rep[rep[b]];
    return b;
  };
  for (int64_t s = 0; s < ns; ++s) {
    const auto *l = std::get_if<LaunchStep>(&p.steps[s].op);
    if (!l)
      continue;
    for (const auto &[in, out] : l->inplace) {
      uint32_t r = find(in);
      if (r == out || rep[out] != out || whole[r] || whole[out] || !isArena(r) || !isArena(out) ||
          life[r].last != s || life[out].first != s || p.buffers[in].bytes != p.buffers[out].bytes)
        continue;
      rep[out] = r;
      life[r].last = life[out].last; // equal sizes: the merged buffer keeps its bytes
      ++st.inplaceMerges;
    }
  }

  // The bound: bytes live at each step (a sweep over lifetime endpoints).
  std::vector<uint32_t> order;
  for (uint32_t b = 0; b < nb; ++b)
    if (isArena(b) && life[b].used() && rep[b] == b)
      order.push_back(b);
  {
    std::vector<std::pair<int64_t, int64_t>> events; // (step, +bytes at first / -bytes after last)
    for (uint32_t b : order) {
      events.push_back({life[b].first, static_cast<int64_t>(life[b].bytes)});
      events.push_back({life[b].last + 1, -static_cast<int64_t>(life[b].bytes)});
    }
    std::sort(events.begin(), events.end(), [](const auto &a, const auto &b) {
      return a.first != b.first ? a.first < b.first : a.second < b.second; // frees first
    });
    int64_t live = 0;
    for (const auto &e : events) {
      live += e.second;
      st.maxLiveBytes = std::max(st.maxLiveBytes, static_cast<uint64_t>(live));
    }
  }

  // Greedy by size: the largest buffers first, each into the smallest gap that fits
  // among the placed buffers whose lifetimes overlap its own.
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    if (life[a].bytes != life[b].bytes)
      return life[a].bytes > life[b].bytes;
    return life[a].first < life[b].first;
  });
  std::vector<uint32_t> placed;
  uint64_t top = 0;
  for (uint32_t b : order) {
    std::vector<std::pair<uint64_t, uint64_t>> busy; // [offset, end) of overlapping buffers
    for (uint32_t o : placed)
      if (life[o].overlaps(life[b]))
        busy.push_back({p.buffers[o].offset, p.buffers[o].offset + life[o].bytes});
    std::sort(busy.begin(), busy.end());
    uint64_t best = UINT64_MAX, bestGap = UINT64_MAX, at = 0;
    for (const auto &[lo, hi] : busy) {
      if (lo > at && lo - at >= life[b].bytes && lo - at < bestGap) {
        bestGap = lo - at;
        best = at;
      }
      at = std::max(at, hi);
    }
    if (best == UINT64_MAX)
      best = at;
    p.buffers[b].offset = best;
    top = std::max(top, best + life[b].bytes);
    placed.push_back(b);
  }
  for (uint32_t b = 0; b < nb; ++b) {
    if (!isArena(b))
      continue;
    if (rep[b] != b)
      p.buffers[b].offset = p.buffers[find(b)].offset;
    else if (!life[b].used())
      p.buffers[b].offset = p.buffers[b].bytes = 0; // nothing references it: it needs no memory
  }
  p.arenaBytes = st.arenaBytes = top;
  return st;
}

} // namespace dlc::codegen

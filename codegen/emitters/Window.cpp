#include "Window.h"

#include "dlc/ir/OpHelpers.h"

namespace dlc::codegen {

using namespace ir;

Window3 windowOf(const Node &n, const Shape &x, const Shape &y, const Shape &kernel) {
  Window3 w;
  int64_t s = static_cast<int64_t>(x.size()) - 2, off = 3 - s;
  w.N = x[0];
  w.C = x[1];
  auto get = [&](const char *name, int64_t i, int64_t dflt) {
    const Attribute *a = n.attr(name);
    if (!a || a->ints().empty())
      return dflt;
    return a->ints()[i];
  };
  for (int64_t i = 0; i < s; ++i) {
    w.in[off + i] = x[2 + i];
    w.out[off + i] = y[2 + i];
    w.k[off + i] = kernel[i];
    w.stride[off + i] = get("strides", i, 1);
    w.dil[off + i] = n.def().findAttr("dilations") ? get("dilations", i, 1) : 1;
    w.padB[off + i] = get("pads", i, 0);
    w.padE[off + i] = get("pads", i + s, 0);
  }
  return w;
}

Shape channelsFirst(const Value *v) {
  return permuteShape(v->shape(), channelsFirstPerm(v->rank()));
}

} // namespace dlc::codegen

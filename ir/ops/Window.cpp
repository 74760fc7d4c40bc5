#include "Window.h"

namespace dlc::ir::ops {

llvm::Expected<Window> Window::fromNode(const Node &n, int64_t spatial, const Shape &kernel) {
  Window w;
  w.spatial = spatial;
  w.kernel = kernel.empty() ? n.attrInts("kernel_shape") : kernel;
  if (static_cast<int64_t>(w.kernel.size()) != spatial)
    return errorf("kernel has {0} dims, input has {1} spatial dims", w.kernel.size(), spatial);
  auto get = [&](const char *name, size_t len, int64_t dflt, Shape &dst) -> llvm::Error {
    const Attribute *a = n.attr(name);
    if (!a || a->ints().empty()) {
      dst.assign(len, dflt);
      return ok();
    }
    if (a->ints().size() != len)
      return errorf("attribute '{0}' must have {1} values, got {2}", name, len, a->ints().size());
    dst = a->ints();
    return ok();
  };
  Shape pads;
  if (auto e = get("strides", spatial, 1, w.strides))
    return e;
  if (auto e = get("pads", 2 * spatial, 0, pads))
    return e;
  if (n.def().findAttr("dilations")) {
    if (auto e = get("dilations", spatial, 1, w.dilations))
      return e;
  } else {
    w.dilations.assign(spatial, 1);
  }
  w.padBegin.assign(pads.begin(), pads.begin() + spatial);
  w.padEnd.assign(pads.begin() + spatial, pads.end());
  if (const Attribute *c = n.attr("ceil_mode"))
    w.ceilMode = c->i() != 0;
  for (int64_t i = 0; i < spatial; ++i) {
    if (w.kernel[i] < 1 || w.strides[i] < 1 || w.dilations[i] < 1)
      return makeError("kernel sizes, strides and dilations must be positive");
    if (w.padBegin[i] < 0 || w.padEnd[i] < 0)
      return makeError("pads must be non-negative");
  }
  return w;
}

int64_t Window::outSize(int64_t i, int64_t in) const {
  int64_t eff = dilations[i] * (kernel[i] - 1) + 1;
  int64_t span = in + padBegin[i] + padEnd[i] - eff;
  if (span < 0)
    return -1;
  if (!ceilMode)
    return span / strides[i] + 1;
  int64_t out = ceilDiv(span, strides[i]) + 1;
  // The last window must start inside the input or the leading padding.
  if ((out - 1) * strides[i] >= in + padBegin[i])
    --out;
  return out;
}

llvm::Expected<Shape> Window::outShape(const Shape &inSpatial) const {
  Shape r;
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t o = outSize(i, inSpatial[i]);
    if (o < 1)
      return errorf("window (kernel {0}, dilation {1}) does not fit spatial size {2} with pads",
                    kernel[i], dilations[i], inSpatial[i]);
    r.push_back(o);
  }
  return r;
}

Window Window::as3D() const {
  Window w = *this;
  int64_t add = 3 - spatial;
  auto pad = [&](Shape &s, int64_t v) { s.insert(s.begin(), add, v); };
  pad(w.kernel, 1);
  pad(w.strides, 1);
  pad(w.dilations, 1);
  pad(w.padBegin, 0);
  pad(w.padEnd, 0);
  w.spatial = 3;
  return w;
}

Shape spatial3D(const Shape &s, int64_t k) {
  Shape r(s.end() - k, s.end());
  r.insert(r.begin(), 3 - k, 1);
  return r;
}

llvm::Expected<AttrMap> Window::transposedAttrs(const Shape &inSpatial,
                                                const Shape &outSpatial) const {
  Shape pads = padBegin, outPad(spatial);
  pads.insert(pads.end(), padEnd.begin(), padEnd.end());
  for (int64_t i = 0; i < spatial; ++i) {
    outPad[i] = inSpatial[i] - ((outSpatial[i] - 1) * strides[i] - padBegin[i] - padEnd[i] +
                                dilations[i] * (kernel[i] - 1) + 1);
    if (outPad[i] < 0)
      return makeError("a window that extends past the padding (ceil_mode) is not differentiable");
  }
  return AttrMap{
      {"strides", strides}, {"dilations", dilations}, {"pads", pads}, {"output_padding", outPad}};
}

} // namespace dlc::ir::ops

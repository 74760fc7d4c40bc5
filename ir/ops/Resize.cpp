//===- Resize.cpp - Nearest, linear and cubic resampling -------------------===//
//
// Canonical IR form: `scales` (one per dim, used by the coordinate transform)
// and `sizes` (the output shape) are both explicit; the importer derives one from
// the other as ONNX specifies, and resolves `axes` and keep_aspect_ratio_policy.
// Interpolation is separable: each output coordinate gets, per dimension, a list
// of (input index, weight) taps; out-of-range taps clamp to the edge (or are
// dropped and the weights renormalized with exclude_outside).
//===----------------------------------------------------------------------===//
#include "OpUtils.h"
#include "dlc/ir/OpHelpers.h"

namespace dlc::ir {
namespace {
using namespace ops;

const char *const kModes[] = {"nearest", "linear", "cubic"};
const char *const kTransforms[] = {
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",  "align_corners",
    "asymmetric", "tf_crop_and_resize",   "tf_half_pixel_for_nn"};
const char *const kNearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

template <size_t N> bool oneOf(const std::string &s, const char *const (&list)[N]) {
  return std::any_of(std::begin(list), std::end(list), [&](const char *x) { return s == x; });
}

llvm::Error verifyResize(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  size_t rank = n.operand(0)->shape().size();
  if (n.attrFloats("scales").size() != rank || n.attrInts("sizes").size() != rank)
    return errorf("scales and sizes must have {0} entries", rank);
  for (float s : n.attrFloats("scales"))
    if (!(s > 0))
      return makeError("scales must be positive");
  if (!oneOf(n.attrString("mode"), kModes))
    return errorf("unsupported mode \"{0}\"", n.attrString("mode"));
  if (!oneOf(n.attrString("coordinate_transformation_mode"), kTransforms))
    return errorf("unsupported coordinate_transformation_mode \"{0}\"",
                  n.attrString("coordinate_transformation_mode"));
  if (!oneOf(n.attrString("nearest_mode"), kNearest))
    return errorf("unsupported nearest_mode \"{0}\"", n.attrString("nearest_mode"));
  if (n.attrString("coordinate_transformation_mode") == "tf_crop_and_resize" &&
      n.attrFloats("roi").size() != 2 * rank)
    return errorf("tf_crop_and_resize needs roi with {0} entries", 2 * rank);
  return ok();
}

InferResult inferResize(const Node &n) {
  return TypeList{{n.operand(0)->dtype(), n.attrInts("sizes")}};
}

using Tap = ResizeTap;

/// Input coordinate of output index `x` along one dim; nullopt means "outside the
/// crop" (tf_crop_and_resize extrapolation). As in ONNX, the resized length in these
/// formulas is scale * inLen, which is fractional when scales (not sizes) were given.
std::optional<double> sourceCoord(const std::string &mode, double x, double scale, int64_t inLen,
                                  int64_t outLenInt, double roiStart, double roiEnd) {
  double outLen = scale * inLen;
  if (mode == "half_pixel")
    return (x + 0.5) / scale - 0.5;
  if (mode == "half_pixel_symmetric") {
    double adjustment = outLenInt / outLen;
    double center = inLen / 2.0;
    double offset = center * (1 - adjustment);
    return offset + (x + 0.5) / scale - 0.5;
  }
  if (mode == "pytorch_half_pixel")
    return outLen > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners")
    return outLen == 1 ? 0.0 : x * (inLen - 1) / static_cast<double>(outLen - 1);
  if (mode == "asymmetric")
    return x / scale;
  if (mode == "tf_half_pixel_for_nn")
    return (x + 0.5) / scale;
  // tf_crop_and_resize
  double c = outLen > 1
                 ? roiStart * (inLen - 1) + x * (roiEnd - roiStart) * (inLen - 1) / (outLen - 1)
                 : 0.5 * (roiStart + roiEnd) * (inLen - 1);
  if (c < 0 || c > inLen - 1)
    return std::nullopt;
  return c;
}

std::vector<double> cubicCoeffs(double r, double a) {
  return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
          ((a + 2) * r - (a + 3)) * r * r + 1,
          ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
          ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a};
}

/// The interpolation filters of an antialiased resize at distance x (in input pixels,
/// widened by the downscaling factor): the triangle (linear) and the Keys cubic.
double antialiasFilter(bool cubic, double x, double a) {
  x = std::abs(x);
  if (!cubic)
    return x < 1 ? 1 - x : 0;
  if (x < 1)
    return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

/// Antialiased taps (Resize-18 antialias = 1, linear or cubic), as ONNX Runtime computes
/// them: when downscaling by 1/scale, the filter is stretched by that factor (a
/// support of 1 or 2 input pixels times it), centred on the output pixel's source
/// coordinate, and its weights normalized. Taps past the edge clamp to it, or are
/// dropped with exclude_outside.
std::vector<Tap> antialiasTaps(const Node &n, double x, int64_t inLen, double scale) {
  bool cubic = n.attrString("mode") == "cubic";
  double down = 1.0 / scale, support = (cubic ? 2.0 : 1.0) * std::max(down, 1.0);
  double invStretch = down >= 1 ? 1 / down : 1.0, center = x + 0.5;
  int64_t window = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  int64_t lo = static_cast<int64_t>(std::floor(center - support + 0.5));
  int64_t hi = static_cast<int64_t>(std::floor(center + support + 0.5));
  hi = lo + std::clamp<int64_t>(hi - lo, 0, window);
  bool exclude = n.attrInt("exclude_outside") != 0;
  if (exclude) {
    lo = std::clamp<int64_t>(lo, 0, inLen);
    hi = std::clamp<int64_t>(hi, 0, inLen);
  }
  std::vector<Tap> t;
  double total = 0;
  for (int64_t i = lo; i < hi; ++i) {
    double w =
        antialiasFilter(cubic, (i - center + 0.5) * invStretch, n.attrFloat("cubic_coeff_a"));
    t.push_back({std::clamp<int64_t>(i, 0, inLen - 1), w});
    total += w;
  }
  for (Tap &tp : t)
    tp.weight /= total == 0 ? 1.0 : total;
  return t;
}

/// Taps for one output coordinate of one dim; empty means extrapolate.
std::vector<Tap> taps(const Node &n, double x, int64_t inLen, double scale) {
  const std::string &mode = n.attrString("mode");
  if (n.attrInt("antialias") && mode != "nearest")
    return antialiasTaps(n, x, inLen, scale);
  std::vector<Tap> t;
  if (mode == "nearest") {
    const std::string &nm = n.attrString("nearest_mode");
    double f = std::floor(x);
    int64_t i;
    if (nm == "floor")
      i = static_cast<int64_t>(f);
    else if (nm == "ceil")
      i = static_cast<int64_t>(std::ceil(x));
    else if (x - f == 0.5)
      i = static_cast<int64_t>(nm == "round_prefer_floor" ? f : f + 1);
    else
      i = static_cast<int64_t>(std::round(x));
    t.push_back({std::clamp<int64_t>(i, 0, inLen - 1), 1.0});
    return t;
  }
  int64_t base = static_cast<int64_t>(std::floor(x));
  double r = x - base;
  if (mode == "linear") {
    t = {{base, 1 - r}, {base + 1, r}};
  } else {
    auto c = cubicCoeffs(r, n.attrFloat("cubic_coeff_a"));
    for (int k = 0; k < 4; ++k)
      t.push_back({base - 1 + k, c[k]});
  }
  bool exclude = n.attrInt("exclude_outside") != 0;
  double kept = 0;
  std::vector<Tap> out;
  for (Tap tp : t) {
    if (tp.index < 0 || tp.index >= inLen) {
      if (exclude)
        continue;
      tp.index = std::clamp<int64_t>(tp.index, 0, inLen - 1);
    }
    kept += tp.weight;
    out.push_back(tp);
  }
  if (exclude && kept != 0)
    for (Tap &tp : out)
      tp.weight /= kept;
  return out;
}

llvm::Error refResize(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &is = in[0]->shape(), &os = out[0].shape();
  size_t rank = is.size();
  double extrapolation = n.attrFloat("extrapolation_value");
  auto table = resizeTapTable(n);
  auto x = in[0]->toVector<double>();
  Shape st = stridesOf(is);
  std::vector<double> y(out[0].numElements());
  std::vector<int64_t> coord(rank);
  for (int64_t i = 0; i < out[0].numElements(); ++i) {
    int64_t rem = i;
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      coord[d] = rem % os[d];
      rem /= os[d];
    }
    bool outside = false;
    for (size_t d = 0; d < rank; ++d)
      outside |= table[d][coord[d]].empty();
    if (outside) {
      y[i] = extrapolation;
      continue;
    }
    // Sum over the cartesian product of the per-dim taps.
    double acc = 0;
    std::vector<size_t> k(rank, 0);
    for (;;) {
      double w = 1;
      int64_t off = 0;
      for (size_t d = 0; d < rank; ++d) {
        const Tap &tp = table[d][coord[d]][k[d]];
        w *= tp.weight;
        off += tp.index * st[d];
      }
      acc += w * x[off];
      size_t d = rank;
      while (d > 0 && ++k[d - 1] == table[d - 1][coord[d - 1]].size())
        k[--d] = 0;
      if (d == 0)
        break;
    }
    y[i] = acc;
  }
  if (isFloat(out[0].dtype())) {
    out[0] = Tensor::fromVector(out[0].type(), y);
  } else { // integer images round to nearest
    for (auto &v : y)
      v = std::nearbyint(v);
    out[0] = Tensor::fromVector(out[0].type(), y);
  }
  return ok();
}

} // namespace

std::vector<std::vector<std::vector<ResizeTap>>> resizeTapTable(const Node &n) {
  const Shape &is = n.operand(0)->shape(), &os = n.result()->shape();
  const auto &scales = n.attrFloats("scales");
  const auto &roi = n.attrFloats("roi");
  const std::string &ctm = n.attrString("coordinate_transformation_mode");
  size_t rank = is.size();
  std::vector<std::vector<std::vector<Tap>>> table(rank);
  for (size_t d = 0; d < rank; ++d) {
    table[d].resize(os[d]);
    for (int64_t x = 0; x < os[d]; ++x) {
      double rs = roi.empty() ? 0 : roi[d], re = roi.empty() ? 1 : roi[d + rank];
      auto c = is[d] == os[d] && scales[d] == 1.0f && ctm != "tf_crop_and_resize"
                   ? std::optional<double>(x)
                   : sourceCoord(ctm, x, scales[d], is[d], os[d], rs, re);
      if (c)
        table[d][x] = taps(n, *c, is[d], scales[d]);
    }
  }
  return table;
}

void defineResizeOps(OpTable &t) {
  t.def(OpKind::Resize)
      .operands(1)
      .attr("antialias", AttrKind::Int, int64_t{0})
      .attr("coordinate_transformation_mode", AttrKind::String, "half_pixel")
      .attr("cubic_coeff_a", AttrKind::Float, -0.75f)
      .attr("exclude_outside", AttrKind::Int, int64_t{0})
      .attr("extrapolation_value", AttrKind::Float, 0.0f)
      .attr("mode", AttrKind::String, "nearest")
      .attr("nearest_mode", AttrKind::String, "round_prefer_floor")
      .attr("roi", AttrKind::Floats, std::vector<float>{})
      .attr("scales", AttrKind::Floats)
      .attr("sizes", AttrKind::Ints)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::axisAttrs())
      .verify(verifyResize)
      .infer(inferResize)
      .reference(refResize);
}

} // namespace dlc::ir

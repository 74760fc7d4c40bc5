#include "Common.h"

namespace dlc::frontend {

std::vector<ir::Value *> allInputs(NodeImporter &ni) {
  std::vector<ir::Value *> v;
  for (size_t i = 0; i < ni.numInputs(); ++i)
    v.push_back(ni.input(i));
  while (!v.empty() && !v.back())
    v.pop_back();
  return v;
}

llvm::Error single(NodeImporter &ni, llvm::Expected<ir::Value *> v) {
  if (!v)
    return v.takeError();
  ni.setOutput(0, *v);
  return llvm::Error::success();
}

std::vector<int64_t> wrapAxes(std::vector<int64_t> axes, int64_t rank) {
  for (auto &a : axes)
    if (a < 0)
      a += rank;
  return axes;
}

llvm::Expected<std::vector<int64_t>> resolvePads(NodeImporter &ni, const ir::Shape &in,
                                                 const ir::Shape &kernel, const ir::Shape &strides,
                                                 const ir::Shape &dilations) {
  size_t k = in.size();
  std::string autoPad = ni.attrString("auto_pad", "NOTSET");
  if (autoPad == "NOTSET") {
    auto pads = ni.attrInts("pads");
    if (pads.empty())
      pads.assign(2 * k, 0);
    if (pads.size() != 2 * k)
      return ni.error("pads must have " + std::to_string(2 * k) + " values");
    return pads;
  }
  if (autoPad == "VALID")
    return std::vector<int64_t>(2 * k, 0);
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER")
    return ni.unsupported("auto_pad \"" + autoPad + "\"");
  std::vector<int64_t> pads(2 * k);
  for (size_t i = 0; i < k; ++i) {
    int64_t s = strides.empty() ? 1 : strides[i];
    int64_t d = dilations.empty() ? 1 : dilations[i];
    int64_t out = (in[i] + s - 1) / s;
    int64_t total = std::max<int64_t>(0, (out - 1) * s + (kernel[i] - 1) * d + 1 - in[i]);
    int64_t small = total / 2, big = total - small;
    pads[i] = autoPad == "SAME_UPPER" ? small : big;
    pads[i + k] = autoPad == "SAME_UPPER" ? big : small;
  }
  return pads;
}

} // namespace dlc::frontend

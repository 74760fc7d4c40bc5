//===- Precision.cpp - Mixed-precision options of dlc compile/opt ----------===//
#include "Precision.h"

#include "llvm/ADT/StringRef.h"

namespace dlc::tool {

std::vector<OptSpec> precisionOptionSpecs(bool withTf32) {
  std::vector<OptSpec> s = {
      {"fp16", 0, false, false, "",
       "Mixed precision: FP16 where the op table allows (FP32 accumulation)"},
      {"bf16", 0, false, false, "",
       "Mixed precision: BF16 where the op table allows (FP32 accumulation)"},
      {"io-dtype", 0, true, false, "fp32|fp16",
       "Dtype of the graph's float inputs and outputs with --fp16/--bf16 (default fp32: as "
       "declared)"},
      {"fp32-ops", 0, true, true, "OPS",
       "Keep these ops in FP32 (comma-separated, e.g. LayerNormalization,Softmax)"},
      {"fp32-nodes", 0, true, true, "NAMES",
       "Keep these nodes in FP32 (comma-separated node names)"},
      {"layout", 0, true, false, "auto|nchw|nhwc",
       "Tensor layout of convolution regions (default auto: NHWC for conv nets in FP16/BF16)"}};
  if (withTf32)
    s.push_back(
        {"tf32", 0, false, false, "", "FP32 GEMMs and convolutions on tensor cores in TF32"});
  return s;
}

namespace {
void splitInto(const std::vector<std::string> &values, std::set<std::string, std::less<>> &out) {
  for (const std::string &v : values) {
    llvm::SmallVector<llvm::StringRef, 8> parts;
    llvm::StringRef(v).split(parts, ',', -1, false);
    for (llvm::StringRef p : parts)
      if (!p.trim().empty())
        out.insert(p.trim().str());
  }
}
} // namespace

llvm::Expected<std::optional<passes::PrecisionOptions>> precisionFromArgs(const Args &args) {
  bool fp16 = args.has("fp16"), bf16 = args.has("bf16");
  if (fp16 && bf16)
    return ir::makeError("--fp16 and --bf16 exclude each other");
  bool overrides = args.has("io-dtype") || args.has("fp32-ops") || args.has("fp32-nodes");
  if (!fp16 && !bf16) {
    if (overrides)
      return ir::makeError("--io-dtype, --fp32-ops and --fp32-nodes need --fp16 or --bf16");
    return std::nullopt;
  }
  passes::PrecisionOptions po;
  po.reduced = bf16 ? ir::DType::BF16 : ir::DType::F16;
  std::string io = args.getOr("io-dtype", "fp32");
  if (io == "fp16" || io == "bf16" || io == "reduced")
    po.ioReduced = true;
  else if (io != "fp32")
    return ir::errorf("--io-dtype must be fp32 or fp16, got '{0}'", io);
  if (po.ioReduced && io == (bf16 ? "fp16" : "bf16"))
    return ir::errorf("--io-dtype {0} does not match --{1}", io, bf16 ? "bf16" : "fp16");
  splitInto(args.getAll("fp32-ops"), po.fp32Ops);
  splitInto(args.getAll("fp32-nodes"), po.fp32Nodes);
  for (const std::string &op : po.fp32Ops)
    if (!ir::opKindFromName(op))
      return ir::errorf("--fp32-ops: unknown op '{0}' (see `dlc ops`)", op);
  return po;
}

llvm::Expected<passes::LayoutMode> layoutFromArgs(const Args &args) {
  std::string v = args.getOr("layout", "auto");
  if (v == "auto")
    return passes::LayoutMode::Auto;
  if (v == "nchw")
    return passes::LayoutMode::NCHW;
  if (v == "nhwc")
    return passes::LayoutMode::NHWC;
  return ir::errorf("--layout must be auto, nchw or nhwc, got '{0}'", v);
}

} // namespace dlc::tool

//===- Options.cpp - The option groups several dlc commands share -----------===//
#include "Options.h"

#include "dlc/driver/Tensors.h"

#include "llvm/ADT/StringRef.h"

#include <cmath>

namespace dlc::tool {

//===--- import ------------------------------------------------------------===//

std::vector<OptSpec> importOptionSpecs() {
  return {{"input-shape", 0, true, true, "NAME=D0,D1,..",
           "Shape of an input with symbolic dims (repeatable). dlc compile: a dimension may be a "
           "range\n"
           "MIN..MAX (x=1..32,3,224,224): one package serves every shape in it"},
          {"bind", 0, true, true, "NAME=VALUES|FILE",
           "Bind an input to a constant at compile time: comma-separated values of its dtype, or a "
           ".npy/.pb "
           "file (repeatable). Shape inputs, axes and If conditions then fold; the input leaves "
           "the package"},
          {"max-loop-unroll", 0, true, false, "N",
           "Loops are unrolled at compile time; a trip count above N is an error (default 256)"},
          {"max-unrolled-nodes", 0, true, false, "N",
           "All unrolled loop bodies together (nested loops multiply) import at most N nodes\n"
           "(default 200000)"},
          {"loop-bound", 0, true, false, "N",
           "Loops whose trip count is known only at run time (an input, a while loop) run up to N\n"
           "iterations, unrolled and gated; a run that needs more fails naming the loop (default: "
           "refused)"},
          {"no-check", 0, false, false, "", "Skip onnx::checker"}};
}

llvm::Expected<ir::Tensor> readIrTensor(const std::string &path, const std::string &option) {
  auto h = driver::readTensorFile(path);
  if (!h)
    return ir::errorf("{0}: {1}", option, h.status().message());
  auto t = driver::irTensor(*h, path);
  if (!t)
    return ir::errorf("{0}: {1}", option, llvm::toString(t.takeError()));
  return t;
}

llvm::Expected<frontend::ImportOptions>
importOptionsFromArgs(const Args &args, std::vector<driver::InputShape> *ranges) {
  frontend::ImportOptions opts;
  for (const std::string &spec : args.getAll("input-shape")) {
    auto p = driver::parseInputShape(spec);
    if (!p)
      return p.takeError();
    if (!p->ranged())
      opts.inputShapes[p->name] = p->min;
    else if (ranges)
      ranges->push_back(*p);
    else
      return ir::errorf("--input-shape {0}: shape ranges are for dlc compile; give one shape here",
                        spec);
  }
  for (const std::string &spec : args.getAll("bind")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return ir::errorf("--bind expects NAME=VALUES or NAME=FILE.npy, got '{0}'", spec);
    std::string name = spec.substr(0, eq), value = spec.substr(eq + 1);
    if (opts.bindings.count(name) || opts.bindingText.count(name))
      return ir::errorf("--bind: '{0}' is bound twice", name);
    llvm::StringRef v(value);
    if (v.endswith(".npy") || v.endswith(".pb")) {
      auto t = readIrTensor(value, "--bind " + name);
      if (!t)
        return t.takeError();
      opts.bindings[name] = std::move(*t);
    } else {
      opts.bindingText[name] = value;
    }
  }
  if (args.has("max-loop-unroll")) {
    std::string v = args.getOr("max-loop-unroll", "");
    if (llvm::StringRef(v).getAsInteger(10, opts.maxLoopUnroll) || opts.maxLoopUnroll < 0 ||
        opts.maxLoopUnroll > 100000)
      return ir::errorf("--max-loop-unroll expects an integer in [0, 100000], got '{0}'", v);
  }
  if (args.has("max-unrolled-nodes")) {
    std::string v = args.getOr("max-unrolled-nodes", "");
    if (llvm::StringRef(v).getAsInteger(10, opts.maxUnrolledNodes) || opts.maxUnrolledNodes < 1 ||
        opts.maxUnrolledNodes > 10000000)
      return ir::errorf("--max-unrolled-nodes expects an integer in [1, 10000000], got '{0}'", v);
  }
  if (args.has("loop-bound")) {
    std::string v = args.getOr("loop-bound", "");
    if (llvm::StringRef(v).getAsInteger(10, opts.loopBound) || opts.loopBound < 1 ||
        opts.loopBound > opts.maxLoopUnroll)
      return ir::errorf(
          "--loop-bound expects an integer in [1, {0}] (--max-loop-unroll), got '{1}'",
          opts.maxLoopUnroll, v);
  }
  opts.runChecker = !args.has("no-check");
  opts.initializersAsVariables = args.has("train");
  return opts;
}

//===--- precision and layout ----------------------------------------------===//

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
       "Tensor layout of convolution regions (default auto: NHWC for conv nets in "
       "FP16/BF16, or in FP32 with TF32)"},
      {"gemm-epilogue", 0, true, false, "auto|library|fused",
       "FP16/BF16 MatMuls by constant weights followed by element-wise work cuBLASLt cannot\n"
       "apply (Clip, exact GELU, a Cast): cuBLASLt plus a kernel for that work (library), or\n"
       "the kernel library's implicit GEMM with it fused (fused); default auto: the cost\n"
       "model's choice. Applies where the layout pass runs (FP16/BF16, not --layout nchw)"}};
  if (withTf32) {
    s.push_back({"tf32", 0, false, false, "",
                 "Every FP32 GEMM and eligible convolution on tensor cores in TF32 (default, "
                 "except with --train: GEMMs, and convolutions where the model prices TF32 "
                 "faster)"});
    s.push_back({"no-tf32", 0, false, false, "",
                 "Strict FP32: no TF32 rounding of FP32 GEMM and convolution inputs"});
  }
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
  return passes::parseLayoutMode(args.getOr("layout", "auto"));
}

llvm::Expected<passes::GemmEpilogueMode> gemmEpilogueFromArgs(const Args &args) {
  return passes::parseGemmEpilogueMode(args.getOr("gemm-epilogue", "auto"));
}

passes::PassManagerOptions passManagerFromArgs(const Args &args) {
  passes::PassManagerOptions o;
  o.printAfterAll = args.has("print-ir-after-all");
  o.verifyEach = args.has("verify-each");
  return o;
}

//===--- training ----------------------------------------------------------===//

std::vector<OptSpec> trainingOptionSpecs() {
  return {
      {"train", 0, false, false, "",
       "Compile the training step (forward, backward, optimizer update)"},
      {"loss", 0, true, false, "KIND",
       "--train: cross-entropy (class indices, default), mse, or none (the model outputs its "
       "loss)"},
      {"label", 0, true, false, "NAME", "--train: the label input the loss adds (default 'label')"},
      {"optimizer", 0, true, false, "KIND", "--train: sgd (default), momentum, adam or adamw"},
      {"lr", 0, true, false, "F", "--train: learning rate (default 0.01)"},
      {"momentum", 0, true, false, "F", "--train: momentum (default 0.9)"},
      {"beta1", 0, true, false, "F", "--train: Adam's beta1 (default 0.9)"},
      {"beta2", 0, true, false, "F", "--train: Adam's beta2 (default 0.999)"},
      {"eps", 0, true, false, "F", "--train: Adam's epsilon (default 1e-8)"},
      {"weight-decay", 0, true, false, "F",
       "--train: L2 weight decay (decoupled for adamw; default 0)"},
      {"freeze", 0, true, false, "REGEX", "--train: initializers whose name matches stay constant"},
      {"loss-scale", 0, true, false, "F",
       "--train --fp16: the initial dynamic loss scale (default 65536; halved on each\n"
       "overflowed, skipped step, doubled after 2000 clean ones)"},
      {"data-parallel", 0, false, false, "",
       "--train: average the gradients over the ranks of `dlc train --nproc N` or mpirun\n"
       "(bucketed all-reduces that overlap the backward pass; any number of ranks)"},
      {"bucket-mb", 0, true, false, "F",
       "--data-parallel: the gradient bucket size in MiB (default 25, as PyTorch DDP)"},
      {"zero", 0, true, false, "N",
       "--data-parallel: ZeRO-1, the optimizer state sharded over exactly N ranks (each\n"
       "averages and steps only its share of the parameters; runs on N ranks only)"},
      {"sync-batchnorm", 0, false, false, "",
       "--data-parallel: BatchNorm normalizes with the global batch's statistics (averaged\n"
       "over the ranks) instead of each replica's"},
      {"fused-attention-dropout", 0, false, false, "",
       "--train: FP16/BF16 attention with Dropout on its probabilities trains as one fused\n"
       "attention too (the Sq x Sk probabilities and mask never stored, about twice the\n"
       "attention's time: each kernel draws the Philox mask again); default: op by op"}};
}

llvm::Expected<std::optional<passes::TrainingOptions>> trainingFromArgs(const Args &args) {
  static const char *kTrainOnly[] = {
      "loss",         "label",          "optimizer",  "lr",
      "momentum",     "beta1",          "beta2",      "eps",
      "weight-decay", "freeze",         "loss-scale", "data-parallel",
      "bucket-mb",    "sync-batchnorm", "zero",       "fused-attention-dropout"};
  if (!args.has("train")) {
    for (const char *o : kTrainOnly)
      if (args.has(o))
        return ir::errorf("--{0} goes with --train", o);
    return std::nullopt;
  }
  passes::TrainingOptions t;
  if (auto l = args.get("loss")) {
    auto k = passes::parseLossKind(*l);
    if (!k)
      return k.takeError();
    t.loss = *k;
  }
  if (auto o = args.get("optimizer")) {
    auto k = passes::parseOptimizerKind(*o);
    if (!k)
      return k.takeError();
    t.optimizer = *k;
  }
  t.label = args.getOr("label", t.label);
  // Numbers are parsed here; their ranges are passes::validateTrainingOptions's.
  auto number = [&](const char *name, double &to) -> llvm::Error {
    auto v = args.get(name);
    if (!v)
      return llvm::Error::success();
    char *end = nullptr;
    double d = std::strtod(v->c_str(), &end);
    if (v->empty() || *end)
      return ir::errorf("--{0} must be a number, got '{1}'", name, *v);
    to = d;
    return llvm::Error::success();
  };
  double bucketMb = static_cast<double>(passes::kDefaultBucketBytes) / (1 << 20), zero = 0;
  for (auto [name, to] : {std::pair<const char *, double *>{"lr", &t.lr},
                          {"momentum", &t.momentum},
                          {"beta1", &t.beta1},
                          {"beta2", &t.beta2},
                          {"eps", &t.eps},
                          {"weight-decay", &t.weightDecay},
                          {"loss-scale", &t.initLossScale},
                          {"bucket-mb", &bucketMb},
                          {"zero", &zero}})
    if (auto e = number(name, *to))
      return e;
  if (auto f = args.get("freeze"))
    t.freeze = *f;
  if (args.has("loss-scale") && !args.has("fp16"))
    return ir::makeError(
        "--loss-scale goes with --fp16 (BF16 and FP32 training need no loss scaling)");
  for (const char *o : {"bucket-mb", "sync-batchnorm", "zero"})
    if (args.has(o) && !args.has("data-parallel"))
      return ir::errorf("--{0} goes with --data-parallel", o);
  t.syncBatchNorm = args.has("sync-batchnorm");
  t.fuseAttentionDropout = args.has("fused-attention-dropout");
  if (args.has("zero")) {
    if (zero != std::floor(zero) || zero < 2 || zero > 65536)
      return ir::errorf("--zero must be a number of ranks in [2, 65536], got '{0}'",
                        args.getOr("zero", ""));
    t.zeroRanks = static_cast<int64_t>(zero);
  }
  if (args.has("data-parallel")) {
    if (!std::isfinite(bucketMb) || bucketMb <= 0 || bucketMb > 1 << 20)
      return ir::errorf("--bucket-mb must be a number of MiB in (0, 1048576], got '{0}'",
                        args.getOr("bucket-mb", ""));
    t.bucketBytes = std::max<uint64_t>(1, static_cast<uint64_t>(bucketMb * (1 << 20)));
  }
  if (auto e = passes::validateTrainingOptions(t))
    return e;
  return t;
}

} // namespace dlc::tool

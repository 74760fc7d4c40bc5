//===- QuantizeCommand.cpp - `dlc quantize`: INT8 post-training quantization ===//
#include "Args.h"
#include "Commands.h"
#include "Options.h"
#include "dlc/driver/Quantize.h"
#include "dlc/support/Files.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <unistd.h>

namespace dlc::tool {

int runQuantize(const std::vector<std::string> &argv) {
  std::vector<OptSpec> specs = {
      {"calibrate", 0, true, false, "DATA.npz", "Calibration data (required)"},
      {"output", 'o', true, false, "OUT.onnx", "The QDQ model (required; written atomically)"},
      {"eval-data", 0, true, false, "DATA.npz",
       "Measure on this data instead of the calibration data (held out); an int array\n"
       "'labels' (one class per row of the first output) gives accuracy too"},
      {"method", 0, true, false, "M",
       "Activation ranges: entropy (the INT8 default; TensorRT's), minmax (the FP8\n"
       "default) or percentile"},
      {"fp8", 0, false, false, "",
       "FP8 (float8 e4m3fn) activations and weights instead of INT8, biases in FP32;\n"
       "written at opset 19 (Hopper and Ada GPUs compute FP8; ONNX Runtime and dlc run it\n"
       "anywhere)"},
      {"percentile", 0, true, false, "P", "--method percentile: keep P% of values (99.99)"},
      {"per-tensor-weights", 0, false, false, "", "One scale per weight, not per channel"},
      {"exclude", 0, true, true, "NODE|OP", "Leave a layer, or every layer of an op type, in FP32"},
      {"target-accuracy", 0, true, false, "A",
       "Leave the most sensitive layers in FP32 until accuracy (or top-1 agreement with\n"
       "FP32 without labels) reaches A (0.99 or 99%)"},
      {"no-sensitivity", 0, false, false, "", "Do not measure each layer alone (faster)"},
      {"json", 0, false, false, "", "Print the report as JSON"},
      {"device", 0, true, false, "D",
       "Where calibration and measurement run: auto (default), cuda or emu"},
      {"threads", 0, true, false, "N", "emu: worker threads (default: all cores)"},
      {"no-cache", 0, false, false, "", "Do not use the compilation cache"},
      {"cache-dir", 0, true, false, "DIR", "Compilation cache (default ~/.cache/dlc)"},
      {"quiet", 'q', false, false, "", "Only errors and the report"}};
  for (OptSpec &o : importOptionSpecs())
    if (o.name != "no-check") // (the models it compiles are its own)
      specs.push_back(std::move(o));
  ArgParser parser(
      "quantize", "MODEL.onnx --calibrate DATA.npz -o OUT.onnx [options]",
      "Quantizes an FP32 model to INT8 (or FP8) and writes it as standard QDQ ONNX "
      "(QuantizeLinear\n"
      "and DequantizeLinear around each Conv, MatMul and Gemm), which dlc and ONNX Runtime\n"
      "run. The model runs on the calibration data (arrays named after its inputs,\n"
      "samples along the first dimension) to set each activation's scale; weights are\n"
      "per output channel. Before writing, the quantized model is measured against FP32\n"
      "(outputs, top-1 agreement, and accuracy when the data has 'labels'), with each\n"
      "layer's error when it alone is quantized; the report lists every layer.",
      std::move(specs));
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "model file");
  if (!args)
    return exitCode;
  driver::QuantizeOptions o;
  o.model = args->positionals()[0];
  o.output = args->getOr("output", "");
  std::string calib = args->getOr("calibrate", "");
  if (calib.empty() || o.output.empty()) {
    reportError("quantize: --calibrate DATA.npz and -o OUT.onnx are required");
    return 2;
  }
  if (Status s = refuseOverwrite(o.output, "-o",
                                 {{o.model, "model"},
                                  {calib, "calibration data"},
                                  {args->getOr("eval-data", ""), "evaluation data"}})) {
    reportError(s.message());
    return 2;
  }
  o.fp8 = args->has("fp8");
  if (o.fp8)
    o.method = driver::CalibrationMethod::MinMax;
  if (auto m = args->get("method")) {
    auto method = driver::parseCalibrationMethod(*m);
    if (!method) {
      reportError("quantize: --method must be entropy, minmax or percentile, got '" + *m + "'");
      return 2;
    }
    // (Entropy calibration chooses among INT8's 128 evenly spaced levels: not FP8's.)
    if (o.fp8 && *method == driver::CalibrationMethod::Entropy) {
      reportError("quantize: --fp8 takes --method minmax (its default) or percentile; entropy "
                  "calibration fits INT8's evenly spaced levels");
      return 2;
    }
    o.method = *method;
  }
  auto number = [&](const char *name, double lo, double hi, double &out, bool percentOk) {
    std::string v = *args->get(name);
    bool pct = percentOk && !v.empty() && v.back() == '%';
    if (pct)
      v.pop_back();
    char *end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !std::isfinite(x))
      return false;
    if (pct)
      x /= 100;
    out = x;
    return x >= lo && x <= hi;
  };
  if (args->has("percentile") && (!number("percentile", 50, 100, o.percentile, false) ||
                                  o.method != driver::CalibrationMethod::Percentile)) {
    reportError("quantize: --percentile takes a percentage in [50, 100], with --method percentile");
    return 2;
  }
  if (args->has("target-accuracy")) {
    double t = 0;
    if (!number("target-accuracy", 0, 1, t, true) || t <= 0) {
      reportError("quantize: --target-accuracy takes a fraction in (0, 1] or a percentage (99%)");
      return 2;
    }
    o.targetAccuracy = t;
  }
  o.perChannel = !args->has("per-tensor-weights");
  o.exclude = args->getAll("exclude");
  o.sensitivity = !args->has("no-sensitivity");
  std::string device = args->getOr("device", "auto");
  if (device == "emu")
    o.device = rt::DeviceKind::Emu;
  else if (device == "cuda")
    o.device = rt::DeviceKind::Cuda;
  else if (device != "auto") {
    reportError("quantize: --device must be auto, cuda or emu");
    return 2;
  }
  if (auto t = args->get("threads")) {
    char *end = nullptr;
    long n = std::strtol(t->c_str(), &end, 10);
    if (t->empty() || *end || n < 0 || n > rt::kMaxEmuThreads) {
      reportError("quantize: --threads must be 0 to " + std::to_string(rt::kMaxEmuThreads));
      return 2;
    }
    o.emuThreads = static_cast<int>(n);
  }
  o.useCache = !args->has("no-cache");
  o.cacheDir = args->getOr("cache-dir", "");
  auto import = importOptionsFromArgs(*args);
  if (!import) {
    reportError(import.takeError());
    return 2;
  }
  o.import = std::move(*import);

  auto data = readNpzFile(calib);
  if (!data) {
    reportError(data.status().message());
    return 1;
  }
  o.calibration = std::move(*data);
  o.calibrationName = calib;
  if (auto e = args->get("eval-data")) {
    auto d = readNpzFile(*e);
    if (!d) {
      reportError(d.status().message());
      return 1;
    }
    o.evaluation = std::move(*d);
    o.evaluationName = *e;
  }

  // Progress: a bar on a terminal, one line per phase elsewhere.
  bool quiet = args->has("quiet"), tty = !quiet && ::isatty(2);
  std::string phase;
  if (!quiet)
    o.log = [&](const std::string &p) {
      phase = p;
      llvm::errs() << (tty ? "\r\x1b[K" : "") << "dlc: " << p << (tty ? "" : "\n");
      llvm::errs().flush();
    };
  if (tty)
    o.onStep = [&](size_t done, size_t total) {
      constexpr size_t width = 24;
      size_t filled = total ? done * width / total : width;
      llvm::errs() << "\r\x1b[Kdlc: " << phase << " [" << std::string(filled, '#')
                   << std::string(width - filled, '.') << "] " << done << "/" << total;
      llvm::errs().flush();
    };
  auto report = driver::quantize(o);
  if (tty)
    llvm::errs() << "\r\x1b[K";
  if (!report) {
    reportError(report.takeError());
    return 1;
  }
  llvm::outs() << (args->has("json") ? report->json() : report->text());
  if (!quiet)
    llvm::errs() << "dlc: wrote " << o.output << " ("
                 << llvm::format("%.2f MB", report->outputBytes / 1e6) << ")\n";
  if (!report->targetMet) {
    reportError("the target accuracy was not met, even with every layer in FP32 (the file "
                "was written: see the report)");
    return 3;
  }
  return 0;
}

} // namespace dlc::tool

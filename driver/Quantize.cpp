//===- Quantize.cpp - dlc quantize: calibrate and write a QDQ model -------===//
//
// 1. The FP32 model, with each tensor to calibrate added as an output, is compiled
//    and run over the calibration data: a first pass finds each tensor's largest
//    |x|, a second (percentile, entropy) fills a 2048-bin histogram of |x| up to it.
// 2. Each tensor's threshold gives its scale (threshold / 127); the QDQ model is
//    written (frontend/onnx/Qdq.cpp), compiled and run on the evaluation data, and
//    its outputs compared with FP32's.
// 3. Each layer alone quantized gives its sensitivity; with a target, the most
//    sensitive layers go back to FP32 one by one until the target is met.
// Every model runs through dlc itself (compile, then a session), on emu or a GPU.
//===----------------------------------------------------------------------===//
#include "dlc/driver/Quantize.h"

#include "dlc/driver/Compile.h"
#include "dlc/frontend/Qdq.h"
#include "dlc/ir/Graph.h"
#include "dlc/package/Package.h"
#include "dlc/support/Files.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dlc::driver {

const char *calibrationMethodName(CalibrationMethod m) {
  switch (m) {
  case CalibrationMethod::MinMax:
    return "minmax";
  case CalibrationMethod::Percentile:
    return "percentile";
  case CalibrationMethod::Entropy:
    return "entropy";
  }
  return "?";
}

std::optional<CalibrationMethod> parseCalibrationMethod(const std::string &s) {
  for (CalibrationMethod m :
       {CalibrationMethod::MinMax, CalibrationMethod::Percentile, CalibrationMethod::Entropy})
    if (s == calibrationMethodName(m))
      return m;
  return std::nullopt;
}

float percentileThreshold(const std::vector<uint64_t> &counts, double binWidth, double percentile) {
  uint64_t total = 0;
  for (uint64_t c : counts)
    total += c;
  if (total == 0)
    return 0;
  double want = total * std::clamp(percentile, 0.0, 100.0) / 100.0;
  uint64_t seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (static_cast<double>(seen) >= want)
      return static_cast<float>((i + 1) * binWidth);
  }
  return static_cast<float>(counts.size() * binWidth);
}

float entropyThreshold(const std::vector<uint64_t> &counts, double binWidth, int levels) {
  size_t bins = counts.size(), L = static_cast<size_t>(std::max(levels, 1));
  // The last bin with values: beyond it every candidate sees the same distribution.
  size_t used = bins;
  while (used > 0 && counts[used - 1] == 0)
    --used;
  if (used <= L)
    return static_cast<float>(std::max<size_t>(used, 1) * binWidth);
  double bestKl = INFINITY;
  size_t best = used;
  std::vector<double> p, q;
  for (size_t i = L; i <= used; ++i) {
    // P: the first i bins, the values beyond clipped into the last.
    p.assign(counts.begin(), counts.begin() + i);
    double outliers = 0;
    for (size_t k = i; k < bins; ++k)
      outliers += static_cast<double>(counts[k]);
    p[i - 1] += outliers;
    // Q: the first i bins merged into L levels, each level's count spread over the
    // bins of it that P has values in.
    q.assign(i, 0.0);
    for (size_t j = 0; j < L; ++j) {
      size_t lo = j * i / L, hi = (j + 1) * i / L;
      double sum = 0;
      size_t nonzero = 0;
      for (size_t k = lo; k < hi; ++k) {
        sum += static_cast<double>(counts[k]);
        nonzero += p[k] != 0;
      }
      for (size_t k = lo; k < hi; ++k)
        q[k] = p[k] != 0 ? sum / static_cast<double>(nonzero) : 0.0;
    }
    double sp = 0, sq = 0;
    for (size_t k = 0; k < i; ++k)
      sp += p[k], sq += q[k];
    double kl = 0;
    for (size_t k = 0; k < i && std::isfinite(kl); ++k) {
      if (p[k] == 0)
        continue;
      double pk = p[k] / sp, qk = q[k] / sq;
      kl = qk > 0 ? kl + pk * std::log(pk / qk) : INFINITY;
    }
    if (kl < bestKl - 1e-12) {
      bestKl = kl;
      best = i;
    }
  }
  return static_cast<float>(best * binWidth);
}

namespace {

constexpr size_t kBins = 2048;

/// A tensor's calibration statistics: its largest |x|, then a histogram of |x|.
struct Stats {
  float absMax = 0;
  std::vector<uint64_t> counts;
  void range(const float *p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(p[i]))
        absMax = std::max(absMax, std::fabs(p[i]));
  }
  void histogram(const float *p, size_t n) {
    counts.resize(kBins);
    if (absMax <= 0)
      return;
    double scale = kBins / static_cast<double>(absMax);
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(p[i]))
        counts[std::min<size_t>(static_cast<size_t>(std::fabs(p[i]) * scale), kBins - 1)]++;
  }
  float threshold(CalibrationMethod m, double percentile) const {
    double width = absMax / kBins;
    switch (m) {
    case CalibrationMethod::MinMax:
      return absMax;
    case CalibrationMethod::Percentile:
      return std::min(absMax, percentileThreshold(counts, width, percentile));
    case CalibrationMethod::Entropy: {
      // The zeros a ReLU makes would dominate a continuous distribution: bin 0
      // counts as bin 1 does (as NVIDIA's PyTorch quantization toolkit does), unless
      // bin 1 is empty (values on a coarse grid, as 8-bit pixels, where it would
      // remove the zeros altogether).
      std::vector<uint64_t> c = counts;
      if (c.size() > 1 && c[1] > 0)
        c[0] = c[1];
      return std::min(absMax, entropyThreshold(c, width));
    }
    }
    return absMax;
  }
};

llvm::Error toError(const Status &s) {
  return ir::makeError(s.message());
}

/// A directory removed with everything in it when it goes out of scope.
struct TempDir {
  llvm::SmallString<128> path;
  ~TempDir() {
    if (!path.empty())
      llvm::sys::fs::remove_directories(path);
  }
};

/// Samples of a data set, as a package's inputs take them.
struct Data {
  const rt::NpzArrays *arrays = nullptr;
  std::string name;
  size_t runs = 0; // samples / the package's batch
};

/// Runs `pf` over the data, calling `each(run, session)` after every run.
llvm::Error runOver(const std::shared_ptr<const pkg::PackageFile> &pf, const Data &d,
                    const QuantizeOptions &o, const std::string &phase,
                    const std::function<llvm::Error(size_t, rt::Session &)> &each,
                    std::string *backend = nullptr) {
  rt::SessionOptions so;
  so.device = o.device;
  so.emuThreads = o.emuThreads;
  auto session = rt::Session::create(pf, so);
  if (!session)
    return toError(session.status());
  if (backend)
    *backend = (*session)->backendDescription();
  if (o.log)
    o.log(phase);
  for (size_t r = 0; r < d.runs; ++r) {
    for (const pkg::TensorInfo *in : *pf->meta().inputs()) {
      const rt::HostTensor &a = d.arrays->at(in->name()->str());
      size_t bytes = a.byteSize() / d.runs;
      if (Status s = (*session)->setInputBytes(in->name()->str(), a.data.data() + r * bytes, bytes))
        return toError(s);
    }
    if (Status s = (*session)->run())
      return ir::errorf("'{0}': run {1} of {2}: {3}", d.name, r + 1, d.runs, s.message());
    if (auto e = each(r, **session))
      return e;
    if (o.onStep)
      o.onStep(r + 1, d.runs);
  }
  return llvm::Error::success();
}

/// The float outputs of every run, concatenated per output (in package order).
using Outputs = std::vector<std::vector<float>>;

/// Appends the first `count` outputs of the last run to `out`.
llvm::Error collectOutputs(const pkg::Package &m, size_t count, rt::Session &s, Outputs &out) {
  count = std::min<size_t>(count, m.outputs()->size());
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    auto t = s.getOutput(m.outputs()->Get(i)->name()->str());
    if (!t)
      return toError(t.status());
    if (t->dtype != pkg::DType::F32)
      continue;
    const float *p = reinterpret_cast<const float *>(t->data.data());
    out[i].insert(out[i].end(), p, p + t->numElements());
  }
  return llvm::Error::success();
}

/// Argmax along dim 1 of each row of the first float output of rank >= 2 (classes
/// along dim 1, as `dlc train` counts them), or nothing.
std::vector<int64_t> predictions(const pkg::Package &m, const Outputs &out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const pkg::TensorInfo *t = m.outputs()->Get(i);
    if (t->dtype() != pkg::DType::F32 || !t->shape() || t->shape()->size() < 2 ||
        t->shape()->Get(1) < 2 || out[i].empty())
      continue;
    int64_t C = t->shape()->Get(1), inner = 1;
    for (size_t d = 2; d < t->shape()->size(); ++d)
      inner *= t->shape()->Get(d);
    int64_t rows = static_cast<int64_t>(out[i].size()) / (C * inner);
    std::vector<int64_t> pred;
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t k = 0; k < inner; ++k) {
        const float *s = out[i].data() + n * C * inner + k;
        int64_t best = 0;
        for (int64_t c = 1; c < C; ++c)
          if (s[c * inner] > s[best * inner])
            best = c;
        pred.push_back(best);
      }
    return pred;
  }
  return {};
}

double fraction(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    same += a[i] == b[i];
  return a.empty() ? -1 : static_cast<double>(same) / static_cast<double>(a.size());
}

class Quantizer {
public:
  explicit Quantizer(const QuantizeOptions &o) : o_(o) {}

  llvm::Expected<QuantizeReport> run() {
    auto bytes = llvm::MemoryBuffer::getFile(o_.model);
    if (!bytes)
      return ir::errorf("cannot read '{0}': {1}", o_.model, bytes.getError().message());
    model_ = (*bytes)->getBuffer().str();
    auto plan = frontend::planQuantization(model_, modelDir());
    if (!plan)
      return ir::errorf("{0}: {1}", o_.model, llvm::toString(plan.takeError()));
    plan_ = std::move(*plan);
    if (auto e = chooseLayers())
      return e;
    if (auto e = llvm::sys::fs::createUniqueDirectory("dlc-quantize", tmp_.path))
      return ir::errorf("cannot create a temporary directory: {0}", e.message());

    // FP32, with the tensors to calibrate as outputs.
    auto calib = frontend::addFloatOutputs(model_, plan_.calibrated);
    if (!calib)
      return calib.takeError();
    auto fp32 = compileModel(*calib, "fp32.dlc", "compiling the FP32 model");
    if (!fp32)
      return fp32.takeError();
    const pkg::Package &m = (*fp32)->meta();
    auto cal = dataFor(m, o_.calibration, o_.calibrationName);
    if (!cal)
      return cal.takeError();
    const rt::NpzArrays &evalArrays = o_.evaluation ? *o_.evaluation : o_.calibration;
    auto eval = dataFor(m, evalArrays, o_.evaluation ? o_.evaluationName : o_.calibrationName);
    if (!eval)
      return eval.takeError();
    eval_ = *eval;
    report_.calibrationSamples = cal->runs;
    report_.evaluationSamples = eval->runs;
    report_.method = calibrationMethodName(o_.method);
    report_.format = format();
    if (auto e = calibrate(*fp32, *cal))
      return e;
    // FP32's outputs on the evaluation data (the model's own outputs come first).
    if (auto e =
            runOver(*fp32, eval_, o_, "FP32 on '" + eval_.name + "'", [&](size_t, rt::Session &s) {
              return collectOutputs(m, plan_.outputs, s, fp32Out_);
            }))
      return e;
    fp32Pred_ = predictions(m, fp32Out_);
    if (auto e = readLabels(evalArrays))
      return e;
    if (!labels_.empty())
      report_.fp32Accuracy = fraction(fp32Pred_, labels_);
    if (o_.targetAccuracy) {
      report_.target = o_.targetAccuracy;
      if (fp32Pred_.empty())
        return ir::makeError("--target-accuracy needs class scores (an output [N, C, ...] with "
                             "C >= 2) to count top-1 agreement or accuracy");
      if (report_.fp32Accuracy >= 0 && report_.fp32Accuracy < *o_.targetAccuracy)
        return ir::errorf("the FP32 model's accuracy on '{0}' is {1}%, below the target {2}%",
                          eval_.name, llvm::format("%.2f", 100 * report_.fp32Accuracy),
                          llvm::format("%.2f", 100 * *o_.targetAccuracy));
    }

    // Sensitivity: each layer alone.
    bool sensitivity = o_.sensitivity || o_.targetAccuracy;
    std::vector<std::pair<double, std::string>> bySensitivity;
    if (sensitivity)
      for (size_t i = 0; i < chosen_.size(); ++i) {
        const std::string &l = chosen_[i];
        auto metrics = measure({l}, "sensitivity " + std::to_string(i + 1) + "/" +
                                        std::to_string(chosen_.size()) + ": " + l);
        if (!metrics)
          return metrics.takeError();
        layerReport(l).error = metrics->relativeError;
        bySensitivity.push_back({metrics->relativeError, l});
      }
    std::stable_sort(bySensitivity.begin(), bySensitivity.end(),
                     [](const auto &a, const auto &b) { return a.first > b.first; });

    std::set<std::string> int8(chosen_.begin(), chosen_.end());
    auto metrics =
        measure(int8, "all " + std::to_string(int8.size()) + " layers in " + formatName());
    if (!metrics)
      return metrics.takeError();
    size_t next = 0;
    while (o_.targetAccuracy && metrics->score() < *o_.targetAccuracy && !int8.empty()) {
      const std::string &worst = bySensitivity[next++].second;
      int8.erase(worst);
      QuantLayerReport &r = layerReport(worst);
      r.precision = "fp32";
      r.why = "left in FP32 for --target-accuracy";
      metrics = measure(int8, "without " + worst + ": " + std::to_string(int8.size()) +
                                  " layers in " + formatName());
      if (!metrics)
        return metrics.takeError();
    }
    report_.quantized = *metrics;
    report_.targetMet = !o_.targetAccuracy || metrics->score() >= *o_.targetAccuracy;
    report_.quantizedLayers = int8.size();

    frontend::QdqSummary summary;
    auto out = writeQdq(int8, &summary);
    if (!out)
      return out.takeError();
    report_.saturatedBias = summary.saturatedBias;
    for (QuantLayerReport &r : report_.layers)
      if (auto it = summary.inputScale.find(r.name); it != summary.inputScale.end())
        r.inputScale = it->second;
    if (Status s = writeFileAtomically(o_.output, out->data(), out->size()))
      return toError(s);
    report_.outputBytes = out->size();
    return report_;
  }

private:
  std::string format() const { return o_.fp8 ? "fp8" : "int8"; }
  std::string formatName() const { return o_.fp8 ? "FP8" : "INT8"; }

  std::string modelDir() const {
    std::string dir = llvm::sys::path::parent_path(o_.model).str();
    return dir.empty() ? "." : dir;
  }

  /// The layers to quantize: every quantizable one but those --exclude names (by
  /// node name or op type); an exclusion that names nothing is an error.
  llvm::Error chooseLayers() {
    std::set<std::string> used;
    for (const frontend::QuantLayer &l : plan_.layers) {
      QuantLayerReport r;
      r.name = l.name;
      r.op = l.op;
      r.precision = format();
      for (const std::string &x : o_.exclude)
        if (x == l.name || x == l.op) {
          used.insert(x);
          r.precision = "fp32";
          r.why = "--exclude " + x;
        }
      if (r.precision != "fp32")
        chosen_.push_back(l.name);
      report_.layers.push_back(r);
    }
    for (const frontend::QuantPlan::Skipped &s : plan_.skipped) {
      QuantLayerReport r;
      r.name = s.name;
      r.op = s.op;
      r.precision = "fp32";
      r.why = s.why;
      for (const std::string &x : o_.exclude)
        if (x == r.name || x == r.op)
          used.insert(x);
      report_.layers.push_back(r);
    }
    for (const std::string &x : o_.exclude)
      if (!used.count(x))
        return ir::errorf("--exclude {0}: no Conv, MatMul or Gemm of the model has that name or "
                          "op type",
                          x);
    if (plan_.layers.empty())
      return ir::errorf(
          "{0}: nothing to quantize: no Conv, MatMul or Gemm with FP32 weights{1}", o_.model,
          plan_.skipped.empty() ? ""
                                : " (" + plan_.skipped[0].name + ": " + plan_.skipped[0].why + ")");
    if (chosen_.empty())
      return ir::makeError("--exclude leaves no layer to quantize");
    // What writing the file would refuse, before the calibration rather than after.
    if (plan_.opset < 10 || (o_.perChannel && !o_.fp8 && plan_.opset < 13))
      return ir::errorf("{0} is opset {1}: {2}", o_.model, plan_.opset,
                        plan_.opset < 10 ? "QuantizeLinear needs opset 10 or later"
                                         : "weights per channel need opset 13 or later (re-export "
                                           "the model at a later opset, or "
                                           "--per-tensor-weights)");
    if (o_.fp8 && plan_.opset < 11)
      return ir::errorf("{0} is opset {1}: FP8 is written at opset 19, from opset 11 or later "
                        "(re-export the model at a later opset)",
                        o_.model, plan_.opset);
    auto external = frontend::onnxExternalDataFiles(model_);
    if (!external)
      return external.takeError();
    std::string outDir = llvm::sys::path::parent_path(o_.output).str();
    if (outDir.empty())
      outDir = ".";
    if (!llvm::sys::fs::is_directory(outDir))
      return ir::errorf("-o {0}: no such directory '{1}'", o_.output, outDir);
    if (!external->empty() && !llvm::sys::fs::equivalent(outDir, modelDir()))
      return ir::errorf("{0} keeps weights in external files ('{1}'): write the quantized model "
                        "into the same folder, which those paths are relative to",
                        o_.model, external->front());
    return llvm::Error::success();
  }

  QuantLayerReport &layerReport(const std::string &name) {
    for (QuantLayerReport &r : report_.layers)
      if (r.name == name)
        return r;
    report_.layers.push_back({});
    return report_.layers.back();
  }

  llvm::Expected<std::shared_ptr<const pkg::PackageFile>>
  compileModel(const std::string &bytes, const std::string &file, const std::string &phase) {
    if (o_.log)
      o_.log(phase);
    CompileOptions co;
    co.model = o_.model;
    co.modelBytes = bytes;
    co.output = (tmp_.path + "/" + file).str();
    co.tf32 = false; // compared in strict FP32
    co.import = o_.import;
    // (The calibration outputs have no shapes, which the checker wants.)
    co.import.runChecker = false;
    co.useCache = o_.useCache;
    co.cacheDir = o_.cacheDir;
    if (o_.device == rt::DeviceKind::Emu ||
        (o_.device == rt::DeviceKind::Auto && rt::cudaDeviceCount() == 0))
      co.targets = {"emu"};
    auto r = compile(co);
    if (!r)
      return r.takeError();
    auto pf = pkg::PackageFile::load(co.output);
    if (!pf)
      return toError(pf.status());
    return std::shared_ptr<const pkg::PackageFile>(std::move(*pf));
  }

  llvm::Expected<Data> dataFor(const pkg::Package &m, const rt::NpzArrays &arrays,
                               const std::string &name) {
    auto n = rt::checkSamples(arrays, m, name);
    if (!n)
      return toError(n.status());
    const pkg::TensorInfo *in = m.inputs()->Get(0);
    int64_t batch = in->shape() && in->shape()->size() ? in->shape()->Get(0) : 1;
    if (*n == 0 || batch <= 0 || *n % batch)
      return ir::errorf("'{0}' holds {1} samples: the model takes batches of {2}, and needs "
                        "at least one",
                        name, *n, batch);
    return Data{&arrays, name, *n / static_cast<size_t>(batch)};
  }

  llvm::Error calibrate(const std::shared_ptr<const pkg::PackageFile> &pf, const Data &d) {
    std::vector<std::pair<std::string, Stats>> stats;
    for (const std::string &t : plan_.calibrated)
      stats.push_back({t, {}});
    auto pass = [&](bool histogram, const std::string &phase) {
      return runOver(
          pf, d, o_, phase,
          [&](size_t, rt::Session &s) -> llvm::Error {
            for (auto &[name, st] : stats) {
              auto t = s.getOutput(name);
              if (!t)
                return toError(t.status());
              if (t->dtype != pkg::DType::F32)
                return ir::errorf("tensor '{0}' is {1}, not FP32", name, pkg::dtypeName(t->dtype));
              const float *p = reinterpret_cast<const float *>(t->data.data());
              histogram ? st.histogram(p, t->numElements()) : st.range(p, t->numElements());
            }
            return llvm::Error::success();
          },
          &report_.device);
    };
    if (auto e = pass(false, "calibrating on '" + d.name + "' (ranges)"))
      return e;
    if (o_.method != CalibrationMethod::MinMax)
      if (auto e = pass(true, "calibrating on '" + d.name + "' (histograms)"))
        return e;
    for (auto &[name, st] : stats)
      thresholds_[name] = st.threshold(o_.method, o_.percentile);
    return llvm::Error::success();
  }

  llvm::Error readLabels(const rt::NpzArrays &arrays) {
    auto it = arrays.find("labels");
    if (it == arrays.end())
      return llvm::Error::success();
    const rt::HostTensor &l = it->second;
    if (l.dtype != pkg::DType::I64 && l.dtype != pkg::DType::I32)
      return ir::errorf("'{0}': 'labels' is {1}, not int64 or int32 classes", eval_.name,
                        pkg::dtypeName(l.dtype));
    if (static_cast<size_t>(l.numElements()) != fp32Pred_.size())
      return ir::errorf("'{0}': 'labels' holds {1} classes; the first output's scores give {2}",
                        eval_.name, l.numElements(), fp32Pred_.size());
    for (int64_t i = 0; i < l.numElements(); ++i)
      labels_.push_back(static_cast<int64_t>(l.element(i)));
    return llvm::Error::success();
  }

  llvm::Expected<std::string> writeQdq(const std::set<std::string> &layers,
                                       frontend::QdqSummary *summary = nullptr) {
    frontend::QdqOptions qo;
    qo.layers = layers;
    qo.thresholds = thresholds_;
    qo.perChannel = o_.perChannel;
    qo.fp8 = o_.fp8;
    qo.provenance = std::string("dlc quantize ") + (o_.fp8 ? "--fp8 " : "") + "--method " +
                    calibrationMethodName(o_.method) + ", " +
                    std::to_string(report_.calibrationSamples) + " calibration runs";
    auto out = frontend::writeQdqModel(model_, modelDir(), plan_, qo, summary);
    if (!out)
      return ir::errorf("{0}: {1}", o_.model, llvm::toString(out.takeError()));
    return out;
  }

  /// The model with `layers` in INT8, run on the evaluation data, against FP32.
  llvm::Expected<QuantMetrics> measure(const std::set<std::string> &layers,
                                       const std::string &what) {
    auto bytes = writeQdq(layers);
    if (!bytes)
      return bytes.takeError();
    auto pf = compileModel(*bytes, "quantized.dlc", "compiling: " + what);
    if (!pf)
      return pf.takeError();
    const pkg::Package &m = (*pf)->meta();
    Outputs out;
    if (auto e = runOver(*pf, eval_, o_, "measuring: " + what, [&](size_t, rt::Session &s) {
          return collectOutputs(m, plan_.outputs, s, out);
        }))
      return e;
    QuantMetrics r;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < fp32Out_.size() && i < out.size(); ++i)
      for (size_t k = 0; k < fp32Out_[i].size() && k < out[i].size(); ++k) {
        double d = double(out[i][k]) - fp32Out_[i][k];
        diff += d * d;
        norm += double(fp32Out_[i][k]) * fp32Out_[i][k];
      }
    r.relativeError = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    std::vector<int64_t> pred = predictions(m, out);
    r.agreement = fraction(pred, fp32Pred_);
    if (!labels_.empty())
      r.accuracy = fraction(pred, labels_);
    return r;
  }

  const QuantizeOptions &o_;
  std::string model_;
  frontend::QuantPlan plan_;
  std::vector<std::string> chosen_;
  std::map<std::string, float> thresholds_;
  TempDir tmp_;
  Data eval_;
  Outputs fp32Out_;
  std::vector<int64_t> fp32Pred_, labels_;
  QuantizeReport report_;
};

std::string percent(double f) {
  return f < 0 ? "-" : llvm::formatv("{0:F2}%", 100 * f).str();
}

} // namespace

std::string QuantizeReport::text() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "calibration: " << method << " on " << calibrationSamples << " runs; measured on "
     << evaluationSamples << " runs\n";
  size_t width = 5;
  for (const QuantLayerReport &l : layers)
    width = std::max(width, l.name.size());
  os << llvm::left_justify("layer", width) << "  " << llvm::left_justify("op", 6)
     << "  precision  input scale  error alone  note\n";
  for (const QuantLayerReport &l : layers) {
    os << llvm::left_justify(l.name, width) << "  " << llvm::left_justify(l.op, 6) << "  "
       << llvm::left_justify(l.precision, 9) << "  ";
    os << (l.inputScale > 0 ? llvm::formatv("{0,11:e3}", l.inputScale).str() : std::string(11, ' '))
       << "  " << (l.error >= 0 ? llvm::formatv("{0,11:F5}", l.error).str() : "          -") << "  "
       << l.why << "\n";
  }
  os << (format == "fp8" ? "FP8 (e4m3): " : "INT8: ") << quantizedLayers << " of " << layers.size()
     << " layers";
  if (quantized.agreement >= 0)
    os << "; top-1 agreement with FP32 " << percent(quantized.agreement);
  if (quantized.accuracy >= 0)
    os << "; accuracy " << percent(quantized.accuracy) << " (FP32 " << percent(fp32Accuracy) << ", "
       << llvm::formatv("{0:+F2}", 100 * (quantized.accuracy - fp32Accuracy)) << " points)";
  os << "; relative error of the outputs " << llvm::formatv("{0:F5}", quantized.relativeError)
     << "\n";
  if (saturatedBias)
    os << "note: " << saturatedBias << " bias values did not fit INT32 at their scale and were "
       << "saturated\n";
  if (target)
    os << (targetMet ? "target " : "target NOT met: ") << percent(*target) << "\n";
  return os.str();
}

std::string QuantizeReport::json() const {
  llvm::json::Array ls;
  for (const QuantLayerReport &l : layers) {
    llvm::json::Object o{{"name", l.name}, {"op", l.op}, {"precision", l.precision}};
    if (l.inputScale > 0)
      o["input_scale"] = l.inputScale;
    if (l.error >= 0)
      o["error_alone"] = l.error;
    if (!l.why.empty())
      o["note"] = l.why;
    ls.push_back(std::move(o));
  }
  auto orNull = [](double v) -> llvm::json::Value {
    return v >= 0 ? llvm::json::Value(v) : llvm::json::Value(nullptr);
  };
  llvm::json::Object o{
      {"method", method},
      {"calibration_runs", static_cast<int64_t>(calibrationSamples)},
      {"evaluation_runs", static_cast<int64_t>(evaluationSamples)},
      {"format", format},
      {"quantized_layers", static_cast<int64_t>(quantizedLayers)},
      {"int8_layers", static_cast<int64_t>(format == "int8" ? quantizedLayers : 0)},
      {"relative_error", quantized.relativeError},
      {"top1_agreement", orNull(quantized.agreement)},
      {"accuracy", orNull(quantized.accuracy)},
      {"fp32_accuracy", orNull(fp32Accuracy)},
      {"saturated_bias", static_cast<int64_t>(saturatedBias)},
      {"target_accuracy", target ? llvm::json::Value(*target) : llvm::json::Value(nullptr)},
      {"target_met", targetMet},
      {"output_bytes", static_cast<int64_t>(outputBytes)},
      {"layers", std::move(ls)}};
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(o))) << "\n";
  return os.str();
}

llvm::Expected<QuantizeReport> quantize(const QuantizeOptions &options) {
  return Quantizer(options).run();
}

} // namespace dlc::driver

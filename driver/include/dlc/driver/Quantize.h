//===- Quantize.h - dlc quantize: calibrate and write a QDQ model -*- C++ -*-===//
//
// Post-training quantization to INT8 in the explicit (QDQ) form: the model runs on
// calibration data (emu, or a GPU), each activation that feeds a Conv, MatMul or
// Gemm gets a scale from its values (minmax, percentile or entropy), weights are
// quantized per output channel, and the result is measured against FP32 before it is
// written: overall, per layer alone (its sensitivity), and with --target-accuracy the
// most sensitive layers are left in float until the target is met.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/frontend/OnnxImporter.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dlc::driver {

enum class CalibrationMethod { MinMax, Percentile, Entropy };
const char *calibrationMethodName(CalibrationMethod m);
std::optional<CalibrationMethod> parseCalibrationMethod(const std::string &s);

/// The threshold below which `percentile` percent of the histogram's values lie
/// (`counts[i]` values of |x| in [i, i + 1) * binWidth): the upper edge of the bin
/// where the cumulative count reaches it.
float percentileThreshold(const std::vector<uint64_t> &counts, double binWidth, double percentile);
/// The threshold that keeps the most information at `levels` steps (TensorRT's
/// entropy calibration): among the first i >= levels bins (the values beyond added to
/// the last), the i whose distribution merged into `levels` levels diverges least
/// (Kullback-Leibler) from it; the threshold is i * binWidth. The smallest i wins ties.
float entropyThreshold(const std::vector<uint64_t> &counts, double binWidth, int levels = 128);

struct QuantizeOptions {
  std::string model;  // the FP32 .onnx
  std::string output; // the QDQ .onnx to write (atomically)
  /// Samples along the first dimension, arrays named after the model's inputs.
  rt::NpzArrays calibration;
  std::string calibrationName;
  /// Measured on (default: the calibration data). An array "labels" (integer class
  /// per row of the first output) gives accuracy against them too.
  std::optional<rt::NpzArrays> evaluation;
  std::string evaluationName;
  CalibrationMethod method = CalibrationMethod::Entropy;
  double percentile = 99.99;
  /// Weights per output channel (else per tensor).
  bool perChannel = true;
  /// FP8 (float8 e4m3fn) instead of INT8 (frontend::QdqOptions::fp8).
  bool fp8 = false;
  /// Layers left in float: node names or op types.
  std::vector<std::string> exclude;
  /// Each layer quantized alone, measured (implied by targetAccuracy).
  bool sensitivity = true;
  /// The least accuracy (a fraction) of the quantized model: against "labels" where
  /// the evaluation data has them, else its top-1 agreement with FP32.
  std::optional<double> targetAccuracy;
  /// Import options of every compile (shapes for symbolic dimensions, bindings, loop
  /// bounds): the command line's import options.
  frontend::ImportOptions import;
  rt::DeviceKind device = rt::DeviceKind::Auto;
  int emuThreads = 0;
  bool useCache = true;
  std::string cacheDir;
  /// Progress: a phase starting (`total` steps of it, 0 when unknown), and each step.
  std::function<void(const std::string &phase)> log;
  std::function<void(size_t done, size_t total)> onStep;
};

/// The quantized model against FP32 on the evaluation data, on the first output.
struct QuantMetrics {
  double relativeError = 0; // ||q - f|| / ||f|| over every float output
  double agreement = -1;    // top-1 agreement with FP32 (-1: the output is not scores)
  double accuracy = -1;     // against the labels (-1: none)
  /// What --target-accuracy compares: accuracy, else agreement.
  double score() const { return accuracy >= 0 ? accuracy : agreement; }
};

struct QuantLayerReport {
  std::string name, op;
  std::string precision; // "int8" or "fp32"
  std::string why;       // why it stays FP32 (empty for int8)
  float inputScale = 0;  // its input's scale (0 when not quantized)
  /// Its sensitivity: the outputs' relative error with this layer alone quantized
  /// (-1: not measured).
  double error = -1;
};

struct QuantizeReport {
  std::string method, device;
  /// What the quantized layers compute in: "int8", or "fp8" (e4m3fn).
  std::string format = "int8";
  size_t calibrationSamples = 0, evaluationSamples = 0;
  double fp32Accuracy = -1; // against the labels (-1: none)
  QuantMetrics quantized;
  std::vector<QuantLayerReport> layers;
  size_t quantizedLayers = 0, saturatedBias = 0;
  std::optional<double> target;
  bool targetMet = true;
  uint64_t outputBytes = 0;
  std::string text() const;
  std::string json() const;
};

/// Calibrates, measures and writes options.output. Errors name the file, array or
/// layer at fault; nothing is written on error.
llvm::Expected<QuantizeReport> quantize(const QuantizeOptions &options);

} // namespace dlc::driver

//===- Qdq.h - Writing explicitly quantized (QDQ) ONNX models ----*- C++ -*-===//
//
// What `dlc quantize` does to the ONNX file itself: find the layers that can run in
// INT8, add calibration outputs, and write the standard QDQ form that ONNX Runtime
// reads (as its quantizer writes it) (QuantizeLinear + DequantizeLinear on activations, INT8
// weights behind a DequantizeLinear, INT32 biases). The calibration and the choice of layers are
// the driver's (driver/Quantize.h).
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dlc::frontend {

/// A layer that can compute in INT8: a Conv, MatMul or Gemm of the main graph.
struct QuantLayer {
  /// The node's name where it is unique, else "<op type>_<index>" (made unique too),
  /// the index in the graph's dependency order.
  std::string name;
  std::string op;
  /// Its float inputs that are not constants (quantized per tensor, INT8, symmetric).
  std::vector<std::string> activations;
  /// Its constant weight (an initializer; empty for a MatMul of two activations),
  /// quantized per output channel along `weightAxis` (INT8, symmetric, [-127, 127]).
  std::string weight;
  int weightAxis = 0;
  /// Its constant bias (Conv's B, Gemm's C), written as INT32 at the scale of input
  /// times weight; empty when none.
  std::string bias;
};

/// What can be quantized in a model, and how activations share scales.
struct QuantPlan {
  std::vector<QuantLayer> layers;
  /// Layers of those op types that stay in float, and why.
  struct Skipped {
    std::string name, op, why;
  };
  std::vector<Skipped> skipped;
  /// Every tensor quantized for some layer, mapped to the tensor whose range sets its
  /// scale: itself, the input of the data-movement ops (MaxPool, Reshape, Flatten,
  /// Transpose, Squeeze, Unsqueeze, Identity) that lead to it, or the output of the
  /// outermost Concat among them (whose inputs all take its scale), which then share
  /// one scale, so that those ops move INT8 data (as TensorRT propagates scales
  /// through them) where every consumer of their outputs is a quantized layer.
  std::map<std::string, std::string> scaleOf;
  /// The tensors to calibrate: the values of scaleOf, each once.
  std::vector<std::string> calibrated;
  int64_t opset = 0;  // the default domain's
  size_t outputs = 0; // the graph's outputs
};

/// Finds the quantizable layers of an FP32 model (serialized ModelProto).
llvm::Expected<QuantPlan> planQuantization(llvm::StringRef modelBytes, const std::string &modelDir);

/// The model with `names` (tensors of the main graph) added as FP32 graph outputs,
/// for calibration.
llvm::Expected<std::string> addFloatOutputs(llvm::StringRef modelBytes,
                                            const std::vector<std::string> &names);

struct QdqOptions {
  /// The layers (QuantLayer::name) to quantize; the others stay as they are.
  std::set<std::string> layers;
  /// Each calibrated tensor's threshold: its values are quantized to [-T, T] in 127
  /// steps (scale T / 127; FP8: T / 448); 0 or missing: scale 1.
  std::map<std::string, float> thresholds;
  /// Weights per output channel (needs opset 13), else per tensor.
  bool perChannel = true;
  /// FP8 (float8 e4m3fn) instead of INT8: activations and weights scaled so that the
  /// threshold maps to 448, e4m3's largest value (FP8 QDQ as TensorRT and ONNX Runtime
  /// read it), biases left in FP32; the model is written at opset 19 (float8 needs it),
  /// from opset 11 or later, ops whose attributes became inputs converted.
  bool fp8 = false;
  /// Written into the model's metadata_props ("dlc.quantize").
  std::string provenance;
};

/// What writeQdqModel wrote, for the report.
struct QdqSummary {
  size_t quantizeNodes = 0, dequantizeNodes = 0;
  /// Bias values that did not fit INT32 at their scale and were saturated.
  size_t saturatedBias = 0;
  /// Each quantized layer's input scale (its first activation's).
  std::map<std::string, float> inputScale;
};

/// The QDQ model: serialized, topologically sorted, valid ONNX.
llvm::Expected<std::string> writeQdqModel(llvm::StringRef modelBytes, const std::string &modelDir,
                                          const QuantPlan &plan, const QdqOptions &options,
                                          QdqSummary *summary = nullptr);

} // namespace dlc::frontend

//===- Export.h - The trained model as ONNX ---------------------*- C++ -*-===//
//
// `dlc export` and the Python TrainingSession.export_onnx(): the ONNX model a
// training package was compiled from (it keeps the source), with its initializers
// replaced by the values of the package's variables (trained parameters, BatchNorm
// running statistics) and BatchNorm back in inference form.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/Package.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace dlc::driver {

struct ExportResult {
  std::string model;                 // the serialized ONNX model
  std::vector<std::string> replaced; // the initializers that took a variable's value
};

/// `values`: every variable of the package by name, from `source` (for messages:
/// "checkpoint 'ckpt.npz'", "the session"); an error names the package or the
/// variable at fault.
llvm::Expected<ExportResult> exportOnnx(const pkg::PackageFile &pf,
                                        const std::map<std::string, rt::HostTensor> &values,
                                        const std::string &source);

} // namespace dlc::driver

//===- Tensors.h - Files, and tensors between files, runtime and IR -*- C++ -*-===//
#pragma once

#include "dlc/ir/Tensor.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/Error.h"

#include <string>

namespace dlc::driver {

/// The contents of a model or text file; "-" is standard input. Anything but a regular
/// file (a FIFO, a device) is refused without waiting on it.
llvm::Expected<std::string> readInputFile(const std::string &path);

/// Reads a tensor file: .npy, or a serialized ONNX TensorProto (.pb).
Result<rt::HostTensor> readTensorFile(const std::string &path);

/// A runtime tensor as an IR tensor (copied); an error names `what` when its bytes do
/// not match its dtype and shape.
llvm::Expected<ir::Tensor> irTensor(const rt::HostTensor &h, const std::string &what);

} // namespace dlc::driver

//===- OnnxUtil.h - ONNX protobuf helpers (frontend-internal) ---*- C++ -*-===//
#pragma once

#include "dlc/ir/Tensor.h"

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <onnx/onnx_pb.h>
#include <optional>
#include <string>

namespace dlc::frontend {

/// ONNX TensorProto::DataType -> dtype; nullopt for types dlc does not support.
std::optional<ir::DType> dtypeFromOnnx(int32_t elemType);
int32_t dtypeToOnnx(ir::DType t);
/// "FLOAT", "STRING", ... for messages.
std::string onnxTypeName(int32_t elemType);
/// Whether the element type is one ONNX defines (up to IR 11), supported or not.
bool knownOnnxType(int32_t elemType);

/// Loads external tensor data, confined to one model directory. Files are mapped
/// once and shared by all tensors that live in them.
class ExternalDataLoader {
public:
  explicit ExternalDataLoader(std::string modelDir) : modelDir_(std::move(modelDir)) {}
  /// The bytes of an EXTERNAL tensor, checked against `type`'s size.
  llvm::Expected<ir::Tensor> load(const onnx::TensorProto &t, const ir::TensorType &type);
  /// Checks that an EXTERNAL tensor's location is safe and exists (maps the file).
  llvm::Error check(const onnx::TensorProto &t);

private:
  struct Mapping;
  llvm::Expected<std::shared_ptr<Mapping>> map(const std::string &location);
  std::string modelDir_;
  std::map<std::string, std::shared_ptr<Mapping>> files_;
};

/// Converts a TensorProto (inline or external) to an ir::Tensor.
llvm::Expected<ir::Tensor> tensorFromOnnx(const onnx::TensorProto &t, ExternalDataLoader *ext);
/// The same, taking the raw bytes out of `t` without a copy (the tensor owns them).
llvm::Expected<ir::Tensor> takeTensorFromOnnx(onnx::TensorProto &t, ExternalDataLoader *ext);

} // namespace dlc::frontend

//===- Tensors.cpp - Tensors between files, the runtime and the IR ----------===//
#include "dlc/driver/Tensors.h"

#include "dlc/frontend/OnnxImporter.h"

#include <cstring>

namespace dlc::driver {

Result<rt::HostTensor> readTensorFile(const std::string &path) {
  if (!llvm::StringRef(path).endswith(".pb"))
    return rt::readNpy(path);
  auto t = frontend::readTensorProtoFile(path);
  if (!t)
    return Status(StatusCode::InvalidArgument, llvm::toString(t.takeError()));
  rt::HostTensor h;
  h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t->second.dtype()));
  h.shape = t->second.shape();
  const uint8_t *p = static_cast<const uint8_t *>(t->second.raw());
  h.data.assign(p, p + t->second.byteSize());
  return h;
}

llvm::Expected<ir::Tensor> irTensor(const rt::HostTensor &h, const std::string &what) {
  ir::Tensor t(ir::TensorType(static_cast<ir::DType>(static_cast<uint8_t>(h.dtype)), h.shape));
  if (h.data.size() != t.byteSize())
    return ir::errorf("{0} holds {1} bytes, its type {2} needs {3}", what, h.data.size(),
                      t.type().str(), t.byteSize());
  std::memcpy(t.mutableRaw(), h.data.data(), h.data.size());
  return t;
}

} // namespace dlc::driver

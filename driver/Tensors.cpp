//===- Tensors.cpp - Tensors between files, the runtime and the IR ----------===//
#include "dlc/driver/Tensors.h"

#include "dlc/frontend/OnnxImporter.h"
#include "dlc/support/Files.h"

#include "llvm/Support/MemoryBuffer.h"

#include <cstring>

namespace dlc::driver {

llvm::Expected<std::string> readInputFile(const std::string &path) {
  if (path == "-") {
    auto in = llvm::MemoryBuffer::getSTDIN();
    if (!in)
      return ir::errorf("cannot read standard input: {0}", in.getError().message());
    return (*in)->getBuffer().str();
  }
  auto bytes = readRegularFile(path);
  if (!bytes.ok())
    return ir::makeError(bytes.status().message());
  return std::string(bytes->begin(), bytes->end());
}

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

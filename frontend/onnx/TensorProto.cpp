#include "OnnxUtil.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/Graph.h"
#include "dlc/support/Files.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace dlc::frontend {

using ir::DType;

namespace {
/// Element types of IR 9-10, newer than the ONNX library's enum.
constexpr int32_t kOnnxFloat8E4M3FN = 17, kOnnxFloat8E5M2 = 19, kOnnxUint4 = 21, kOnnxInt4 = 22;
} // namespace

std::optional<DType> dtypeFromOnnx(int32_t e) {
  switch (e) {
  case onnx::TensorProto::FLOAT:
    return DType::F32;
  case onnx::TensorProto::UINT8:
    return DType::U8;
  case onnx::TensorProto::INT8:
    return DType::I8;
  case onnx::TensorProto::UINT16:
    return DType::U16;
  case onnx::TensorProto::INT16:
    return DType::I16;
  case onnx::TensorProto::INT32:
    return DType::I32;
  case onnx::TensorProto::INT64:
    return DType::I64;
  case onnx::TensorProto::BOOL:
    return DType::Bool;
  case onnx::TensorProto::FLOAT16:
    return DType::F16;
  case onnx::TensorProto::DOUBLE:
    return DType::F64;
  case onnx::TensorProto::UINT32:
    return DType::U32;
  case onnx::TensorProto::UINT64:
    return DType::U64;
  case onnx::TensorProto::BFLOAT16:
    return DType::BF16;
  case kOnnxFloat8E4M3FN:
    return DType::F8E4M3;
  case kOnnxFloat8E5M2:
    return DType::F8E5M2;
  default:
    return std::nullopt;
  }
}

int32_t dtypeToOnnx(DType t) {
  for (int32_t e = 1; e <= kOnnxFloat8E5M2; ++e)
    if (dtypeFromOnnx(e) == t)
      return e;
  return 0;
}

std::string onnxTypeName(int32_t e) {
  if (onnx::TensorProto::DataType_IsValid(e))
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(e));
  // The types of IR 9-11, newer than the ONNX library's enum.
  static const char *const newer[] = {"FLOAT8E4M3FN",   "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
                                      "FLOAT8E5M2FNUZ", "UINT4",          "INT4",
                                      "FLOAT4E2M1"};
  if (e >= 17 && e < 17 + static_cast<int32_t>(std::size(newer)))
    return newer[e - 17];
  return "type " + std::to_string(e);
}

bool knownOnnxType(int32_t e) {
  return e > 0 && onnxTypeName(e).compare(0, 5, "type ") != 0;
}

namespace {

/// An INT4 or UINT4 constant (4-bit QDQ weights, IR 10) as i8 or u8 values: two to a
/// byte, the first in the low nibble, in raw_data or one byte per int32_data entry.
llvm::Expected<ir::Tensor> fourBitTensor(const onnx::TensorProto &t) {
  const bool isSigned = t.data_type() == kOnnxInt4;
  ir::Shape shape(t.dims().begin(), t.dims().end());
  ir::TensorType type(isSigned ? DType::I8 : DType::U8, shape);
  auto n = type.checkedNumElements();
  if (!n || *n > (int64_t{1} << 40))
    return ir::errorf("tensor '{0}' has invalid dimensions {1}", t.name(), ir::shapeStr(shape));
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.has_segment())
    return ir::errorf("tensor '{0}' of {1}: 4-bit values in external data or segments are not "
                      "supported",
                      t.name(), onnxTypeName(t.data_type()));
  const size_t bytes = static_cast<size_t>((*n + 1) / 2);
  const bool raw = !t.raw_data().empty();
  const size_t have = raw ? t.raw_data().size() : static_cast<size_t>(t.int32_data_size());
  if (have != bytes)
    return ir::errorf("tensor '{0}' of {1}{2} has {3} bytes, expected {4}", t.name(),
                      onnxTypeName(t.data_type()), ir::shapeStr(shape), have, bytes);
  ir::Tensor r(type);
  auto *out = static_cast<int8_t *>(r.mutableRaw());
  for (int64_t i = 0; i < *n; ++i) {
    const size_t b = static_cast<size_t>(i / 2);
    const unsigned byte =
        raw ? static_cast<unsigned char>(t.raw_data()[b]) : static_cast<unsigned>(t.int32_data(b));
    const unsigned nibble = (i % 2 ? byte >> 4 : byte) & 0xF;
    out[i] = static_cast<int8_t>(isSigned && nibble >= 8 ? static_cast<int>(nibble) - 16
                                                         : static_cast<int>(nibble));
  }
  return r;
}

} // namespace

llvm::Expected<ir::Tensor> takeTensorFromOnnx(onnx::TensorProto &t, ExternalDataLoader *ext) {
  auto dt = dtypeFromOnnx(t.data_type());
  if (!dt || t.has_segment() || t.data_location() == onnx::TensorProto::EXTERNAL ||
      t.raw_data().empty())
    return tensorFromOnnx(t, ext);
  ir::TensorType type(*dt, ir::Shape(t.dims().begin(), t.dims().end()));
  auto n = type.checkedNumElements();
  if (!n || *n > (int64_t{1} << 40) ||
      t.raw_data().size() != static_cast<size_t>(*n) * ir::dtypeSize(*dt))
    return tensorFromOnnx(t, ext); // reports the problem
  // Weights are most of a model's bytes: the tensor takes the string's buffer.
  auto bytes = std::make_shared<std::string>(std::move(*t.mutable_raw_data()));
  const void *data = bytes->data();
  return ir::Tensor(type, std::shared_ptr<const void>(bytes, bytes.get()), data);
}

llvm::Expected<ir::Tensor> tensorFromOnnx(const onnx::TensorProto &t, ExternalDataLoader *ext) {
  if (t.data_type() == kOnnxInt4 || t.data_type() == kOnnxUint4)
    return fourBitTensor(t);
  auto dt = dtypeFromOnnx(t.data_type());
  if (!dt)
    return ir::errorf("tensor '{0}' has unsupported element type {1}", t.name(),
                      onnxTypeName(t.data_type()));
  if (t.has_segment())
    return ir::errorf("tensor '{0}' is segmented, which is not supported", t.name());
  ir::Shape shape(t.dims().begin(), t.dims().end());
  ir::TensorType type(*dt, shape);
  auto n = type.checkedNumElements();
  if (!n || *n > (int64_t{1} << 40))
    return ir::errorf("tensor '{0}' has invalid dimensions {1}", t.name(), ir::shapeStr(shape));
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    if (!ext)
      return ir::errorf("tensor '{0}' uses external data, which is not allowed here", t.name());
    return ext->load(t, type);
  }
  size_t es = ir::dtypeSize(*dt);
  if (!t.raw_data().empty() || (*n == 0)) {
    if (t.raw_data().size() != static_cast<size_t>(*n) * es)
      return ir::errorf("tensor '{0}' of type {1} has {2} bytes of raw data, expected {3}",
                        t.name(), type.str(), t.raw_data().size(), static_cast<size_t>(*n) * es);
    ir::Tensor r(type);
    if (*n)
      std::memcpy(r.mutableRaw(), t.raw_data().data(), r.byteSize());
    return r;
  }
  ir::Tensor r(type);
  void *p = r.mutableRaw();
  auto sizeError = [&](int count) {
    return ir::errorf("tensor '{0}' of type {1} has {2} values, expected {3}", t.name(), type.str(),
                      count, *n);
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (t.float_data_size() != *n)
      return sizeError(t.float_data_size());
    std::memcpy(p, t.float_data().data(), *n * 4);
    break;
  case onnx::TensorProto::DOUBLE:
    if (t.double_data_size() != *n)
      return sizeError(t.double_data_size());
    std::memcpy(p, t.double_data().data(), *n * 8);
    break;
  case onnx::TensorProto::INT64:
    if (t.int64_data_size() != *n)
      return sizeError(t.int64_data_size());
    std::memcpy(p, t.int64_data().data(), *n * 8);
    break;
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    if (t.uint64_data_size() != *n)
      return sizeError(t.uint64_data_size());
    for (int64_t i = 0; i < *n; ++i)
      ir::storeElement<uint64_t>(*dt, p, i, t.uint64_data(i));
    break;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16: // int32_data holds the 16-bit patterns
    if (t.int32_data_size() != *n)
      return sizeError(t.int32_data_size());
    for (int64_t i = 0; i < *n; ++i) {
      uint16_t bits = static_cast<uint16_t>(t.int32_data(i));
      std::memcpy(static_cast<char *>(p) + 2 * i, &bits, 2);
    }
    break;
  case kOnnxFloat8E4M3FN:
  case kOnnxFloat8E5M2: // and the 8-bit patterns of float8
    if (t.int32_data_size() != *n)
      return sizeError(t.int32_data_size());
    for (int64_t i = 0; i < *n; ++i)
      static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(t.int32_data(i));
    break;
  default: // INT32, INT16, INT8, UINT16, UINT8, BOOL in int32_data
    if (t.int32_data_size() != *n)
      return sizeError(t.int32_data_size());
    for (int64_t i = 0; i < *n; ++i)
      ir::storeElement<int64_t>(*dt, p, i, t.int32_data(i));
    break;
  }
  return r;
}

llvm::Expected<std::pair<std::string, ir::Tensor>> readTensorProtoFile(const std::string &path) {
  auto bytes = readRegularFile(path);
  if (!bytes.ok())
    return ir::makeError(bytes.status().message());
  onnx::TensorProto t;
  if (bytes->size() > INT32_MAX ||
      !t.ParseFromArray(bytes->data(), static_cast<int>(bytes->size())))
    return ir::errorf("'{0}' is not a serialized ONNX TensorProto", path);
  auto r = tensorFromOnnx(t, nullptr);
  if (!r)
    return ir::errorf("{0}: {1}", path, llvm::toString(r.takeError()));
  return std::make_pair(t.name(), std::move(*r));
}

} // namespace dlc::frontend

//===- OnnxLibrary.h - The ONNX library's passes, sandboxed -----*- C++ -*-===//
//
// For models the Debian ONNX library covers (opset <= 17, IR <= 8): its checker,
// shape inference and version converter, run in a child process (a crash there is
// an error, not dlc's), with large weights set aside while the model crosses the pipe.
//===----------------------------------------------------------------------===//
#pragma once

#include "NodeImporter.h"
#include "OnnxUtil.h"

#include <google/protobuf/repeated_ptr_field.h>
#include <string>
#include <unordered_map>
#include <vector>

namespace dlc::frontend {

/// What the ONNX library's passes did to a model.
struct OnnxLibraryResult {
  std::string error;              // the checker's message, if it rejected the model
  std::vector<std::string> notes; // shape inference or conversion that failed (not fatal)
  int opset = 0;                  // the default-domain opset after conversion
};

/// Large weights do not matter to the ONNX library's checker, shape inference or
/// version converter (they read dtypes, dims and small constant tensors), but copying
/// them into the sandbox's reply and parsing them back costs seconds on big models.
/// They are set aside (a 16-byte stub stays, so that each tensor still holds data) and
/// put back into the transformed model by name.
///
/// External initializers are set aside the same way (the converter does not keep
/// external-data fields: it would return them empty), their fields restored after;
/// small ones, which shape inference may read (a Reshape's shape), are read in and
/// become inline.
class WeightStash {
public:
  static constexpr size_t kMinBytes = 4096, kStubBytes = 16;
  WeightStash() = default;
  /// Sets `g`'s weights aside; an error when an external tensor cannot be read.
  llvm::Error stash(onnx::GraphProto &g, ExternalDataLoader &ext) {
    for (onnx::TensorProto &t : *g.mutable_initializer()) {
      if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        auto dt = dtypeFromOnnx(t.data_type());
        if (!dt)
          continue; // the importer names the type
        ir::TensorType type(*dt, ir::Shape(t.dims().begin(), t.dims().end()));
        auto n = type.checkedNumElements();
        if (!n || *n > (int64_t{1} << 40))
          continue; // and the dimensions
        if (type.byteSize() > kMinBytes) {
          Entry &e = bytes_[t.name()];
          e.dims.assign(t.dims().begin(), t.dims().end());
          e.dtype = t.data_type();
          e.external.Swap(t.mutable_external_data());
          t.set_data_location(onnx::TensorProto::DEFAULT);
          t.set_raw_data(std::string(kStubBytes, '\0'));
          continue;
        }
        auto loaded = ext.load(t, type);
        if (!loaded)
          return loaded.takeError();
        t.clear_external_data();
        t.set_data_location(onnx::TensorProto::DEFAULT);
        t.set_raw_data(static_cast<const char *>(loaded->raw()), loaded->byteSize());
      } else if (t.has_raw_data() && t.raw_data().size() > kMinBytes) {
        Entry &e = bytes_[t.name()];
        e.dims.assign(t.dims().begin(), t.dims().end());
        e.dtype = t.data_type();
        e.data.swap(*t.mutable_raw_data());
        t.set_raw_data(e.data.substr(0, kStubBytes));
      }
    }
    return llvm::Error::success();
  }
  /// Puts the bytes back; false if a set-aside tensor came back with another type or
  /// shape (the converter rewrote it), in which case nothing is restored.
  bool restore(onnx::GraphProto &g) {
    for (const onnx::TensorProto &t : g.initializer()) {
      auto it = bytes_.find(t.name());
      if (it != bytes_.end() &&
          (t.data_type() != it->second.dtype ||
           std::vector<int64_t>(t.dims().begin(), t.dims().end()) != it->second.dims ||
           t.raw_data().size() != kStubBytes))
        return false;
    }
    for (onnx::TensorProto &t : *g.mutable_initializer()) {
      auto it = bytes_.find(t.name());
      if (it == bytes_.end())
        continue;
      if (it->second.external.empty()) {
        t.mutable_raw_data()->swap(it->second.data);
        continue;
      }
      t.clear_raw_data();
      t.mutable_external_data()->CopyFrom(it->second.external);
      t.set_data_location(onnx::TensorProto::EXTERNAL);
    }
    return true;
  }
  bool empty() const { return bytes_.empty(); }

private:
  struct Entry {
    std::vector<int64_t> dims;
    int32_t dtype = 0;
    std::string data;                                                          // inline weights
    google::protobuf::RepeatedPtrField<onnx::StringStringEntryProto> external; // or these
  };
  std::unordered_map<std::string, Entry> bytes_;
};

/// Whether the ONNX library has a schema for every default-domain op of the graph at
/// `opset` (ONNX Runtime's SimplifiedLayerNormalization is a default-domain op the
/// library does not know; its checker would refuse the model).
bool libraryKnowsOps(const onnx::GraphProto &g, int opset);

/// Runs runOnnxLibrary in a child process and takes the transformed model back
/// through a pipe. The ONNX library has crashed on malformed models (fuzzing found a
/// null dereference in its version converter and out-of-range dims in its RNN shape
/// inference); in a child, a crash becomes an error instead of taking dlc down.
llvm::Error runOnnxLibrarySandboxed(onnx::ModelProto &model, const std::string &modelDir,
                                    const ImportOptions &opts, int originalOpset,
                                    OnnxLibraryResult &r);

} // namespace dlc::frontend

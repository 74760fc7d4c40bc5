//===- Commands.h - dlc subcommands -----------------------------*- C++ -*-===//
#pragma once

#include "dlc/runtime/Runtime.h"

#include <string>
#include <vector>

namespace dlc::tool {

/// Each subcommand gets the arguments after its name and returns the exit code.
int runOpt(const std::vector<std::string> &args);
int runInterpret(const std::vector<std::string> &args);
int runOps(const std::vector<std::string> &args);
int runImport(const std::vector<std::string> &args);
int runCompile(const std::vector<std::string> &args);
int runRun(const std::vector<std::string> &args);
int runInspect(const std::vector<std::string> &args);
int runBench(const std::vector<std::string> &args);
int runTrain(const std::vector<std::string> &args);
int runExport(const std::vector<std::string> &args);

/// An --input-shape: NAME=d0,d1,... where a dimension may be a range MIN..MAX.
struct InputShapeSpec {
  std::string name;
  std::vector<int64_t> min, max; // equal where the dimension is fixed
  bool ranged() const { return min != max; }
};

/// Reads a tensor file: .npy, or a serialized ONNX TensorProto (.pb).
Result<rt::HostTensor> readTensorFile(const std::string &path);

} // namespace dlc::tool

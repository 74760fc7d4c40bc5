//===- Inspect.h - What a package holds, and its modeled cost ---*- C++ -*-===//
//
// `dlc inspect` and the Python package's InferenceSession.inspect(): inspect()
// reads a package into a Report (kernels with their resources per architecture,
// launches, the memory plan, the training, data-parallel, control-flow and
// shape-range facts, and the latency model of CostModel.h); toJson() and
// printReport() render it. The model is a model, not a measurement.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/driver/CostModel.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dlc::driver {

struct KernelReport {
  std::string name, templateName, symbol;
  uint32_t chunk = 0;
  struct Resources {
    std::string arch;
    int64_t registers = 0, spillBytes = 0, staticSmem = 0;
  };
  std::vector<Resources> resources;
  bool needsSync = false, cooperative = false, tensorCore = false;
  /// Per reported GPU (Report::gpus): launches, the lowest SM fill, modeled time.
  std::vector<size_t> launches;
  std::vector<double> minFill, micros;
  /// Per reported GPU: the bounds summed over its launches, the limit of the largest.
  std::vector<codegen::Bounds> bounds;
  /// On the last GPU (H100): each launch's blocks, and the FLOPs and DRAM bytes.
  std::vector<uint64_t> blocks;
  double flops = 0;
  uint64_t bytes = 0;
};

struct Report {
  std::string packageName, model;
  /// The layers with tactics (the main schedule's, on the detailed GPU's architecture):
  /// the candidates a session times on a GPU.
  std::vector<pkg::TacticGroup> tactics;
  /// --tactics-cache: the file and the key it was written for, and per tactic group
  /// of the package's schedule the alternative chosen there and its measured time.
  std::string tacticsCachePath, tacticsCacheKey;
  std::map<uint32_t, std::pair<uint8_t, double>> tacticsChosen;
  /// The tactic choices embedded by dlc tune --embed: per GPU key, how many layers.
  std::vector<std::pair<std::string, size_t>> embeddedTactics;
  uint64_t packageBytes = 0;
  /// The GPUs the model reports (PackageCost::gpus); per-GPU figures are in this
  /// order, and the last (H100 by default) is the one the text details.
  std::vector<std::string> gpus;
  struct Module {
    std::string target;
    uint32_t chunk = 0;
    uint64_t bytes = 0;
  };
  std::vector<Module> modules;
  std::vector<KernelReport> kernels;
  PackageCost cost;
  /// Steps by kind in the package, and launches and library calls per GPU.
  size_t packageLaunches = 0, libraryCalls = 0, otherSteps = 0;
  std::vector<size_t> launchesOn, callsOn;
  uint64_t arenaBytes = 0, naiveBytes = 0, maxLiveBytes = 0, weightBytes = 0;

  /// A training package: its variables and the evaluation schedule.
  struct Training {
    size_t variables = 0, trainable = 0, parameterValues = 0, variableBytes = 0;
    uint32_t commitSteps = 0;
    size_t evaluationSteps = 0, sharedSteps = 0, evaluationOutputs = 0;
  };
  std::optional<Training> training;
  /// Data-parallel training: the all-reduces modeled at 2, 4 and 8 GPUs (a ZeRO-1
  /// package at its own world size).
  struct DataParallel {
    uint64_t bucketBytes = 0, shardedBytesPerRank = 0;
    uint32_t zeroRanks = 0;
    std::vector<DataParallelCost> scaling;
  };
  std::optional<DataParallel> dataParallel;
  /// Steps on one side of an If with a run-time condition.
  size_t conditionalSteps = 0;
  /// Launches that flag bad data, and inputs bound at compile time.
  struct Check {
    std::string node, what;
  };
  std::vector<Check> checks;
  struct BoundInput {
    std::string name, dtype, values, description;
    std::vector<int64_t> shape;
  };
  std::vector<BoundInput> boundInputs;
  /// A shape-range package: its ranges, and the modeled latency at the smallest and
  /// largest shape (the other figures are at the opt shape).
  struct ShapeRanges {
    struct Range {
      std::string input;
      uint32_t axis = 0;
      int64_t min = 0, max = 0, opt = 0;
    };
    std::vector<Range> ranges;
    std::string text;
    size_t schedules = 1;
    std::vector<double> microsAtMin, microsAtMax;
  };
  std::optional<ShapeRanges> shapeRanges;
};

/// The report on `gpus` (empty: codegen::reportedGpus(), A100 and H100).
Report inspect(const pkg::PackageFile &pf, const std::vector<codegen::GpuModel> &gpus = {});
/// `dlc inspect --json`.
llvm::json::Value toJson(const Report &r);
/// `dlc inspect`.
void printReport(const Report &r, llvm::raw_ostream &os);

} // namespace dlc::driver

//===- Calibrate.h - Measuring a GPU for the cost model ---------*- C++ -*-===//
//
// `dlc calibrate` (and the GPU kit's `dlc-run --calibrate`): microbenchmarks that
// measure, on the GPU at hand, the numbers the cost model assumes in its profiles
// (codegen/GpuModel.h): the sustained SM clock, FFMA, HFMA2 and mma.sync throughput,
// DRAM and L2 bandwidth, L2-hit and DRAM load latency, kernel launch and CUDA-graph
// node overhead. The kernels are CUDA C++ (calibrationKernelSource()) that the caller
// compiles for the GPU's architecture; the timing uses CUDA events, the minimum of
// several repetitions.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/support/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dlc::rt {

struct Calibration {
  std::string device; // "NVIDIA H100 80GB HBM3"
  int ccMajor = 0, ccMinor = 0, sms = 0;
  double clockHz = 0;            // sustained SM clock under the FFMA load (clock64 / time)
  double ffmaPerClock = 0;       // warp FFMA instructions per clock per SM
  double hfma2PerClock = 0;      // warp HFMA2 per clock per SM
  double hmmaPerClock = 0;       // mma.sync m16n8k16 FP16 (FP32 accumulate) per clock per SM
  double dramBytesPerSecond = 0; // a streaming copy: bytes read + written per second
  double l2BytesPerSecond = 0;   // reads of a buffer a quarter of L2's size
  double l2LatencyCycles = 0, dramLatencyCycles = 0; // one thread chasing pointers
  double launchMicros = 0;      // back-to-back launches of an empty kernel, per launch
  double graphNodeMicros = 0;   // a CUDA graph of empty kernels, per node
  double runOverheadMicros = 0; // host time to launch a one-node graph and wait for it
  std::string arch() const { return "sm_" + std::to_string(ccMajor * 10 + ccMinor); }
};

/// The microbenchmarks as CUDA C++ (extern "C" kernels named dlc_cal_*).
const char *calibrationKernelSource();

/// The compute capability of CUDA device `device`: which cubin to compile.
Result<std::pair<int, int>> cudaComputeCapability(int device);

/// Runs the microbenchmarks from `cubin` (calibrationKernelSource() compiled for the
/// device's architecture) on CUDA device `device`. `progress` gets one line per
/// measurement as it starts. Needs about 800 MB of free GPU memory and a few seconds.
Result<Calibration> calibrate(int device, const std::vector<uint8_t> &cubin,
                              const std::function<void(const std::string &)> &progress = {});

/// A profile for `dlc inspect --gpu-profile`: `name`, the architecture and each
/// measured number by the profile's field names (codegen/GpuModel.h; the loader keeps
/// the built-in profile's data-sheet peaks and derives what it measured against them).
std::string calibrationProfileJson(const Calibration &c, const std::string &name);

/// The built-in profile a device's name names as a whole word ("NVIDIA H100 80GB HBM3":
/// "H100"; "NVIDIA L40S": none), or "".
std::string profileNameFor(const std::string &device);

} // namespace dlc::rt

//===- Cli.h - `run` and `bench` for dlc and generated executables -*- C++ -*-===//
//
// The command-line front ends shared by `dlc run`, `dlc bench` and the executables
// that `dlc compile --emit exe` produces. LLVM-free: part of the runtime.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/runtime/Runtime.h"

#include <functional>
#include <string>
#include <vector>

namespace dlc::cli {

/// Reads an input file into a tensor; the default reads .npy.
using InputReader = std::function<Result<rt::HostTensor>(const std::string &path)>;

struct CliContext {
  std::string program;                             // "dlc run", "mymodel"
  std::shared_ptr<const pkg::PackageFile> package; // null: the first positional names it
  InputReader readInput;                           // null: .npy only
};

/// `run`: [PACKAGE] [--input] NAME=FILE ... [--output-dir DIR] [--device D] [--threads N] [-q]
int runMain(const std::vector<std::string> &args, const CliContext &ctx);
/// `bench`: [PACKAGE] [--warmup N] [--iterations N] [--batch N] [--device D] [--input ...]
int benchMain(const std::vector<std::string> &args, const CliContext &ctx);

/// `tune`: PACKAGE [--device N] [--budget-ms N] [--cache-dir DIR]: the tactics chosen on
/// this GPU ahead of time, into the tactics cache (no GPU: one line, exit 1).
int tuneMain(const std::vector<std::string> &args, const CliContext &ctx);

/// `--calibrate DIR [--device N] [--name NAME] [-o FILE]`: the microbenchmarks of
/// `dlc calibrate` from DIR/calibrate_sm_XX.cubin (written by `dlc calibrate
/// --emit-kernels DIR`) on this machine's GPU; prints what it measured and the profile
/// (or writes it to FILE, atomically). For the package runner, which has no compiler.
int calibrateMain(const std::vector<std::string> &args, const CliContext &ctx);

/// The file an output is written to by `--output-dir`: NAME.npy with the name
/// sanitized to [A-Za-z0-9_.-].
std::string outputFileName(const std::string &name);

} // namespace dlc::cli

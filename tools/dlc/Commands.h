//===- Commands.h - dlc subcommands -----------------------------*- C++ -*-===//
#pragma once

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
int runCalibrate(const std::vector<std::string> &args);
int runTune(const std::vector<std::string> &args);
int runQuantize(const std::vector<std::string> &args);

} // namespace dlc::tool

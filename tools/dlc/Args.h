//===- Args.h - Command-line parsing for dlc subcommands --------*- C++ -*-===//
#pragma once

#include "dlc/runtime/Runtime.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dlc::tool {

struct OptSpec {
  std::string name;   // long name without dashes: "passes"
  char shortName = 0; // 'o' for -o; 'O' for -O2 (value attached)
  bool takesValue = false;
  bool repeatable = false;
  std::string metavar; // "LIST"
  std::string help;
};

class Args {
public:
  bool has(const std::string &name) const { return values_.count(name) != 0; }
  std::optional<std::string> get(const std::string &name) const;
  std::string getOr(const std::string &name, const std::string &dflt) const;
  const std::vector<std::string> &getAll(const std::string &name) const;
  const std::vector<std::string> &positionals() const { return positionals_; }

private:
  friend class ArgParser;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positionals_;
};

class ArgParser {
public:
  ArgParser(std::string command, std::string usage, std::string description,
            std::vector<OptSpec> opts);
  /// Parses argv (without the program and command names). "--" ends options.
  llvm::Expected<Args> parse(const std::vector<std::string> &argv) const;
  /// A command's arguments: a parse error is reported (exitCode 2), --help printed
  /// (exitCode 0), and with `onePositional` (what it names: "model file") anything
  /// but exactly one positional argument is an error (exitCode 2). Returns nothing
  /// in those cases, and the command returns exitCode.
  std::optional<Args> parseCommand(const std::vector<std::string> &argv, int &exitCode,
                                   const std::string &onePositional = "") const;
  void printHelp(llvm::raw_ostream &os) const;

private:
  const OptSpec *findLong(const std::string &n) const;
  const OptSpec *findShort(char c) const;
  std::string command_, usage_, description_;
  std::vector<OptSpec> opts_;
};

/// Writes a command's report to the file of its -o option (atomically), or to stdout
/// without one; returns the exit code (1 with the error reported).
int writeReport(const Args &args, const std::string &text);

/// An .npz file, its members stored or deflated (numpy.savez_compressed).
Result<rt::NpzArrays> readNpzFile(const std::string &path);

/// Prints "dlc: error: <message>" to stderr.
void reportError(llvm::Error e);
void reportError(const std::string &message);

} // namespace dlc::tool

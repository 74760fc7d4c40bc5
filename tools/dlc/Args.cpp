#include "Args.h"

#include "dlc/codegen/Artifacts.h"
#include "dlc/ir/Graph.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"

#include <zlib.h>

namespace dlc::tool {

std::optional<std::string> Args::get(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty())
    return std::nullopt;
  return it->second.back();
}

std::string Args::getOr(const std::string &name, const std::string &dflt) const {
  auto v = get(name);
  return v ? *v : dflt;
}

const std::vector<std::string> &Args::getAll(const std::string &name) const {
  static const std::vector<std::string> empty;
  auto it = values_.find(name);
  return it == values_.end() ? empty : it->second;
}

ArgParser::ArgParser(std::string command, std::string usage, std::string description,
                     std::vector<OptSpec> opts)
    : command_(std::move(command)), usage_(std::move(usage)), description_(std::move(description)),
      opts_(std::move(opts)) {
  opts_.push_back({"help", 'h', false, false, "", "Show this help"});
}

const OptSpec *ArgParser::findLong(const std::string &n) const {
  for (const OptSpec &o : opts_)
    if (o.name == n)
      return &o;
  return nullptr;
}

const OptSpec *ArgParser::findShort(char c) const {
  for (const OptSpec &o : opts_)
    if (o.shortName == c)
      return &o;
  return nullptr;
}

llvm::Expected<Args> ArgParser::parse(const std::vector<std::string> &argv) const {
  Args a;
  bool onlyPositionals = false;
  auto store = [&](const OptSpec &o, std::string v) -> llvm::Error {
    auto &slot = a.values_[o.name];
    if (!slot.empty() && !o.repeatable && o.takesValue)
      return ir::errorf("option --{0} given more than once", o.name);
    slot.push_back(std::move(v));
    return llvm::Error::success();
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string &arg = argv[i];
    if (onlyPositionals || arg.size() < 2 || arg[0] != '-') {
      a.positionals_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      onlyPositionals = true;
      continue;
    }
    const OptSpec *o = nullptr;
    std::optional<std::string> value;
    if (arg[1] == '-') {
      std::string body = arg.substr(2);
      size_t eq = body.find('=');
      if (eq != std::string::npos) {
        value = body.substr(eq + 1);
        body = body.substr(0, eq);
      }
      o = findLong(body);
      if (!o)
        return ir::errorf("{0}: unknown option '--{1}' (see 'dlc {0} --help')", command_, body);
    } else {
      o = findShort(arg[1]);
      if (!o)
        return ir::errorf("{0}: unknown option '{1}' (see 'dlc {0} --help')", command_, arg);
      if (arg.size() > 2) {
        if (!o->takesValue)
          return ir::errorf("{0}: option '-{1}' takes no value", command_, arg[1]);
        value = arg.substr(2);
      }
    }
    if (o->takesValue && !value) {
      if (i + 1 >= argv.size())
        return ir::errorf("{0}: option --{1} needs a value", command_, o->name);
      value = argv[++i];
    }
    if (!o->takesValue && value)
      return ir::errorf("{0}: option --{1} takes no value", command_, o->name);
    if (auto e = store(*o, value.value_or("")))
      return e;
  }
  return a;
}

std::optional<Args> ArgParser::parseCommand(const std::vector<std::string> &argv, int &exitCode,
                                            const std::string &onePositional) const {
  auto args = parse(argv);
  exitCode = 2;
  if (!args) {
    reportError(args.takeError());
    return std::nullopt;
  }
  if (args->has("help")) {
    printHelp(llvm::outs());
    exitCode = 0;
    return std::nullopt;
  }
  if (!onePositional.empty() && args->positionals().size() != 1) {
    reportError(ir::errorf("{0}: expected exactly one {1}", command_, onePositional));
    return std::nullopt;
  }
  return std::move(*args);
}

void ArgParser::printHelp(llvm::raw_ostream &os) const {
  os << "usage: dlc " << command_ << " " << usage_ << "\n\n" << description_ << "\n\noptions:\n";
  for (const OptSpec &o : opts_) {
    std::string left = "  ";
    if (o.shortName)
      left += std::string("-") + o.shortName + (o.takesValue && o.name.empty() ? "" : ", ");
    left += "--" + o.name;
    if (o.takesValue)
      left += " " + (o.metavar.empty() ? std::string("VALUE") : o.metavar);
    os << left;
    if (left.size() < 30)
      os.indent(30 - left.size());
    else
      os << "\n" << std::string(30, ' ');
    os << o.help << "\n";
  }
}

int writeReport(const Args &args, const std::string &text) {
  if (auto out = args.get("output")) {
    if (auto e = codegen::writeFileAtomically(*out, text)) {
      reportError(std::move(e));
      return 1;
    }
  } else {
    llvm::outs() << text;
  }
  return 0;
}

void reportError(llvm::Error e) {
  reportError(llvm::toString(std::move(e)));
}

void reportError(const std::string &message) {
  llvm::errs() << "dlc: error: " << message << "\n";
}

/// Raw deflate (zip method 8) with zlib, for numpy.savez_compressed data.
static bool zlibInflate(const uint8_t *in, size_t n, uint8_t *out, size_t outSize) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
    return false;
  z.next_in = const_cast<uint8_t *>(in);
  z.avail_in = static_cast<uInt>(n);
  z.next_out = out;
  z.avail_out = static_cast<uInt>(outSize);
  int r = inflate(&z, Z_FINISH);
  bool done = r == Z_STREAM_END && z.total_out == outSize;
  inflateEnd(&z);
  return done;
}

Result<rt::NpzArrays> readNpzFile(const std::string &path) {
  return rt::readNpz(path, zlibInflate);
}

} // namespace dlc::tool

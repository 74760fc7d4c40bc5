//===- StubMain.cpp - The executable that `dlc compile --emit exe` extends --===//
//
// Runs the package appended to this executable: `./mymodel --input x=in.npy
// --output-dir out/`, `./mymodel --bench`, `./mymodel --info`. With nothing appended it
// is a runner for package files, needing only libc: `dlc-exe-stub MODEL.dlc ...`
// (as `dlc run`) or `dlc-exe-stub --bench MODEL.dlc ...` (as `dlc bench`), and
// `dlc-exe-stub --calibrate DIR` measures the GPU as `dlc calibrate` does.
//===----------------------------------------------------------------------===//
#include "dlc/package/ExeFormat.h"
#include "dlc/runtime/Cli.h"

#include <cinttypes>
#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace dlc;

namespace {

Result<std::shared_ptr<const pkg::PackageFile>> embeddedPackage(const std::string &self) {
  int fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status(StatusCode::IoError, "cannot open " + self);
  struct stat st;
  cli::ExeFooter f{};
  bool ok = ::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof f) &&
            ::pread(fd, &f, sizeof f, st.st_size - static_cast<off_t>(sizeof f)) ==
                static_cast<ssize_t>(sizeof f);
  ::close(fd);
  if (!ok || !cli::isExeFooter(f))
    return Status(
        StatusCode::InvalidPackage,
        "no package is embedded in this executable (it is the stub that `dlc compile --emit exe` "
        "extends)");
  if (f.packageSize > static_cast<uint64_t>(st.st_size) - sizeof f ||
      f.packageOffset > static_cast<uint64_t>(st.st_size) - sizeof f - f.packageSize)
    return Status(StatusCode::InvalidPackage, "the package footer of this executable is corrupted");
  auto pf = pkg::PackageFile::load(self, f.packageOffset, f.packageSize);
  if (!pf)
    return pf.takeStatus();
  return std::shared_ptr<const pkg::PackageFile>(*pf);
}

void printInfo(const char *prog, const pkg::Package &m) {
  std::printf("%s: model '%s'\n", prog, m.model() ? m.model()->c_str() : "");
  auto list = [](const char *what,
                 const flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>> *v) {
    if (!v)
      return;
    for (const pkg::TensorInfo *t : *v) {
      std::printf("  %s %s: %s[", what, t->name()->c_str(), pkg::dtypeName(t->dtype()));
      for (size_t i = 0; t->shape() && i < t->shape()->size(); ++i)
        std::printf("%s%" PRId64, i ? "," : "", t->shape()->Get(i));
      std::printf("]\n");
    }
  };
  list("input ", m.inputs());
  list("output", m.outputs());
}

} // namespace

int main(int argc, char **argv) {
  std::string prog = argc > 0 ? argv[0] : "model";
  if (size_t slash = prog.rfind('/'); slash != std::string::npos)
    prog = prog.substr(slash + 1);
  std::vector<std::string> args(argv + 1, argv + argc);
  auto pf = embeddedPackage("/proc/self/exe");
  bool packageArgument = false;
  for (const std::string &a : args)
    if (a.size() > 4 && a.compare(a.size() - 4, 4, ".dlc") == 0 && a[0] != '-')
      packageArgument = true;
  bool calibrate = false;
  for (const std::string &a : args)
    calibrate |= a == "--calibrate" || a.rfind("--calibrate=", 0) == 0;
  if (!pf && calibrate) {
    cli::CliContext ctx;
    ctx.program = prog;
    return cli::calibrateMain(args, ctx);
  }
  if (!pf && !packageArgument) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), pf.status().message().c_str());
    return 1;
  }
  bool bench = false, info = false;
  for (auto it = args.begin(); it != args.end();) {
    if (*it == "--bench" || *it == "--info") {
      (*it == "--bench" ? bench : info) = true;
      it = args.erase(it);
    } else {
      ++it;
    }
  }
  if (info && pf) {
    printInfo(prog.c_str(), (*pf)->meta());
    return 0;
  }
  cli::CliContext ctx;
  ctx.program = prog;
  if (pf)
    ctx.package = *pf; // else the runner: the package is the first positional
  if (bench)
    return cli::benchMain(args, ctx);
  for (const std::string &a : args)
    if (a == "--help" || a == "-h") {
      std::printf(
          "%s: a model compiled by dlc. --info lists its inputs and outputs; --bench measures it\n"
          "(see --bench --help).\n\n",
          prog.c_str());
      break;
    }
  return cli::runMain(args, ctx);
}

//===- Ranks.cpp - `dlc train --nproc N` and the ranks of a data-parallel run -===//
//
// --nproc N starts the ranks as the existing engines expect them:
//  - emu ranks reduce through MPI, so they are started by Open MPI's mpirun (this
//    process becomes `mpirun -np N dlc train ...`, which ends every rank when one dies);
//  - cuda ranks (one per GPU) reduce through NCCL: N children of this process, each
//    told its rank in DLC_RANK / DLC_WORLD_SIZE / DLC_LOCAL_RANK, meeting at a file
//    rendezvous for NCCL's id. This process waits for them; when one fails, it gives
//    the others a few seconds to notice and then stops them (and a launcher that dies
//    takes its ranks with it).
// `mpirun -np N dlc train ...` across machines needs none of this: each rank finds its
// place in Open MPI's environment (joinRanks).
//===----------------------------------------------------------------------===//
#include "Ranks.h"

#include "Args.h"
#include "dlc/ir/Graph.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace dlc::tool {

namespace {

std::string selfPath() {
  static int anchor;
  return llvm::sys::fs::getMainExecutable(nullptr, &anchor);
}

/// The command line less --nproc N / --nproc=N.
std::vector<std::string> withoutNproc(const std::vector<std::string> &argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--nproc") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--nproc=", 0) == 0)
      continue;
    out.push_back(argv[i]);
  }
  return out;
}

int fail(const std::string &msg) {
  reportError(ir::makeError(msg));
  return 1;
}

std::string exitText(int status) {
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

/// Emu ranks: this process becomes mpirun.
int execMpirun(const std::vector<std::string> &rest, int nproc, bool quiet) {
  const char *override = std::getenv("DLC_MPIRUN");
  auto found = llvm::sys::findProgramByName(override && *override ? override : "mpirun");
  std::string mpirun = found ? *found : "";
  if (mpirun.empty())
    return fail("--nproc on emu starts the ranks with Open MPI's mpirun, which is not on PATH "
                "(apt-get install openmpi-bin, or set DLC_MPIRUN)");
  std::vector<std::string> cmd{mpirun,      "-np", std::to_string(nproc), "--oversubscribe",
                               "--bind-to", "none"};
  if (::geteuid() == 0)
    cmd.push_back("--allow-run-as-root");
  cmd.push_back(selfPath());
  cmd.push_back("train");
  cmd.insert(cmd.end(), rest.begin(), rest.end());
  // Containers often forbid the cross-memory attach of Open MPI's shared-memory
  // transport; copying through the shared segment works everywhere.
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  if (!quiet)
    llvm::errs() << "dlc: starting " << nproc << " emu ranks with " << mpirun << "\n";
  llvm::errs().flush();
  std::vector<char *> cargv;
  for (std::string &s : cmd)
    cargv.push_back(s.data());
  cargv.push_back(nullptr);
  ::execv(cargv[0], cargv.data());
  return fail("cannot start '" + mpirun + "': " + std::strerror(errno));
}

/// cuda ranks: N children meeting at a file rendezvous; waits for them.
int forkRanks(const std::vector<std::string> &rest, int nproc, const LaunchOptions &o) {
  int devices = rt::cudaDeviceCount();
  if (nproc > devices)
    return fail("--nproc " + std::to_string(nproc) + " needs a GPU per rank; this machine has " +
                std::to_string(devices));
  std::string dir, rendezvous = o.rendezvous;
  if (rendezvous.empty()) {
    char tmpl[] = "/tmp/dlc-ranks-XXXXXX";
    if (!::mkdtemp(tmpl))
      return fail(std::string("cannot make a directory for the rendezvous: ") +
                  std::strerror(errno));
    dir = tmpl;
    rendezvous = "file:" + dir + "/nccl-id";
  }
  // The ranks of one job share a secret that authenticates a tcp: rendezvous
  // (Communicator.cpp); one given in the environment is kept (ranks on other machines).
  std::string secret;
  if (const char *given = std::getenv("DLC_RENDEZVOUS_SECRET"); given && *given) {
    secret = given;
  } else {
    uint8_t raw[16];
    int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && ::read(fd, raw, sizeof raw) == ssize_t(sizeof raw);
    if (fd >= 0)
      ::close(fd);
    if (!ok)
      return fail(std::string("cannot read /dev/urandom for the rendezvous secret: ") +
                  std::strerror(errno));
    static const char digits[] = "0123456789abcdef";
    for (uint8_t b : raw)
      secret += {digits[b >> 4], digits[b & 15]};
  }
  std::string self = selfPath();
  std::map<pid_t, int> ranks;
  llvm::errs().flush();
  auto stopAll = [&](int sig) {
    for (const auto &[p, r] : ranks)
      ::kill(p, sig);
  };
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::string why = std::strerror(errno);
      stopAll(SIGKILL);
      for (const auto &[p, rank] : ranks)
        ::waitpid(p, nullptr, 0);
      return fail("fork: " + why);
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // a launcher that dies takes its ranks with it
      ::setenv("DLC_RANK", std::to_string(r).c_str(), 1);
      ::setenv("DLC_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("DLC_LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("DLC_RENDEZVOUS", rendezvous.c_str(), 1);
      ::setenv("DLC_RENDEZVOUS_SECRET", secret.c_str(), 1);
      std::vector<std::string> cmd{self, "train"};
      cmd.insert(cmd.end(), rest.begin(), rest.end());
      std::vector<char *> cargv;
      for (std::string &s : cmd)
        cargv.push_back(s.data());
      cargv.push_back(nullptr);
      ::execv(cargv[0], cargv.data());
      _exit(127);
    }
    ranks[pid] = r;
  }
  if (!o.quiet)
    llvm::errs() << "dlc: started " << nproc << " cuda ranks (NCCL, rendezvous " << rendezvous
                 << ")\n";
  int failed = 0;
  std::chrono::steady_clock::time_point stopAt;
  bool stopping = false;
  while (!ranks.empty()) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      int r = ranks[pid];
      ranks.erase(pid);
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !failed) {
        failed = 1;
        stopping = true;
        // A few seconds for the others to notice and say why, then they are stopped.
        stopAt = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(std::min(o.timeoutSeconds, 5.0)));
        reportError(ir::makeError("rank " + std::to_string(r) + " " + exitText(status) +
                                  "; stopping the other ranks"));
      }
      continue;
    }
    if (stopping && std::chrono::steady_clock::now() > stopAt) {
      stopAll(SIGKILL);
      stopping = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!dir.empty()) {
    std::string id = dir + "/nccl-id";
    ::unlink(id.c_str());
    ::rmdir(dir.c_str());
  }
  return failed;
}

} // namespace

int launchRanks(const std::vector<std::string> &argv, const LaunchOptions &o) {
  if (rt::launchedByMpi() || std::getenv("DLC_WORLD_SIZE"))
    return fail("--nproc starts the ranks itself: leave it out under mpirun (or as a rank of "
                "another launcher)");
  std::vector<std::string> rest = withoutNproc(argv);
  bool cuda = o.device == "cuda" || (o.device == "auto" && rt::cudaDeviceCount() > 0);
  return cuda ? forkRanks(rest, o.nproc, o) : execMpirun(rest, o.nproc, o.quiet);
}

Result<RankContext> joinRanks(double timeoutSeconds, const std::string &rendezvous) {
  RankContext c;
  auto info = rt::rankFromEnvironment();
  if (!info)
    return info.takeStatus();
  c.info = *info;
  c.options.timeoutSeconds = timeoutSeconds;
  c.options.rendezvous = rendezvous;
  if (c.info.size > 1 && rt::launchedByMpi()) {
    auto comm = rt::createMpiCommunicator(c.options);
    if (!comm)
      return comm.takeStatus();
    c.comm = std::move(*comm);
    c.info.rank = c.comm->rank();
    c.info.size = c.comm->size();
  }
  return c;
}

} // namespace dlc::tool

//===- Ranks.h - Starting and joining the ranks of data-parallel training -*- C++ -*-===//
#pragma once

#include "dlc/runtime/Runtime.h"

#include <string>
#include <vector>

namespace dlc::tool {

struct LaunchOptions {
  int nproc = 1;
  std::string device = "auto"; // --device
  std::string rendezvous;      // --rendezvous (cuda ranks)
  double timeoutSeconds = 300; // --timeout
  bool quiet = false;
};

/// `dlc train --nproc N ...` (`argv`: the arguments after "train"): starts N ranks of
/// the same command without --nproc and returns the exit code for all of them.
int launchRanks(const std::vector<std::string> &argv, const LaunchOptions &o);

/// This process's place in a data-parallel run: its rank (world size 1 when it was
/// not started as a rank) and, under mpirun, the MPI communicator.
struct RankContext {
  rt::RankInfo info;
  std::shared_ptr<rt::Communicator> comm;
  rt::CommOptions options;
  bool distributed() const { return info.size > 1; }
  bool lead() const { return info.rank == 0; }
};
Result<RankContext> joinRanks(double timeoutSeconds, const std::string &rendezvous);

} // namespace dlc::tool

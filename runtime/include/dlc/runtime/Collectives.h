//===- Collectives.h - Data-parallel collectives behind one interface -----===//
//
// A Communicator is the group of processes (ranks) of one data-parallel run. Two
// engines sit behind it, both loaded with dlopen so that the runtime links neither:
//  - MPI (Open MPI's libmpi.so.40): reduces host memory; the emu backend's ranks,
//    launched by `mpirun` or `dlc train --nproc`.
//  - NCCL (libnccl.so.2): reduces device memory on a CUDA stream; the cuda backend.
//    Its unique id is exchanged through MPI when mpirun launched the ranks, else
//    through a file or TCP rendezvous (DLC_RENDEZVOUS / --rendezvous).
// Every wait is bounded (CommOptions::timeoutSeconds): a rank that died makes the
// others fail with an error instead of hanging.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/Package.h"

#include <memory>
#include <string>

namespace dlc::rt {

enum class ReduceOp { Sum, Avg };

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The rank among those on this machine (picks the GPU).
  virtual int localRank() const = 0;
  /// "MPI (Open MPI v4.1.4), rank 0 of 4" / "NCCL 2.27.3, rank 0 of 4".
  virtual std::string describe() const = 0;

  /// Host memory, in place, blocking: `count` elements of `dt` (F32, F64, F16, BF16).
  virtual Status allReduce(void *data, size_t count, pkg::DType dt, ReduceOp op) = 0;
  virtual Status broadcast(void *data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;
  /// Host memory, blocking: the mean (or sum) over the ranks of `send` (count x size()
  /// elements), of which this rank's share (the rank-th `count` elements) goes to
  /// `recv`. ZeRO-1's gradient shards.
  virtual Status reduceScatter(const void *send, void *recv, size_t count, pkg::DType dt,
                               ReduceOp op) = 0;
  /// Host memory, blocking: every rank's `bytes` of `send`, in rank order, into `recv`.
  virtual Status allGather(const void *send, void *recv, size_t bytes) = 0;

  /// Device memory, in place, ordered on a CUDA stream (NCCL only).
  virtual bool onDevice() const { return false; }
  virtual Status allReduceDevice(uint64_t ptr, size_t count, pkg::DType dt, ReduceOp op,
                                 void *stream) {
    (void)ptr, (void)count, (void)dt, (void)op, (void)stream;
    return Status(StatusCode::Unavailable, "device collectives need NCCL");
  }
  virtual Status broadcastDevice(uint64_t ptr, size_t bytes, int root, void *stream) {
    (void)ptr, (void)bytes, (void)root, (void)stream;
    return Status(StatusCode::Unavailable, "device collectives need NCCL");
  }
  virtual Status reduceScatterDevice(uint64_t send, uint64_t recv, size_t count, pkg::DType dt,
                                     ReduceOp op, void *stream) {
    (void)send, (void)recv, (void)count, (void)dt, (void)op, (void)stream;
    return Status(StatusCode::Unavailable, "device collectives need NCCL");
  }
  virtual Status allGatherDevice(uint64_t send, uint64_t recv, size_t bytes, void *stream) {
    (void)send, (void)recv, (void)bytes, (void)stream;
    return Status(StatusCode::Unavailable, "device collectives need NCCL");
  }
  /// An error reported asynchronously by the library (NCCL), or ok.
  virtual Status asyncError() { return Status::ok(); }
  /// Ends the collectives in flight on the device (a peer is gone: NCCL's kernels would
  /// wait for it for ever); the communicator is unusable afterwards.
  virtual void abortCollectives() {}
  /// The bound on every wait, in seconds.
  virtual double timeoutSeconds() const = 0;

  /// Ends this rank's process with `code` and makes the others end too (after an
  /// error on one rank the others would wait for it until their timeout).
  [[noreturn]] virtual void abort(int code) = 0;
};

struct CommOptions {
  /// How long a rank waits for the others (a collective, the rendezvous).
  double timeoutSeconds = 300;
  /// NCCL's unique id without MPI: "file:PATH" or "tcp:HOST:PORT" ($DLC_RENDEZVOUS
  /// when empty).
  std::string rendezvous;
};

/// Whether this process was started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or
/// PMI_SIZE / PMIX_RANK of other launchers).
bool launchedByMpi();

/// The rank, world size and local rank from the environment: Open MPI's
/// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}, else DLC_RANK, DLC_WORLD_SIZE and
/// DLC_LOCAL_RANK (set by `dlc train --nproc`). World size 1 when neither is set.
struct RankInfo {
  int rank = 0, size = 1, localRank = 0;
};
Result<RankInfo> rankFromEnvironment();

/// MPI_COMM_WORLD of Open MPI, initialized here (MPI_THREAD_SERIALIZED: the emu
/// backend reduces on a thread of its own). The library is $DLC_MPI_LIBRARY or
/// libmpi.so.40; a missing one is an error that names it. One per process.
Result<std::shared_ptr<Communicator>> createMpiCommunicator(const CommOptions &opts);

/// An NCCL communicator of every rank, for the CUDA device that is current on the
/// calling thread. `bootstrap` (may be null) exchanges the unique id (MPI); without
/// it the ranks come from rankFromEnvironment() and meet at opts.rendezvous. The
/// library is $DLC_NCCL_LIBRARY or libnccl.so.2.
Result<std::shared_ptr<Communicator>>
createNcclCommunicator(const CommOptions &opts, std::shared_ptr<Communicator> bootstrap);

/// The rendezvous alone: rank 0 publishes `bytes`, the others receive them
/// ("file:PATH" or "tcp:HOST:PORT"). Every rank waits at most `timeoutSeconds`.
Status rendezvousExchange(const std::string &spec, const RankInfo &me, void *bytes, size_t n,
                          double timeoutSeconds);

} // namespace dlc::rt

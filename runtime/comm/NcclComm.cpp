//===- NcclComm.cpp - Device collectives through NCCL, loaded at run time --===//
//
// libnccl.so.2 is opened with dlopen, like libcuda, so that the runtime links
// neither; the few types of nccl.h used here are declared below with the values of
// its enums (NCCL 2.28's header). Rank 0 creates NCCL's unique id and hands it to the
// others through the MPI bootstrap when mpirun launched the ranks, else through the
// file or TCP rendezvous (Communicator.cpp); a rank 0 that could not create one
// still publishes, so that the others fail at once instead of at their timeout.
//
// The communicator is nonblocking (ncclConfig_t::blocking = 0): every NCCL call may
// return ncclInProgress, and is then polled with ncclCommGetAsyncError until a
// deadline, so that initializing with a rank that never comes is an error rather
// than a hang. Collectives are enqueued on the caller's stream; their completion
// (and a peer that died during them) shows on that stream and in asyncError().
//===----------------------------------------------------------------------===//
#include "CommUtil.h"
#include "dlc/runtime/Collectives.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unistd.h>

namespace dlc::rt {

namespace {

//===----------------------------------------------------------------------===//
// nccl.h
//===----------------------------------------------------------------------===//

using NcclCommHandle = void *; // ncclComm_t
using CudaStream = void *;     // cudaStream_t
struct NcclUniqueId {          // ncclUniqueId: NCCL_UNIQUE_ID_BYTES, passed by value
  char internal[128];
};
// ncclResult_t
constexpr int kNcclSuccess = 0, kNcclInProgress = 7;
// ncclDataType_t
constexpr int kNcclUint8 = 1, kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclFloat64 = 8,
              kNcclBfloat16 = 9;
// ncclRedOp_t (ncclAvg since NCCL 2.10)
constexpr int kNcclSum = 0, kNcclAvg = 4;

/// ncclConfig_t as of NCCL 2.17 (NCCL_CONFIG_INITIALIZER's first fields). Later
/// versions only append fields: NCCL reads `size` bytes and gives the fields that
/// `version` predates their defaults, so this prefix is a valid config for them.
struct NcclConfig {
  size_t size = sizeof(NcclConfig);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21700; // NCCL_VERSION(2, 17, 0)
  int blocking = INT_MIN;       // NCCL_CONFIG_UNDEF_INT
  int cgaClusterSize = INT_MIN;
  int minCTAs = INT_MIN;
  int maxCTAs = INT_MIN;
  const char *netName = nullptr;
};

#define DLC_NCCL_REQUIRED(X)                                                                       \
  X(ncclGetVersion, int(int *))                                                                    \
  X(ncclGetUniqueId, int(NcclUniqueId *))                                                          \
  X(ncclCommInitRank, int(NcclCommHandle *, int, NcclUniqueId, int))                               \
  X(ncclAllReduce, int(const void *, void *, size_t, int, int, NcclCommHandle, CudaStream))        \
  X(ncclBroadcast, int(const void *, void *, size_t, int, int, NcclCommHandle, CudaStream))        \
  X(ncclReduceScatter, int(const void *, void *, size_t, int, int, NcclCommHandle, CudaStream))    \
  X(ncclAllGather, int(const void *, void *, size_t, int, NcclCommHandle, CudaStream))             \
  X(ncclCommDestroy, int(NcclCommHandle))                                                          \
  X(ncclCommAbort, int(NcclCommHandle))                                                            \
  X(ncclCommGetAsyncError, int(NcclCommHandle, int *))                                             \
  X(ncclGetErrorString, const char *(int))

// Newer than the oldest NCCL that works (2.12): used when there.
#define DLC_NCCL_OPTIONAL(X)                                                                       \
  X(ncclCommInitRankConfig, int(NcclCommHandle *, int, NcclUniqueId, int, NcclConfig *))           \
  X(ncclCommFinalize, int(NcclCommHandle))                                                         \
  X(ncclGetLastError, const char *(NcclCommHandle))

struct NcclApi {
  std::string path;
  int version = 0;
#define DLC_NCCL_FIELD(name, type) std::add_pointer_t<type> name = nullptr;
  DLC_NCCL_REQUIRED(DLC_NCCL_FIELD)
  DLC_NCCL_OPTIONAL(DLC_NCCL_FIELD)
#undef DLC_NCCL_FIELD

  /// "unhandled system error (NCCL's last error text)".
  std::string error(int r, NcclCommHandle comm) const {
    const char *s = ncclGetErrorString(r);
    std::string msg = s ? s : "NCCL error " + std::to_string(r);
    const char *last = ncclGetLastError ? ncclGetLastError(comm) : nullptr;
    if (last && *last)
      msg += " (" + std::string(last) + ")";
    return msg;
  }
  /// "2.28.9" from NCCL_VERSION_CODE (X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since).
  std::string versionText() const {
    int major = version >= 10000 ? version / 10000 : version / 1000;
    int minor = version >= 10000 ? version % 10000 / 100 : version % 1000 / 100;
    return std::to_string(major) + "." + std::to_string(minor) + "." +
           std::to_string(version % 100);
  }
};

Status loadNccl(NcclApi &api) {
  const char *env = std::getenv("DLC_NCCL_LIBRARY");
  api.path = env && *env ? env : "libnccl.so.2";
  void *lib = ::dlopen(api.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = ::dlerror();
    return Status(
        StatusCode::Unavailable,
        "cannot load the NCCL library '" + api.path + "' (" + (why ? why : "unknown error") +
            "): data-parallel cuda ranks reduce through NCCL; install it (libnccl2) or set "
            "DLC_NCCL_LIBRARY");
  }
#define DLC_NCCL_LOAD(name, type)                                                                  \
  if (!(api.name = reinterpret_cast<std::add_pointer_t<type>>(::dlsym(lib, #name))))               \
    return Status(StatusCode::Unavailable,                                                         \
                  "'" + api.path + "' lacks " #name " (not NCCL 2.12 or newer)");
  DLC_NCCL_REQUIRED(DLC_NCCL_LOAD)
#undef DLC_NCCL_LOAD
#define DLC_NCCL_LOAD_OPTIONAL(name, type)                                                         \
  api.name = reinterpret_cast<std::add_pointer_t<type>>(::dlsym(lib, #name));
  DLC_NCCL_OPTIONAL(DLC_NCCL_LOAD_OPTIONAL)
#undef DLC_NCCL_LOAD_OPTIONAL
  if (int r = api.ncclGetVersion(&api.version); r != kNcclSuccess)
    return Status(StatusCode::Unavailable,
                  "ncclGetVersion of '" + api.path + "' failed: " + api.error(r, nullptr));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

class NcclComm final : public Communicator {
public:
  NcclComm(const NcclApi &api, std::shared_ptr<Communicator> bootstrap, RankInfo me, double timeout)
      : api_(api), bootstrap_(std::move(bootstrap)), me_(me), timeout_(timeout) {}
  ~NcclComm() override;
  /// Creates the NCCL communicator of every rank from the unique id.
  Status init(const NcclUniqueId &id);

  int rank() const override { return me_.rank; }
  int size() const override { return me_.size; }
  int localRank() const override { return me_.localRank; }
  std::string describe() const override {
    return "NCCL " + api_.versionText() + ", rank " + std::to_string(me_.rank) + " of " +
           std::to_string(me_.size);
  }
  double timeoutSeconds() const override { return timeout_; }

  Status allReduce(void *data, size_t count, pkg::DType dt, ReduceOp op) override {
    if (!bootstrap_)
      return hostUnavailable();
    return bootstrap_->allReduce(data, count, dt, op);
  }
  Status broadcast(void *data, size_t bytes, int root) override {
    if (!bootstrap_)
      return hostUnavailable();
    return bootstrap_->broadcast(data, bytes, root);
  }
  Status barrier() override { return bootstrap_ ? bootstrap_->barrier() : hostUnavailable(); }
  Status reduceScatter(const void *send, void *recv, size_t count, pkg::DType dt,
                       ReduceOp op) override {
    return bootstrap_ ? bootstrap_->reduceScatter(send, recv, count, dt, op) : hostUnavailable();
  }
  Status allGather(const void *send, void *recv, size_t bytes) override {
    return bootstrap_ ? bootstrap_->allGather(send, recv, bytes) : hostUnavailable();
  }

  bool onDevice() const override { return true; }
  Status allReduceDevice(uint64_t ptr, size_t count, pkg::DType dt, ReduceOp op,
                         void *stream) override;
  Status broadcastDevice(uint64_t ptr, size_t bytes, int root, void *stream) override;
  Status reduceScatterDevice(uint64_t send, uint64_t recv, size_t count, pkg::DType dt, ReduceOp op,
                             void *stream) override;
  Status allGatherDevice(uint64_t send, uint64_t recv, size_t bytes, void *stream) override;
  Status asyncError() override;
  void abortCollectives() override;
  [[noreturn]] void abort(int code) override;

private:
  std::string prefix() const { return "rank " + std::to_string(me_.rank) + ": "; }
  Status hostUnavailable() const {
    return Status(StatusCode::Unavailable,
                  prefix() + "host collectives of the NCCL communicator go through MPI; "
                             "run the ranks under mpirun");
  }
  /// The result `r` of NCCL call `call`: waits (bounded) while it is in progress;
  /// an error or a timeout makes the communicator unusable.
  Status settle(int r, const char *call);
  Status usable() const {
    if (broken_)
      return Status(broken_.code(),
                    broken_.message() + "; the communicator cannot be used after that");
    return Status::ok();
  }

  const NcclApi &api_;
  std::shared_ptr<Communicator> bootstrap_;
  RankInfo me_;
  double timeout_;
  NcclCommHandle comm_ = nullptr;
  /// An NCCL communicator is not thread-safe.
  std::mutex mu_;
  Status broken_;
};

Status NcclComm::settle(int r, const char *call) {
  Deadline deadline(timeout_);
  while (r == kNcclInProgress) {
    if (deadline.passed())
      return broken_ = Status(StatusCode::Unavailable,
                              prefix() + call + " waited " + secondsText(timeout_) +
                                  " for the other ranks (did one of them die?)");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    int state = kNcclSuccess;
    if (int q = api_.ncclCommGetAsyncError(comm_, &state); q != kNcclSuccess)
      r = q;
    else
      r = state;
  }
  if (r != kNcclSuccess)
    return broken_ =
               Status(StatusCode::Internal, prefix() + call + " failed: " + api_.error(r, comm_));
  return Status::ok();
}

Status NcclComm::init(const NcclUniqueId &id) {
  if (api_.ncclCommInitRankConfig) {
    NcclConfig config;
    config.blocking = 0;
    return settle(api_.ncclCommInitRankConfig(&comm_, me_.size, id, me_.rank, &config),
                  "ncclCommInitRankConfig");
  }
  // NCCL before 2.14: a blocking initialization, bounded by NCCL's own timeouts only.
  return settle(api_.ncclCommInitRank(&comm_, me_.size, id, me_.rank), "ncclCommInitRank");
}

NcclComm::~NcclComm() {
  if (!comm_)
    return;
  // A clean finalize waits for the other ranks to finish their collectives; after an
  // error (or when it does not complete in time) abort instead.
  if (!broken_ && api_.ncclCommFinalize)
    (void)settle(api_.ncclCommFinalize(comm_), "ncclCommFinalize"); // sets broken_ if it fails
  if (broken_)
    api_.ncclCommAbort(comm_);
  else
    api_.ncclCommDestroy(comm_);
}

/// NCCL's type of a float dtype, or -1.
int ncclTypeOf(pkg::DType dt) {
  switch (dt) {
  case pkg::DType::F32:
    return kNcclFloat32;
  case pkg::DType::F64:
    return kNcclFloat64;
  case pkg::DType::F16:
    return kNcclFloat16;
  case pkg::DType::BF16:
    return kNcclBfloat16;
  default:
    return -1;
  }
}

Status NcclComm::allReduceDevice(uint64_t ptr, size_t count, pkg::DType dt, ReduceOp op,
                                 void *stream) {
  int type = ncclTypeOf(dt);
  if (type < 0)
    return Status(StatusCode::InvalidArgument, prefix() + "cannot all-reduce " +
                                                   pkg::dtypeName(dt) +
                                                   " (only f32, f64, f16 and bf16)");
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  void *p = reinterpret_cast<void *>(static_cast<uintptr_t>(ptr));
  return settle(api_.ncclAllReduce(p, p, count, type, op == ReduceOp::Avg ? kNcclAvg : kNcclSum,
                                   comm_, stream),
                "ncclAllReduce");
}

Status NcclComm::reduceScatterDevice(uint64_t send, uint64_t recv, size_t count, pkg::DType dt,
                                     ReduceOp op, void *stream) {
  int type = ncclTypeOf(dt);
  if (type < 0)
    return Status(StatusCode::InvalidArgument, prefix() + "cannot reduce-scatter " +
                                                   pkg::dtypeName(dt) +
                                                   " (only f32, f64, f16 and bf16)");
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  return settle(api_.ncclReduceScatter(reinterpret_cast<const void *>(static_cast<uintptr_t>(send)),
                                       reinterpret_cast<void *>(static_cast<uintptr_t>(recv)),
                                       count, type, op == ReduceOp::Avg ? kNcclAvg : kNcclSum,
                                       comm_, stream),
                "ncclReduceScatter");
}

Status NcclComm::allGatherDevice(uint64_t send, uint64_t recv, size_t bytes, void *stream) {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  return settle(api_.ncclAllGather(reinterpret_cast<const void *>(static_cast<uintptr_t>(send)),
                                   reinterpret_cast<void *>(static_cast<uintptr_t>(recv)), bytes,
                                   kNcclUint8, comm_, stream),
                "ncclAllGather");
}

Status NcclComm::broadcastDevice(uint64_t ptr, size_t bytes, int root, void *stream) {
  if (root < 0 || root >= me_.size)
    return Status(StatusCode::InvalidArgument, prefix() + "broadcast from rank " +
                                                   std::to_string(root) + " of " +
                                                   std::to_string(me_.size));
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  void *p = reinterpret_cast<void *>(static_cast<uintptr_t>(ptr));
  return settle(api_.ncclBroadcast(p, p, bytes, kNcclUint8, root, comm_, stream), "ncclBroadcast");
}

Status NcclComm::asyncError() {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  int state = kNcclSuccess;
  int r = api_.ncclCommGetAsyncError(comm_, &state);
  if (r == kNcclSuccess && (state == kNcclSuccess || state == kNcclInProgress))
    return Status::ok();
  int failure = r != kNcclSuccess ? r : state;
  return broken_ = Status(StatusCode::LaunchFailure,
                          prefix() + "NCCL reported an error: " + api_.error(failure, comm_));
}

void NcclComm::abortCollectives() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_)
    broken_ = Status(StatusCode::Unavailable, prefix() + "the collectives were aborted");
  if (comm_)
    api_.ncclCommAbort(comm_); // returns once NCCL's kernels have stopped
  comm_ = nullptr;
}

void NcclComm::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (bootstrap_)
    bootstrap_->abort(code); // MPI ends every rank
  if (comm_)
    api_.ncclCommAbort(comm_);
  ::_exit(code);
}

} // namespace

Result<std::shared_ptr<Communicator>>
createNcclCommunicator(const CommOptions &opts, std::shared_ptr<Communicator> bootstrap) {
  static std::mutex mu;
  static NcclApi api;
  static bool loaded = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!loaded) {
      DLC_RETURN_IF_ERROR(loadNccl(api));
      loaded = true;
    }
  }

  RankInfo me;
  if (bootstrap) {
    me = RankInfo{bootstrap->rank(), bootstrap->size(), bootstrap->localRank()};
  } else {
    Result<RankInfo> env = rankFromEnvironment();
    if (!env)
      return env.takeStatus();
    me = *env;
  }
  std::string spec = opts.rendezvous;
  if (spec.empty())
    if (const char *v = std::getenv("DLC_RENDEZVOUS"))
      spec = v;
  if (!bootstrap && me.size > 1 && spec.empty())
    return Status(StatusCode::InvalidArgument,
                  "NCCL ranks need a rendezvous: run under mpirun, or give "
                  "--rendezvous file:PATH or tcp:HOST:PORT");

  // The message: a byte saying whether rank 0 has an id, then the id.
  unsigned char message[1 + sizeof(NcclUniqueId)] = {};
  Status idError;
  if (me.rank == 0) {
    NcclUniqueId id;
    if (int r = api.ncclGetUniqueId(&id); r != kNcclSuccess) {
      idError = Status(StatusCode::Unavailable,
                       "rank 0: ncclGetUniqueId failed: " + api.error(r, nullptr));
    } else {
      message[0] = 1;
      std::memcpy(message + 1, &id, sizeof id);
    }
  }
  if (me.size > 1) {
    if (bootstrap)
      DLC_RETURN_IF_ERROR(bootstrap->broadcast(message, sizeof message, 0));
    else
      DLC_RETURN_IF_ERROR(
          rendezvousExchange(spec, me, message, sizeof message, opts.timeoutSeconds));
  }
  if (idError)
    return idError;
  if (!message[0])
    return Status(StatusCode::Unavailable,
                  "rank " + std::to_string(me.rank) +
                      ": rank 0 could not create NCCL's unique id (see its error)");
  NcclUniqueId id;
  std::memcpy(&id, message + 1, sizeof id);
  auto comm = std::make_shared<NcclComm>(api, std::move(bootstrap), me, opts.timeoutSeconds);
  DLC_RETURN_IF_ERROR(comm->init(id));
  return std::shared_ptr<Communicator>(std::move(comm));
}

} // namespace dlc::rt

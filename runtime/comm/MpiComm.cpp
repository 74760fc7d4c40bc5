//===- MpiComm.cpp - Host collectives through Open MPI, loaded at run time -===//
//
// libmpi.so.40 is opened with dlopen (RTLD_GLOBAL: Open MPI's own plugins resolve
// its symbols) so that the runtime links no MPI. Without mpi.h, the code speaks Open
// MPI's ABI (the same in versions 4 and 5): handles are pointers, the predefined ones
// (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are the addresses of exported objects,
// MPI_IN_PLACE is (void *)1 and MPI_STATUS_IGNORE a null pointer. Other MPIs (MPICH's
// integer handles) are refused by name.
//
// Every collective is nonblocking (MPI_Iallreduce, ...) and polled with MPI_Test
// until a deadline, so that a rank that died makes the others fail instead of hang.
// A collective that timed out stays pending inside MPI: the communicator refuses
// further work, and at destruction skips MPI_Finalize unless that collective
// completes within a short grace (MPI_Finalize would wait for the missing rank).
// Open MPI progresses only inside MPI calls, so once we stop calling it nothing
// writes the buffers of the abandoned collective.
//
// One communicator per process: MPI cannot be initialized twice, so a second
// createMpiCommunicator returns the live one (with the options it was created with);
// after the last reference is gone (MPI finalized) it is an error.
//===----------------------------------------------------------------------===//
#include "CommUtil.h"
#include "dlc/runtime/Collectives.h"
#include "dlc/support/Half.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <sched.h>
#include <type_traits>
#include <unistd.h>
#include <vector>

namespace dlc::rt {

namespace {

//===----------------------------------------------------------------------===//
// Open MPI's ABI
//===----------------------------------------------------------------------===//

using MpiHandle = void *; // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Errhandler
constexpr int kMpiSuccess = 0;
constexpr int kMpiThreadSerialized = 2; // MPI_THREAD_{SINGLE, FUNNELED, SERIALIZED, MULTIPLE}
constexpr int kMpiMaxString = 256;      // MPI_MAX_ERROR_STRING, MPI_MAX_LIBRARY_VERSION_STRING
void *const kMpiInPlace = reinterpret_cast<void *>(1);

#define DLC_MPI_FUNCTIONS(X)                                                                       \
  X(MPI_Initialized, int(int *))                                                                   \
  X(MPI_Finalized, int(int *))                                                                     \
  X(MPI_Init_thread, int(int *, char ***, int, int *))                                             \
  X(MPI_Query_thread, int(int *))                                                                  \
  X(MPI_Finalize, int())                                                                           \
  X(MPI_Abort, int(MpiHandle, int))                                                                \
  X(MPI_Comm_rank, int(MpiHandle, int *))                                                          \
  X(MPI_Comm_size, int(MpiHandle, int *))                                                          \
  X(MPI_Comm_set_errhandler, int(MpiHandle, MpiHandle))                                            \
  X(MPI_Iallreduce, int(const void *, void *, int, MpiHandle, MpiHandle, MpiHandle, MpiHandle *))  \
  X(MPI_Ibcast, int(void *, int, MpiHandle, int, MpiHandle, MpiHandle *))                          \
  X(MPI_Ibarrier, int(MpiHandle, MpiHandle *))                                                     \
  X(MPI_Ireduce_scatter_block,                                                                     \
    int(const void *, void *, int, MpiHandle, MpiHandle, MpiHandle, MpiHandle *))                  \
  X(MPI_Iallgather,                                                                                \
    int(const void *, int, MpiHandle, void *, int, MpiHandle, MpiHandle, MpiHandle *))             \
  X(MPI_Test, int(MpiHandle *, int *, void *))                                                     \
  X(MPI_Error_string, int(int, char *, int *))                                                     \
  X(MPI_Get_library_version, int(char *, int *))

#define DLC_MPI_OBJECTS(X)                                                                         \
  X(ompi_mpi_comm_world, world)                                                                    \
  X(ompi_mpi_float, floatType)                                                                     \
  X(ompi_mpi_double, doubleType)                                                                   \
  X(ompi_mpi_byte, byteType)                                                                       \
  X(ompi_mpi_op_sum, sumOp)                                                                        \
  X(ompi_mpi_errors_return, errorsReturn)

struct MpiApi {
  std::string path;
#define DLC_MPI_FIELD(name, type) std::add_pointer_t<type> name = nullptr;
  DLC_MPI_FUNCTIONS(DLC_MPI_FIELD)
#undef DLC_MPI_FIELD
#define DLC_MPI_OBJECT_FIELD(symbol, field) MpiHandle field = nullptr;
  DLC_MPI_OBJECTS(DLC_MPI_OBJECT_FIELD)
#undef DLC_MPI_OBJECT_FIELD
};

/// Opens the library and resolves everything, or says why not. The library stays
/// loaded for the life of the process (Open MPI does not support being unloaded).
Status loadMpi(MpiApi &api) {
  const char *env = std::getenv("DLC_MPI_LIBRARY");
  api.path = env && *env ? env : "libmpi.so.40";
  void *lib = ::dlopen(api.path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    const char *why = ::dlerror();
    return Status(
        StatusCode::Unavailable,
        "cannot load the MPI library '" + api.path + "' (" + (why ? why : "unknown error") +
            "): data-parallel emu ranks reduce through Open MPI; install it (apt-get install "
            "openmpi-bin) or set DLC_MPI_LIBRARY");
  }
#define DLC_MPI_LOAD_OBJECT(symbol, field)                                                         \
  if (!(api.field = ::dlsym(lib, #symbol)))                                                        \
    return Status(StatusCode::Unavailable,                                                         \
                  "'" + api.path + "' is not Open MPI (no symbol " #symbol ")");
  DLC_MPI_OBJECTS(DLC_MPI_LOAD_OBJECT)
#undef DLC_MPI_LOAD_OBJECT
#define DLC_MPI_LOAD(name, type)                                                                   \
  if (!(api.name = reinterpret_cast<std::add_pointer_t<type>>(::dlsym(lib, #name))))               \
    return Status(StatusCode::Unavailable,                                                         \
                  "'" + api.path + "' lacks " #name " (not an MPI 3 library)");
  DLC_MPI_FUNCTIONS(DLC_MPI_LOAD)
#undef DLC_MPI_LOAD
  return Status::ok();
}

/// "Open MPI v4.1.4" from "Open MPI v4.1.4, package: Debian OpenMPI, ident: ...".
std::string libraryName(const MpiApi &api) {
  char buf[kMpiMaxString + 1] = {};
  int len = 0;
  if (api.MPI_Get_library_version(buf, &len) != kMpiSuccess)
    return "Open MPI";
  std::string s(buf, static_cast<size_t>(std::clamp(len, 0, kMpiMaxString)));
  s = s.substr(0, s.find_first_of(",\n"));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0'))
    s.pop_back();
  return s.empty() ? "Open MPI" : s;
}

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

class MpiComm final : public Communicator {
public:
  MpiComm(const MpiApi &api, bool ownsMpi, double timeout)
      : api_(api), ownsMpi_(ownsMpi), timeout_(timeout) {}
  ~MpiComm() override;
  Status init();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return localRank_; }
  std::string describe() const override {
    return "MPI (" + library_ + "), rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }
  double timeoutSeconds() const override { return timeout_; }

  Status allReduce(void *data, size_t count, pkg::DType dt, ReduceOp op) override;
  Status broadcast(void *data, size_t bytes, int root) override;
  Status barrier() override;
  Status reduceScatter(const void *send, void *recv, size_t count, pkg::DType dt,
                       ReduceOp op) override;
  Status allGather(const void *send, void *recv, size_t bytes) override;
  [[noreturn]] void abort(int code) override;

private:
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": "; }
  /// An MPI error code as a Status naming the call.
  Status mpiError(int rc, const char *call) const;
  /// Polls `req` until it completes or the deadline (timeoutSeconds from now) passes;
  /// `what` names the collective in the timeout error ("an all-reduce").
  Status wait(MpiHandle req, const char *what);
  /// The error that made this communicator unusable, if any.
  Status usable() const;
  /// In-place sum of `count` elements of `type` (MPI_FLOAT or MPI_DOUBLE), in pieces
  /// that an int count can describe.
  Status sum(void *data, size_t count, size_t elemSize, MpiHandle type);
  template <class T> Status allReduceNative(T *data, size_t count, MpiHandle type, ReduceOp op);
  template <class Load, class Store>
  Status allReduceStaged(uint16_t *data, size_t count, ReduceOp op, Load load, Store store);

  const MpiApi &api_;
  bool ownsMpi_;
  double timeout_;
  int rank_ = 0, size_ = 1, localRank_ = 0;
  std::string library_;
  /// MPI_THREAD_SERIALIZED: one MPI call at a time, whichever thread makes it.
  std::mutex mu_;
  /// A collective that timed out (still pending inside MPI) and the error it gave.
  MpiHandle abandoned_ = nullptr;
  Status broken_;
  /// F16 and BF16 are reduced in float (MPI has no 16-bit float types).
  std::vector<float> staging_;
};

Status MpiComm::init() {
  // Errors as values rather than the end of the process; an application that
  // initialized MPI itself keeps its own error handler.
  int rc = kMpiSuccess;
  if (ownsMpi_ && (rc = api_.MPI_Comm_set_errhandler(api_.world, api_.errorsReturn)) != kMpiSuccess)
    return mpiError(rc, "MPI_Comm_set_errhandler");
  if ((rc = api_.MPI_Comm_rank(api_.world, &rank_)) != kMpiSuccess)
    return mpiError(rc, "MPI_Comm_rank");
  if ((rc = api_.MPI_Comm_size(api_.world, &size_)) != kMpiSuccess)
    return mpiError(rc, "MPI_Comm_size");
  if (const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
    localRank_ = std::max(0, std::atoi(local));
  library_ = libraryName(api_);
  return Status::ok();
}

MpiComm::~MpiComm() {
  if (!ownsMpi_)
    return;
  if (abandoned_) {
    // A late rank may still turn up; give it a moment so that the job ends cleanly.
    Deadline grace(std::min(timeout_, 2.0));
    int done = 0;
    while (!done && !grace.passed() && api_.MPI_Test(&abandoned_, &done, nullptr) == kMpiSuccess)
      ::usleep(100);
    if (!done)
      return; // MPI_Finalize would wait for the missing rank
  }
  int finalized = 0;
  api_.MPI_Finalized(&finalized);
  if (!finalized)
    api_.MPI_Finalize();
}

Status MpiComm::mpiError(int rc, const char *call) const {
  char buf[kMpiMaxString + 1] = {};
  int len = 0;
  std::string msg = api_.MPI_Error_string(rc, buf, &len) == kMpiSuccess
                        ? std::string(buf, static_cast<size_t>(std::clamp(len, 0, kMpiMaxString)))
                        : "MPI error " + std::to_string(rc);
  return Status(StatusCode::Internal, prefix() + call + " failed: " + msg);
}

Status MpiComm::usable() const {
  if (broken_)
    return Status(broken_.code(),
                  broken_.message() + "; the communicator cannot be used after that");
  return Status::ok();
}

Status MpiComm::wait(MpiHandle req, const char *what) {
  Deadline deadline(timeout_);
  for (int polls = 0;; ++polls) {
    int done = 0;
    if (int rc = api_.MPI_Test(&req, &done, nullptr); rc != kMpiSuccess)
      return broken_ = mpiError(rc, "MPI_Test");
    if (done)
      return Status::ok();
    // Spin briefly (a collective of ranks that are all present completes in
    // microseconds), then give the core to the others: ranks may outnumber cores.
    if (polls < 1000) {
      if (polls % 64 == 63)
        ::sched_yield();
      continue;
    }
    if (deadline.passed()) {
      abandoned_ = req;
      return broken_ = Status(StatusCode::Unavailable,
                              prefix() + what + " waited " + secondsText(timeout_) +
                                  " for the other ranks (did one of them die?)");
    }
    ::usleep(50);
  }
}

Status MpiComm::sum(void *data, size_t count, size_t elemSize, MpiHandle type) {
  constexpr size_t kMaxCount = 1u << 30; // an int count, with room to spare
  char *p = static_cast<char *>(data);
  for (size_t done = 0; done < count;) {
    size_t n = std::min(count - done, kMaxCount);
    MpiHandle req = nullptr;
    int rc = api_.MPI_Iallreduce(kMpiInPlace, p + done * elemSize, static_cast<int>(n), type,
                                 api_.sumOp, api_.world, &req);
    if (rc != kMpiSuccess)
      return mpiError(rc, "MPI_Iallreduce");
    DLC_RETURN_IF_ERROR(wait(req, "an all-reduce"));
    done += n;
  }
  return Status::ok();
}

template <class T>
Status MpiComm::allReduceNative(T *data, size_t count, MpiHandle type, ReduceOp op) {
  DLC_RETURN_IF_ERROR(sum(data, count, sizeof(T), type));
  if (op == ReduceOp::Avg)
    for (size_t i = 0; i < count; ++i)
      data[i] /= static_cast<T>(size_);
  return Status::ok();
}

template <class Load, class Store>
Status MpiComm::allReduceStaged(uint16_t *data, size_t count, ReduceOp op, Load load, Store store) {
  constexpr size_t kStage = 1u << 22; // 16 MiB of floats at a time
  staging_.resize(std::min(count, kStage));
  float *f = staging_.data();
  for (size_t done = 0; done < count;) {
    size_t n = std::min(count - done, kStage);
    for (size_t i = 0; i < n; ++i)
      f[i] = load(data[done + i]);
    DLC_RETURN_IF_ERROR(sum(f, n, sizeof(float), api_.floatType));
    float scale = op == ReduceOp::Avg ? static_cast<float>(size_) : 1.0f;
    for (size_t i = 0; i < n; ++i)
      data[done + i] = store(f[i] / scale);
    done += n;
  }
  return Status::ok();
}

Status MpiComm::allReduce(void *data, size_t count, pkg::DType dt, ReduceOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  auto *half = static_cast<uint16_t *>(data);
  switch (dt) {
  case pkg::DType::F32:
    return allReduceNative(static_cast<float *>(data), count, api_.floatType, op);
  case pkg::DType::F64:
    return allReduceNative(static_cast<double *>(data), count, api_.doubleType, op);
  case pkg::DType::F16:
    return allReduceStaged(half, count, op, halfToFloat, floatToHalf);
  case pkg::DType::BF16:
    return allReduceStaged(half, count, op, bf16ToFloat, floatToBF16);
  default:
    return Status(StatusCode::InvalidArgument, prefix() + "cannot all-reduce " +
                                                   pkg::dtypeName(dt) +
                                                   " (only f32, f64, f16 and bf16)");
  }
}

Status MpiComm::broadcast(void *data, size_t bytes, int root) {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  if (root < 0 || root >= size_)
    return Status(StatusCode::InvalidArgument, prefix() + "broadcast from rank " +
                                                   std::to_string(root) + " of " +
                                                   std::to_string(size_));
  constexpr size_t kMaxBytes = 1u << 30;
  char *p = static_cast<char *>(data);
  for (size_t done = 0; done < bytes;) {
    size_t n = std::min(bytes - done, kMaxBytes);
    MpiHandle req = nullptr;
    int rc = api_.MPI_Ibcast(p + done, static_cast<int>(n), api_.byteType, root, api_.world, &req);
    if (rc != kMpiSuccess)
      return mpiError(rc, "MPI_Ibcast");
    DLC_RETURN_IF_ERROR(wait(req, "a broadcast"));
    done += n;
  }
  return Status::ok();
}

Status MpiComm::barrier() {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  MpiHandle req = nullptr;
  if (int rc = api_.MPI_Ibarrier(api_.world, &req); rc != kMpiSuccess)
    return mpiError(rc, "MPI_Ibarrier");
  return wait(req, "a barrier");
}

Status MpiComm::reduceScatter(const void *send, void *recv, size_t count, pkg::DType dt,
                              ReduceOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  if (count > (1u << 30) / static_cast<size_t>(size_))
    return Status(StatusCode::InvalidArgument,
                  prefix() + "a reduce-scatter of " + std::to_string(count) +
                      " elements per rank is more than one MPI call takes");
  size_t total = count * static_cast<size_t>(size_);
  auto scatter = [&](const void *in, void *out, MpiHandle type) -> Status {
    MpiHandle req = nullptr;
    int rc = api_.MPI_Ireduce_scatter_block(in, out, static_cast<int>(count), type, api_.sumOp,
                                            api_.world, &req);
    if (rc != kMpiSuccess)
      return mpiError(rc, "MPI_Ireduce_scatter_block");
    return wait(req, "a reduce-scatter");
  };
  auto average = [&](auto *p) {
    if (op == ReduceOp::Avg)
      for (size_t i = 0; i < count; ++i)
        p[i] /= static_cast<std::remove_pointer_t<decltype(p)>>(size_);
  };
  switch (dt) {
  case pkg::DType::F32:
    DLC_RETURN_IF_ERROR(scatter(send, recv, api_.floatType));
    average(static_cast<float *>(recv));
    return Status::ok();
  case pkg::DType::F64:
    DLC_RETURN_IF_ERROR(scatter(send, recv, api_.doubleType));
    average(static_cast<double *>(recv));
    return Status::ok();
  case pkg::DType::F16:
  case pkg::DType::BF16: {
    // In float, as the all-reduce does.
    bool f16 = dt == pkg::DType::F16;
    const auto *in = static_cast<const uint16_t *>(send);
    std::vector<float> wide(total), mine(count);
    for (size_t i = 0; i < total; ++i)
      wide[i] = f16 ? halfToFloat(in[i]) : bf16ToFloat(in[i]);
    DLC_RETURN_IF_ERROR(scatter(wide.data(), mine.data(), api_.floatType));
    average(mine.data());
    auto *out = static_cast<uint16_t *>(recv);
    for (size_t i = 0; i < count; ++i)
      out[i] = f16 ? floatToHalf(mine[i]) : floatToBF16(mine[i]);
    return Status::ok();
  }
  default:
    return Status(StatusCode::InvalidArgument, prefix() + "cannot reduce-scatter " +
                                                   pkg::dtypeName(dt) +
                                                   " (only f32, f64, f16 and bf16)");
  }
}

Status MpiComm::allGather(const void *send, void *recv, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  DLC_RETURN_IF_ERROR(usable());
  if (bytes > (1u << 30) / static_cast<size_t>(size_))
    return Status(StatusCode::InvalidArgument,
                  prefix() + "an all-gather of " + std::to_string(bytes) +
                      " bytes per rank is more than one MPI call takes");
  MpiHandle req = nullptr;
  int n = static_cast<int>(bytes);
  int rc = api_.MPI_Iallgather(send, n, api_.byteType, recv, n, api_.byteType, api_.world, &req);
  if (rc != kMpiSuccess)
    return mpiError(rc, "MPI_Iallgather");
  return wait(req, "an all-gather");
}

void MpiComm::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  api_.MPI_Initialized(&initialized);
  api_.MPI_Finalized(&finalized);
  if (initialized && !finalized)
    api_.MPI_Abort(api_.world, code); // ends every rank; does not return
  ::_exit(code);
}

} // namespace

Result<std::shared_ptr<Communicator>> createMpiCommunicator(const CommOptions &opts) {
  static std::mutex mu;
  static MpiApi api;
  static bool loaded = false;
  static std::weak_ptr<Communicator> live;
  std::lock_guard<std::mutex> lock(mu);
  if (std::shared_ptr<Communicator> c = live.lock())
    return c;
  if (!loaded) {
    DLC_RETURN_IF_ERROR(loadMpi(api));
    loaded = true;
  }

  int initialized = 0, finalized = 0;
  api.MPI_Initialized(&initialized);
  api.MPI_Finalized(&finalized);
  if (finalized)
    return Status(StatusCode::Unavailable,
                  "MPI was finalized in this process and cannot be initialized again "
                  "(keep the first MPI communicator alive)");
  int provided = 0;
  if (!initialized) {
    // Open MPI's default error handler ends the process if this fails, after saying why.
    if (api.MPI_Init_thread(nullptr, nullptr, kMpiThreadSerialized, &provided) != kMpiSuccess)
      return Status(StatusCode::Unavailable, "MPI_Init_thread of '" + api.path + "' failed");
  } else if (api.MPI_Query_thread(&provided) != kMpiSuccess) {
    return Status(StatusCode::Internal, "MPI_Query_thread of '" + api.path + "' failed");
  }
  auto comm = std::make_shared<MpiComm>(api, !initialized, opts.timeoutSeconds);
  if (provided < kMpiThreadSerialized)
    return Status(
        StatusCode::Unavailable,
        "'" + api.path + "' provides MPI thread level " + std::to_string(provided) +
            "; the emu backend reduces on a thread of its own and needs MPI_THREAD_SERIALIZED (2)");
  DLC_RETURN_IF_ERROR(comm->init());
  live = comm;
  return std::shared_ptr<Communicator>(std::move(comm));
}

} // namespace dlc::rt

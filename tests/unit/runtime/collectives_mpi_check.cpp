// A standalone check of the collectives (include/dlc/runtime/Collectives.h) against
// the real Open MPI, which gtest cannot drive (the ranks are processes). Modes:
//
//   mpirun -np 3 collectives_mpi_check       all-reduce (f32, f64, f16, bf16; sum and
//                                            average), broadcast, barrier, errors
//   mpirun -np 2 collectives_mpi_check --timeout-check
//                                            rank 1 comes late: rank 0's all-reduce
//                                            fails after its 1 s bound, then both end
//   mpirun -np 2 collectives_mpi_check --abort-check
//                                            rank 1 aborts: mpirun ends rank 0 (which
//                                            waits in an all-reduce) with code 3
//   collectives_mpi_check --rendezvous [SPEC]
//                                            forks 3 ranks (DLC_RANK, DLC_WORLD_SIZE)
//                                            that exchange 128 bytes through SPEC, or
//                                            through a file and a free TCP port
//   collectives_mpi_check --errors           the errors that need no other rank
//
// Prints "... ok" and exits 0, or prints what differs and exits 1. The default mode
// also checks ZeRO-1's reduce-scatter and all-gather.
#include "dlc/runtime/Collectives.h"
#include "dlc/support/Half.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace dlc;
using namespace dlc::rt;

namespace {

int failures = 0;
int myRank = -1;

void fail(const std::string &what) {
  std::fprintf(stderr, "rank %d: FAIL: %s\n", myRank, what.c_str());
  ++failures;
}

void expectOk(const Status &s, const std::string &what) {
  if (s)
    fail(what + ": " + s.message());
}

void expectError(const Status &s, StatusCode code, const std::string &needle,
                 const std::string &what) {
  if (!s)
    return fail(what + ": expected an error containing '" + needle + "', got ok");
  if (s.code() != code || s.message().find(needle) == std::string::npos)
    return fail(what + ": expected code " + std::to_string(static_cast<int>(code)) + " and '" +
                needle + "', got code " + std::to_string(static_cast<int>(s.code())) + ": " +
                s.message());
}

template <class T>
void expectEqual(const std::vector<T> &got, const std::vector<T> &want, const std::string &what) {
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return fail(what + ": element " + std::to_string(i) + " is " +
                  std::to_string(static_cast<double>(got[i])) + ", expected " +
                  std::to_string(static_cast<double>(want[i])));
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

//===----------------------------------------------------------------------===//
// Under mpirun
//===----------------------------------------------------------------------===//

void checkF32(Communicator &c, ReduceOp op, size_t count) {
  int n = c.size(), r = c.rank();
  std::vector<float> x(count), want(count);
  for (size_t i = 0; i < count; ++i) {
    auto v = [&](int rank) {
      return static_cast<float>(rank * 1000 + static_cast<int>(i % 997) - 300);
    };
    x[i] = v(r);
    float sum = 0; // integers: exact in any order
    for (int k = 0; k < n; ++k)
      sum += v(k);
    want[i] = op == ReduceOp::Avg ? sum / static_cast<float>(n) : sum;
  }
  std::string what = std::string("f32 ") + (op == ReduceOp::Avg ? "average" : "sum") + " of " +
                     std::to_string(count);
  expectOk(c.allReduce(x.data(), count, pkg::DType::F32, op), what);
  expectEqual(x, want, what);
}

/// ZeRO-1's collectives: each rank's share of the sum or mean of every rank's vector
/// (f32, and f16 through float), and every rank's bytes in rank order.
void checkShards(Communicator &c, ReduceOp op, size_t count) {
  int n = c.size(), r = c.rank();
  auto v = [&](int rank, size_t i) {
    return static_cast<float>(rank * 100 + static_cast<int>(i % 251));
  };
  std::vector<float> x(count * n), mine(count), want(count);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = v(r, i);
  for (size_t j = 0; j < count; ++j) {
    float sum = 0; // integers: exact in any order
    for (int k = 0; k < n; ++k)
      sum += v(k, r * count + j);
    want[j] = op == ReduceOp::Avg ? sum / static_cast<float>(n) : sum;
  }
  std::string what = std::string("f32 reduce-scatter ") + (op == ReduceOp::Avg ? "average" : "sum");
  expectOk(c.reduceScatter(x.data(), mine.data(), count, pkg::DType::F32, op), what);
  expectEqual(mine, want, what);
  std::vector<uint16_t> hx(x.size()), hmine(count);
  for (size_t i = 0; i < x.size(); ++i)
    hx[i] = floatToHalf(x[i]);
  what = "f16 reduce-scatter";
  expectOk(c.reduceScatter(hx.data(), hmine.data(), count, pkg::DType::F16, op), what);
  std::vector<float> back(count);
  for (size_t j = 0; j < count; ++j)
    back[j] = halfToFloat(hmine[j]);
  std::vector<float> rounded(count);
  for (size_t j = 0; j < count; ++j)
    rounded[j] = halfToFloat(floatToHalf(want[j]));
  expectEqual(back, rounded, what);
  std::vector<uint8_t> bytes(count), all(count * n), wantAll(count * n);
  for (size_t i = 0; i < count; ++i)
    bytes[i] = static_cast<uint8_t>(r * 7 + i);
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < count; ++i)
      wantAll[k * count + i] = static_cast<uint8_t>(k * 7 + i);
  expectOk(c.allGather(bytes.data(), all.data(), count), "all-gather");
  if (all != wantAll)
    fail("all-gather: the bytes differ");
}

void checkF64(Communicator &c, ReduceOp op) {
  int n = c.size(), r = c.rank();
  size_t count = 777;
  std::vector<double> x(count), want(count);
  for (size_t i = 0; i < count; ++i) {
    auto v = [&](int rank) {
      return (rank + 1) * 0.5 + static_cast<double>(i) * 0.25;
    }; // dyadic: exact sums
    x[i] = v(r);
    double sum = 0;
    for (int k = 0; k < n; ++k)
      sum += v(k);
    want[i] = op == ReduceOp::Avg ? sum / n : sum;
  }
  std::string what = std::string("f64 ") + (op == ReduceOp::Avg ? "average" : "sum");
  expectOk(c.allReduce(x.data(), count, pkg::DType::F64, op), what);
  expectEqual(x, want, what);
}

/// F16 or BF16: the ranks' values are exact in the 16-bit type, their float sum is
/// exact, and the result is that sum (or average) rounded once to the 16-bit type.
void checkHalf(Communicator &c, pkg::DType dt, ReduceOp op, size_t count) {
  bool bf = dt == pkg::DType::BF16;
  auto toFloat = bf ? bf16ToFloat : halfToFloat;
  auto fromFloat = bf ? floatToBF16 : floatToHalf;
  int n = c.size(), r = c.rank();
  std::vector<uint16_t> x(count), want(count);
  for (size_t i = 0; i < count; ++i) {
    auto v = [&](int rank) {
      return toFloat(fromFloat(rank * 0.75f + static_cast<float>(i % 61) * 0.125f - 3));
    };
    x[i] = fromFloat(v(r));
    float sum = 0;
    for (int k = 0; k < n; ++k)
      sum += v(k);
    want[i] = fromFloat(op == ReduceOp::Avg ? sum / static_cast<float>(n) : sum);
  }
  std::string what = std::string(bf ? "bf16 " : "f16 ") +
                     (op == ReduceOp::Avg ? "average" : "sum") + " of " + std::to_string(count);
  expectOk(c.allReduce(x.data(), count, dt, op), what);
  expectEqual(x, want, what);
}

void checkBroadcast(Communicator &c, int root, size_t bytes) {
  std::vector<unsigned char> buf(bytes), want(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    want[i] = static_cast<unsigned char>((i * 7 + static_cast<size_t>(root) * 13) & 0xff);
    buf[i] = c.rank() == root ? want[i] : 0xee;
  }
  std::string what =
      "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
  expectOk(c.broadcast(buf.data(), bytes, root), what);
  if (buf != want)
    fail(what + ": the bytes differ");
}

/// The MPI communicator, or null after saying why there is none.
std::shared_ptr<Communicator> mpiOrNull(double timeoutSeconds) {
  CommOptions opts;
  opts.timeoutSeconds = timeoutSeconds;
  Result<std::shared_ptr<Communicator>> made = createMpiCommunicator(opts);
  if (!made) {
    std::fprintf(stderr, "FAIL: createMpiCommunicator: %s\n", made.status().message().c_str());
    return nullptr;
  }
  return *made;
}

int runCollectives() {
  std::shared_ptr<Communicator> made = mpiOrNull(60);
  if (!made)
    return 1;
  Communicator &c = *made;
  myRank = c.rank();
  Result<RankInfo> env = rankFromEnvironment();
  if (!env)
    fail("rankFromEnvironment: " + env.status().message());
  else if (env->rank != c.rank() || env->size != c.size() || env->localRank != c.localRank())
    fail("rankFromEnvironment disagrees with MPI");
  if (!launchedByMpi())
    fail("launchedByMpi() is false under mpirun");
  const char *envSize = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!envSize || std::atoi(envSize) != c.size() || c.rank() < 0 || c.rank() >= c.size())
    fail("rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) +
         " disagrees with mpirun");
  if (c.describe().find("MPI (Open MPI v") != 0 ||
      c.describe().find("rank " + std::to_string(c.rank()) + " of ") == std::string::npos)
    fail("describe() is '" + c.describe() + "'");
  Result<std::shared_ptr<Communicator>> again = createMpiCommunicator(CommOptions{});
  if (!again || again->get() != &c)
    fail("a second createMpiCommunicator does not return the first communicator");

  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
    checkF32(c, op, 1);
    checkF32(c, op, 100003);
    checkF64(c, op);
    checkHalf(c, pkg::DType::F16, op, 1000);
    checkHalf(c, pkg::DType::BF16, op, 1000);
    checkShards(c, op, 433);
  }
  checkHalf(c, pkg::DType::F16, ReduceOp::Sum, (size_t(1) << 22) + 5); // two staging pieces
  expectOk(c.allReduce(nullptr, 0, pkg::DType::F32, ReduceOp::Sum), "an empty all-reduce");
  for (int root = 0; root < std::min(2, c.size()); ++root) {
    checkBroadcast(c, root, 1);
    checkBroadcast(c, root, 1 << 20);
  }
  expectOk(c.barrier(), "barrier");
  int32_t ints[4] = {};
  expectError(c.allReduce(ints, 4, pkg::DType::I32, ReduceOp::Sum), StatusCode::InvalidArgument,
              "i32", "all-reduce of i32");
  expectError(c.broadcast(ints, 4, c.size()), StatusCode::InvalidArgument, "broadcast from rank",
              "broadcast from a rank out of range");
  // Still in step after the errors (they were local).
  checkF32(c, ReduceOp::Sum, 10);
  expectOk(c.barrier(), "barrier");
  if (failures)
    return 1;
  std::printf("collectives ok: rank %d of %d (%s)\n", c.rank(), c.size(), c.describe().c_str());
  return 0;
}

int runTimeoutCheck() {
  const char *rankText = std::getenv("OMPI_COMM_WORLD_RANK");
  bool late = rankText && std::atoi(rankText) == 1;
  std::shared_ptr<Communicator> made = mpiOrNull(late ? 30 : 1);
  if (!made)
    return 1;
  Communicator &c = *made;
  myRank = c.rank();
  if (c.size() != 2) {
    std::fprintf(stderr, "FAIL: --timeout-check needs mpirun -np 2\n");
    return 1;
  }
  float x[4] = {1, 2, 3, 4};
  if (late) {
    // Rank 0 gives up after 1 s, then waits 2 s before it ends (its communicator
    // gives a late rank a short grace to complete the abandoned all-reduce).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    expectOk(c.allReduce(x, 4, pkg::DType::F32, ReduceOp::Sum), "the late all-reduce");
  } else {
    auto t0 = std::chrono::steady_clock::now();
    Status s = c.allReduce(x, 4, pkg::DType::F32, ReduceOp::Sum);
    double took = secondsSince(t0);
    expectError(s, StatusCode::Unavailable, "rank 0: an all-reduce waited 1 s for the other ranks",
                "the all-reduce without rank 1");
    std::printf("rank 0: the all-reduce failed after %.2f s: %s\n", took, s.message().c_str());
    if (took < 0.9 || took > 2.0)
      fail("the all-reduce failed after " + std::to_string(took) + " s, expected about 1 s");
    expectError(c.barrier(), StatusCode::Unavailable, "cannot be used",
                "a barrier after the timeout");
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  if (failures)
    return 1;
  std::printf("timeout ok: rank %d\n", c.rank());
  return 0;
}

int runAbortCheck() {
  std::shared_ptr<Communicator> made = mpiOrNull(60);
  if (!made)
    return 1;
  Communicator &c = *made;
  if (c.rank() == 1) {
    std::fprintf(stderr, "rank 1: aborting with code 3\n");
    c.abort(3);
  }
  float x = 1;
  Status s = c.allReduce(&x, 1, pkg::DType::F32, ReduceOp::Sum);
  std::fprintf(stderr, "FAIL: rank %d was not ended by rank 1's abort (%s)\n", c.rank(),
               s ? s.message().c_str() : "the all-reduce completed");
  return 1;
}

//===----------------------------------------------------------------------===//
// Without mpirun
//===----------------------------------------------------------------------===//

/// Runs `spec` with `n` forked ranks; true if every rank got rank 0's bytes.
bool forkRendezvous(const std::string &spec, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      return false;
    }
    if (pid == 0) {
      ::setenv("DLC_RANK", std::to_string(r).c_str(), 1);
      ::setenv("DLC_WORLD_SIZE", std::to_string(n).c_str(), 1);
      myRank = r;
      Result<RankInfo> me = rankFromEnvironment();
      if (!me || me->rank != r || me->size != n) {
        fail("rankFromEnvironment: " + (me ? std::string("wrong rank") : me.status().message()));
        ::_exit(1);
      }
      if (r > 0) // the others may start first: they wait for rank 0
        std::this_thread::sleep_for(std::chrono::milliseconds(50 * (n - r)));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
      unsigned char bytes[128], want[128];
      for (int i = 0; i < 128; ++i) {
        want[i] = static_cast<unsigned char>(i * 31 + 7);
        bytes[i] = r == 0 ? want[i] : 0;
      }
      Status s = rendezvousExchange(spec, *me, bytes, sizeof bytes, 20);
      expectOk(s, "rendezvous " + spec);
      if (!s && std::memcmp(bytes, want, sizeof bytes) != 0)
        fail("rendezvous " + spec + ": the bytes differ");
      ::_exit(failures ? 1 : 0);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) != 0)
    return -1;
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string tempPath(const char *name) {
  return "/tmp/dlc_collectives_" + std::to_string(::getpid()) + "_" + name;
}

int runRendezvous(const char *spec) {
  ::setenv("DLC_RENDEZVOUS_SECRET", "a-test-secret-of-this-job", 0);
  std::vector<std::string> specs;
  if (spec)
    specs.push_back(spec);
  else
    specs = {"file:" + tempPath("rdv"), "tcp:127.0.0.1:" + std::to_string(freePort()),
             "tcp:localhost:" + std::to_string(freePort())};
  for (const std::string &s : specs) {
    if (!forkRendezvous(s, 3))
      fail("the rendezvous " + s + " failed");
    else
      std::printf("rendezvous ok: %s, 3 ranks\n", s.c_str());
    if (s.compare(0, 5, "file:") == 0 && ::access(s.substr(5).c_str(), F_OK) == 0)
      fail("rank 0 left " + s.substr(5) + " behind");
  }
  return failures ? 1 : 0;
}

/// Connects to 127.0.0.1:port, sends `hello`, and returns how many answer bytes came
/// back before rank 0 closed the connection (-1: no connection).
int probeRankZero(int port, const std::vector<uint8_t> &hello) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)!::write(fd, hello.data(), hello.size());
    char buf[256];
    int total = 0;
    for (ssize_t r; (r = ::read(fd, buf, sizeof buf)) > 0;)
      total += static_cast<int>(r);
    ::close(fd);
    return total;
  }
  return -1;
}

/// Clients without the job's secret get nothing from rank 0: a hello from an old
/// client (magic and rank only), one with a forged MAC, and a rank with another secret
/// are all dropped, and rank 0 keeps waiting for its real ranks.
bool runUntrustedClients() {
  int port = freePort();
  std::string spec = "tcp:127.0.0.1:" + std::to_string(port);
  pid_t zero = ::fork();
  if (zero == 0) {
    unsigned char id[16];
    std::memset(id, 0x5a, sizeof id);
    Status s = rendezvousExchange(spec, RankInfo{0, 2, 0}, id, sizeof id, 5);
    ::_exit(s ? 0 : 1); // the real rank never came: rank 0 must time out
  }
  std::vector<uint8_t> old{'D', 'L', 'C', 'R', 1, 0, 0, 0};
  std::vector<uint8_t> forged = old;
  forged.resize(8 + 16 + 32, 0xab);
  int a = probeRankZero(port, old), b = probeRankZero(port, forged);
  if (a != 0 || b != 0)
    fail("rank 0 answered a client without the secret (" + std::to_string(a) + " and " +
         std::to_string(b) + " bytes)");
  ::setenv("DLC_RENDEZVOUS_SECRET", "another-job-with-another-secret", 1);
  unsigned char got[16] = {};
  expectError(rendezvousExchange(spec, RankInfo{1, 2, 0}, got, sizeof got, 1),
              StatusCode::Unavailable,
              "(rank 0 refused this rank: is DLC_RENDEZVOUS_SECRET the same on every rank",
              "a rank with another secret");
  ::setenv("DLC_RENDEZVOUS_SECRET", "the-secret-of-the-errors-job", 1);
  for (unsigned char c : got)
    if (c)
      fail("a rank with another secret received bytes");
  int status = 0;
  ::waitpid(zero, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("rank 0 did not time out waiting for its real rank 1");
  if (!failures)
    std::printf("untrusted clients refused\n");
  return failures == 0;
}

int runErrors() {
  myRank = 0;
  CommOptions opts;
  ::setenv("DLC_MPI_LIBRARY", "/nonexistent/libmpi.so", 1);
  Result<std::shared_ptr<Communicator>> mpi = createMpiCommunicator(opts);
  expectError(mpi.status(), StatusCode::Unavailable,
              "cannot load the MPI library '/nonexistent/libmpi.so' (", "a missing MPI library");
  std::printf("missing library: %s\n", mpi.status().message().c_str());
  ::setenv("DLC_MPI_LIBRARY", "libc.so.6", 1);
  mpi = createMpiCommunicator(opts);
  expectError(mpi.status(), StatusCode::Unavailable,
              "'libc.so.6' is not Open MPI (no symbol ompi_mpi_comm_world)",
              "a library that is not Open MPI");
  ::unsetenv("DLC_MPI_LIBRARY");

  ::setenv("DLC_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  Result<std::shared_ptr<Communicator>> nccl = createNcclCommunicator(opts, nullptr);
  expectError(nccl.status(), StatusCode::Unavailable,
              "cannot load the NCCL library '/nonexistent/libnccl.so.2'", "a missing NCCL library");
  ::unsetenv("DLC_NCCL_LIBRARY");

  struct EnvCase {
    const char *rank, *size, *needle;
  };
  for (EnvCase e :
       {EnvCase{"3", "3", "DLC_RANK=3 is out of range for DLC_WORLD_SIZE=3 (0 to 2)"},
        EnvCase{"x1", "3", "DLC_RANK='x1' is not an integer"},
        EnvCase{"-1", "2", "DLC_RANK=-1 is out of range"},
        EnvCase{"0", "0", "DLC_WORLD_SIZE=0 is not a world size"},
        EnvCase{"1", nullptr, "DLC_RANK or DLC_LOCAL_RANK is set without DLC_WORLD_SIZE"},
        EnvCase{nullptr, "2", "DLC_WORLD_SIZE=2 is set without DLC_RANK"}}) {
    e.rank ? ::setenv("DLC_RANK", e.rank, 1) : ::unsetenv("DLC_RANK");
    e.size ? ::setenv("DLC_WORLD_SIZE", e.size, 1) : ::unsetenv("DLC_WORLD_SIZE");
    Result<RankInfo> info = rankFromEnvironment();
    expectError(info.status(), StatusCode::InvalidArgument, e.needle,
                "the environment case '" + std::string(e.needle) + "'");
  }
  ::setenv("DLC_RANK", "2", 1);
  ::setenv("DLC_WORLD_SIZE", "4", 1);
  ::setenv("DLC_LOCAL_RANK", "1", 1);
  Result<RankInfo> info = rankFromEnvironment();
  if (!info || info->rank != 2 || info->size != 4 || info->localRank != 1)
    fail("DLC_RANK=2 DLC_WORLD_SIZE=4 DLC_LOCAL_RANK=1 was not read back");
  for (const char *v : {"DLC_RANK", "DLC_WORLD_SIZE", "DLC_LOCAL_RANK"})
    ::unsetenv(v);
  info = rankFromEnvironment();
  if (!info || info->rank != 0 || info->size != 1 || info->localRank != 0)
    fail("an empty environment is not rank 0 of 1");

  // Without rank 0, or with a bad spec.
  unsigned char bytes[16] = {};
  RankInfo one{1, 3, 0};
  for (const char *bad : {"", "file:", "tcp:host", "tcp::80", "tcp:host:0", "tcp:host:99999",
                          "tcp:host:8x", "nfs:/x"})
    expectError(rendezvousExchange(bad, one, bytes, 16, 1), StatusCode::InvalidArgument,
                "--rendezvous must be file:PATH or tcp:HOST:PORT, got '" + std::string(bad) + "'",
                std::string("the spec '") + bad + "'");
  std::string path = tempPath("absent");
  auto t0 = std::chrono::steady_clock::now();
  expectError(rendezvousExchange("file:" + path, one, bytes, 16, 0.3), StatusCode::Unavailable,
              "rank 1: no rendezvous at file:" + path + " after 0.3 s (did rank 0 start?)",
              "a file without rank 0");
  std::string tcp = "tcp:127.0.0.1:" + std::to_string(freePort());
  ::unsetenv("DLC_RENDEZVOUS_SECRET");
  expectError(rendezvousExchange(tcp, one, bytes, 16, 0.3), StatusCode::InvalidArgument,
              "rank 1: the rendezvous " + tcp + " needs DLC_RENDEZVOUS_SECRET",
              "a tcp rendezvous without a secret");
  ::setenv("DLC_RENDEZVOUS_SECRET", "short", 1);
  expectError(rendezvousExchange(tcp, one, bytes, 16, 0.3), StatusCode::InvalidArgument,
              "needs DLC_RENDEZVOUS_SECRET: a secret of at least 16 characters", "a short secret");
  ::setenv("DLC_RENDEZVOUS_SECRET", "the-secret-of-the-errors-job", 1);
  expectError(rendezvousExchange(tcp, one, bytes, 16, 0.3), StatusCode::Unavailable,
              "rank 1: no rendezvous at " + tcp + " after 0.3 s", "a port without rank 0");
  if (secondsSince(t0) > 1.5)
    fail("the two 0.3 s rendezvous took " + std::to_string(secondsSince(t0)) + " s");
  // Rank 0 without the others: it gives up and cleans up.
  RankInfo zero{0, 3, 0};
  expectError(rendezvousExchange("file:" + path, zero, bytes, 16, 0.3), StatusCode::Unavailable,
              "rank 0: ranks 1 and 2 did not read the rendezvous file",
              "a file without the others");
  if (::access(path.c_str(), F_OK) == 0)
    fail("rank 0 left " + path + " behind after a timeout");
  expectError(rendezvousExchange(tcp, zero, bytes, 16, 0.3), StatusCode::Unavailable,
              "rank 0: ranks 1 and 2 did not connect to the rendezvous " + tcp,
              "a port without the others");
  // Rank 0 listens on HOST's address, not on every interface: an address of another
  // machine (TEST-NET-1) cannot be bound.
  expectError(
      rendezvousExchange("tcp:192.0.2.1:" + std::to_string(freePort()), zero, bytes, 16, 0.3),
      StatusCode::Unavailable, "(HOST must be an address of rank 0's machine)",
      "a HOST that is not this machine");
  if (failures)
    return 1;
  if (!runUntrustedClients())
    return 1;
  // A file left by an earlier run.
  if (FILE *f = std::fopen(path.c_str(), "w"))
    std::fclose(f);
  expectError(rendezvousExchange("file:" + path, zero, bytes, 16, 0.3), StatusCode::Unavailable,
              "already exists (left by an earlier run? delete it)", "a stale rendezvous file");
  ::unlink(path.c_str());
  // A world of one needs nobody.
  expectOk(rendezvousExchange("file:" + path, RankInfo{}, bytes, 16, 0.3), "a world of one");
  if (failures)
    return 1;
  std::printf("errors ok\n");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode.empty())
    return runCollectives();
  if (mode == "--timeout-check")
    return runTimeoutCheck();
  if (mode == "--abort-check")
    return runAbortCheck();
  if (mode == "--rendezvous")
    return runRendezvous(argc > 2 ? argv[2] : nullptr);
  if (mode == "--errors")
    return runErrors();
  std::fprintf(stderr,
               "usage: %s [--timeout-check | --abort-check | --rendezvous [SPEC] | --errors]\n",
               argv[0]);
  return 2;
}

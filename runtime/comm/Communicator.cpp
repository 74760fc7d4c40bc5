//===- Communicator.cpp - Ranks from the environment and the rendezvous ---===//
//
// Without mpirun, the ranks of a run learn who they are from the environment
// (DLC_RANK, DLC_WORLD_SIZE) and meet once, so that rank 0 can hand the others a few
// bytes (NCCL's unique id): through a file on a shared file system, or through a TCP
// port that rank 0 listens on. Either way every wait ends at a deadline, and an
// error says which rank waited for what.
//
// The file protocol: rank 0 writes PATH.tmp.<pid> and renames it to PATH (so the
// others never see a partial file); each other rank reads PATH and creates
// PATH.ack.<rank>; rank 0 removes PATH and the acknowledgements once all are there.
// The TCP protocol: rank 0 listens on HOST's address only (not on every interface);
// each other rank connects and sends a hello: "DLCR", its rank, a fresh 16-byte nonce
// and an HMAC-SHA256 of those under the job's secret (DLC_RENDEZVOUS_SECRET, the same
// on every rank; `dlc train --nproc` makes one for its ranks). Rank 0 drops a hello
// whose MAC is wrong, whose nonce it has seen, or whose rank it has served, and answers
// the others with the length of the bytes (8 bytes), the bytes encrypted with an HMAC
// keystream bound to the nonce, and a MAC over all of it, which the rank checks: no
// one without the secret learns NCCL's id or poses as rank 0 or as a rank.
//===----------------------------------------------------------------------===//
#include "CommUtil.h"
#include "dlc/runtime/Collectives.h"
#include "dlc/support/Files.h"
#include "dlc/support/Sha256.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <set>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace dlc::rt {

bool launchedByMpi() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char *v = std::getenv(var); v && *v)
      return true;
  return false;
}

namespace {

/// The value of environment variable `name` as an integer; `set` is false when it is
/// unset or empty.
Status envInt(const char *name, int &value, bool &set) {
  const char *s = std::getenv(name);
  set = s && *s;
  if (!set)
    return Status::ok();
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (errno || *end || v < INT_MIN || v > INT_MAX)
    return Status(StatusCode::InvalidArgument,
                  std::string("environment variable ") + name + "='" + s + "' is not an integer");
  value = static_cast<int>(v);
  return Status::ok();
}

} // namespace

Result<RankInfo> rankFromEnvironment() {
  struct Vars {
    const char *rank, *size, *localRank;
  };
  for (Vars v : {Vars{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                 Vars{"DLC_RANK", "DLC_WORLD_SIZE", "DLC_LOCAL_RANK"}}) {
    RankInfo info;
    bool hasRank, hasSize, hasLocal;
    DLC_RETURN_IF_ERROR(envInt(v.rank, info.rank, hasRank));
    DLC_RETURN_IF_ERROR(envInt(v.size, info.size, hasSize));
    DLC_RETURN_IF_ERROR(envInt(v.localRank, info.localRank, hasLocal));
    if (!hasRank && !hasSize && !hasLocal)
      continue;
    auto bad = [](std::string msg) { return Status(StatusCode::InvalidArgument, std::move(msg)); };
    std::string sizeText = std::string(v.size) + "=" + std::to_string(info.size);
    if (!hasSize)
      return bad(std::string(v.rank) + " or " + v.localRank + " is set without " + v.size);
    if (info.size < 1)
      return bad(sizeText + " is not a world size (at least 1)");
    if (!hasRank && info.size > 1)
      return bad(sizeText + " is set without " + v.rank);
    std::string range =
        " is out of range for " + sizeText + " (0 to " + std::to_string(info.size - 1) + ")";
    if (info.rank < 0 || info.rank >= info.size)
      return bad(std::string(v.rank) + "=" + std::to_string(info.rank) + range);
    if (info.localRank < 0 || info.localRank >= info.size)
      return bad(std::string(v.localRank) + "=" + std::to_string(info.localRank) + range);
    return info;
  }
  return RankInfo{};
}

namespace {

std::string errnoText() {
  return std::strerror(errno);
}

std::string rankPrefix(const RankInfo &me) {
  return "rank " + std::to_string(me.rank) + ": ";
}

/// "1, 2 and 5".
std::string listRanks(const std::vector<int> &ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  return s;
}

//===----------------------------------------------------------------------===//
// file:PATH
//===----------------------------------------------------------------------===//

constexpr auto kFilePoll = std::chrono::milliseconds(20);

std::string ackPath(const std::string &path, int rank) {
  return path + ".ack." + std::to_string(rank);
}

/// Reads exactly n bytes of `path`; false if it is shorter or cannot be read (yet).
bool readFile(const std::string &path, void *bytes, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char *p = static_cast<char *>(bytes);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, p + done, n - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return done == n;
}

Status filePublish(const std::string &path, const RankInfo &me, const void *bytes, size_t n,
                   double timeout) {
  Deadline deadline(timeout);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0)
    return Status(StatusCode::Unavailable,
                  "rank 0: the rendezvous file '" + path +
                      "' already exists (left by an earlier run? delete it)");
  // Acknowledgements of an earlier run; the others acknowledge only what they read
  // from the file that is published below.
  for (int r = 1; r < me.size; ++r)
    ::unlink(ackPath(path, r).c_str());
  if (Status st = writeFileAtomically(path, bytes, n))
    return Status(st.code(), rankPrefix(me) + st.message());

  std::vector<bool> acked(static_cast<size_t>(me.size), false);
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int r = 1; r < me.size; ++r) {
      auto i = static_cast<size_t>(r);
      acked[i] = acked[i] || ::access(ackPath(path, r).c_str(), F_OK) == 0;
      if (!acked[i])
        missing.push_back(r);
    }
    if (missing.empty() || deadline.passed())
      break;
    std::this_thread::sleep_for(kFilePoll);
  }
  ::unlink(path.c_str());
  for (int r = 1; r < me.size; ++r)
    ::unlink(ackPath(path, r).c_str());
  if (!missing.empty())
    return Status(StatusCode::Unavailable,
                  "rank 0: rank" + std::string(missing.size() > 1 ? "s " : " ") +
                      listRanks(missing) + " did not read the rendezvous file '" + path +
                      "' within " + secondsText(timeout) +
                      " (did they start, with the same rendezvous?)");
  return Status::ok();
}

Status fileReceive(const std::string &path, const RankInfo &me, void *bytes, size_t n,
                   double timeout) {
  Deadline deadline(timeout);
  for (;;) {
    struct stat st;
    bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && static_cast<uint64_t>(st.st_size) == n && readFile(path, bytes, n))
      break;
    if (deadline.passed()) {
      std::string found = exists ? " (found a file of " + std::to_string(st.st_size) +
                                       " bytes, expected " + std::to_string(n) + ")"
                                 : " (did rank 0 start?)";
      return Status(StatusCode::Unavailable, rankPrefix(me) + "no rendezvous at file:" + path +
                                                 " after " + secondsText(timeout) + found);
    }
    std::this_thread::sleep_for(kFilePoll);
  }
  std::string ack = ackPath(path, me.rank);
  int fd = ::open(ack.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status(StatusCode::IoError,
                  rankPrefix(me) + "cannot create '" + ack + "': " + errnoText());
  ::close(fd);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// tcp:HOST:PORT
//===----------------------------------------------------------------------===//

constexpr char kHelloMagic[4] = {'D', 'L', 'C', 'R'};
constexpr size_t kNonceSize = 16;
// The magic, the rank (int32, host order: one machine type), the nonce, the MAC.
constexpr size_t kHelloSize = 8 + kNonceSize + sizeof(Digest);
constexpr const char *kSecretVar = "DLC_RENDEZVOUS_SECRET";

/// HMAC-SHA256 under the job's secret of a label and pieces of data.
Digest secretMac(const std::string &secret, const char *label,
                 std::initializer_list<std::pair<const void *, size_t>> pieces) {
  HmacSha256 mac(secret.data(), secret.size());
  mac.update(label, std::strlen(label) + 1);
  for (const auto &[data, n] : pieces)
    mac.update(data, n);
  return mac.finish();
}

/// XORs `n` bytes with the keystream of `nonce` (HMAC blocks under the secret, counter
/// mode): encrypts and decrypts.
void applyKeystream(const std::string &secret, const uint8_t *nonce, uint8_t *data, size_t n) {
  for (uint64_t block = 0; block * 32 < n; ++block) {
    Digest k = secretMac(secret, "dlc-rendezvous-key", {{nonce, kNonceSize}, {&block, 8}});
    for (size_t i = 0; i < 32 && block * 32 + i < n; ++i)
      data[block * 32 + i] ^= k[i];
  }
}

/// The MAC of rank 0's answer to the hello with `nonce`.
Digest answerMac(const std::string &secret, const uint8_t *nonce, int32_t rank,
                 const uint8_t *answer, size_t n) {
  return secretMac(secret, "dlc-rendezvous-answer", {{nonce, kNonceSize}, {&rank, 4}, {answer, n}});
}

/// A socket closed at the end of its scope.
class Socket {
public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket &&o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket &operator=(Socket &&o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int fd() const { return fd_; }
  void reset() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_;
};

int newSocket() {
  return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
}

/// Waits until `fd` is ready for `events`; false when the deadline passed first.
bool waitFd(int fd, short events, const Deadline &deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, deadline.remainingMs());
    if (r > 0)
      return true;
    if (r == 0)
      return false;
    if (errno != EINTR)
      return true; // the next send or recv reports the error
  }
}

/// Sends all n bytes; an empty string, or why not (a timeout or the socket's error).
std::string sendAll(int fd, const void *data, size_t n, const Deadline &deadline) {
  const char *p = static_cast<const char *>(data);
  for (size_t done = 0; done < n;) {
    ssize_t w = ::send(fd, p + done, n - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitFd(fd, POLLOUT, deadline))
        return "timed out";
      continue;
    }
    return errnoText();
  }
  return "";
}

/// Receives exactly n bytes; an empty string, or why not.
std::string recvAll(int fd, void *data, size_t n, const Deadline &deadline) {
  char *p = static_cast<char *>(data);
  for (size_t done = 0; done < n;) {
    ssize_t r = ::recv(fd, p + done, n - done, 0);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0)
      return "the connection was closed after " + std::to_string(done) + " of " +
             std::to_string(n) + " bytes";
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!waitFd(fd, POLLIN, deadline))
        return "timed out";
      continue;
    }
    return errnoText();
  }
  return "";
}

/// HOST:PORT's IPv4 addresses.
Result<std::unique_ptr<addrinfo, void (*)(addrinfo *)>> resolve(const std::string &host, int port,
                                                                const RankInfo &me) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *addrs = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addrs))
    return Status(StatusCode::Unavailable, rankPrefix(me) + "cannot resolve the rendezvous host '" +
                                               host + "': " + ::gai_strerror(rc));
  return std::unique_ptr<addrinfo, void (*)(addrinfo *)>(addrs, ::freeaddrinfo);
}

Status tcpPublish(const std::string &spec, const std::string &host, int port, const RankInfo &me,
                  const std::string &secret, const void *bytes, size_t n, double timeout) {
  Deadline deadline(timeout);
  auto addrs = resolve(host, port, me);
  if (!addrs.ok())
    return addrs.status();
  Socket listener(newSocket());
  if (listener.fd() < 0)
    return Status(StatusCode::IoError, "rank 0: cannot create a socket: " + errnoText());
  int one = 1;
  ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // HOST's address only: the rendezvous is not offered on every interface.
  const addrinfo *a = addrs->get();
  if (::bind(listener.fd(), a->ai_addr, a->ai_addrlen) != 0 ||
      ::listen(listener.fd(), me.size) != 0)
    return Status(StatusCode::Unavailable, "rank 0: cannot listen on " + host + ":" +
                                               std::to_string(port) + " for the rendezvous " +
                                               spec + ": " + errnoText() +
                                               " (HOST must be an address of rank 0's machine)");
  const auto *payload = static_cast<const uint8_t *>(bytes);
  bool loopback =
      a->ai_family == AF_INET &&
      (ntohl(reinterpret_cast<const sockaddr_in *>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  std::set<std::string> nonces; // a replayed hello is dropped

  // Connections that have not said which rank they are yet. A connection that is not
  // a rank (or a rank that sends garbage) is dropped without counting; so is one that
  // has not sent its hello within kHelloSeconds, and the oldest when more than
  // kMaxPending wait (whoever opens connections cannot hold rank 0's descriptors).
  using Clock = std::chrono::steady_clock;
  constexpr double kHelloSeconds = 10;
  const size_t kMaxPending = 4 * static_cast<size_t>(me.size) + 16;
  struct Pending {
    Socket s;
    char hello[kHelloSize];
    size_t got = 0;
    Clock::time_point since = Clock::now();
  };
  std::vector<Pending> pending;
  std::vector<bool> served(static_cast<size_t>(me.size), false);
  int left = me.size - 1;
  while (left > 0 && !deadline.passed()) {
    pending.erase(
        std::remove_if(pending.begin(), pending.end(),
                       [&](const Pending &p) {
                         return std::chrono::duration<double>(Clock::now() - p.since).count() >
                                kHelloSeconds;
                       }),
        pending.end());
    std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
    for (Pending &p : pending)
      fds.push_back({p.s.fd(), POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), std::min(deadline.remainingMs(), 1000));
    if (r < 0 && errno != EINTR)
      return Status(StatusCode::IoError,
                    "rank 0: poll failed during the rendezvous: " + errnoText());
    if (r <= 0)
      continue;
    for (size_t i = 1; i < fds.size(); ++i) {
      Pending &p = pending[i - 1];
      if (!fds[i].revents)
        continue;
      ssize_t got = ::recv(p.s.fd(), p.hello + p.got, kHelloSize - p.got, 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        continue;
      if (got <= 0) {
        p.s.reset();
        continue;
      }
      p.got += static_cast<size_t>(got);
      if (p.got < kHelloSize)
        continue;
      int32_t rank;
      std::memcpy(&rank, p.hello + 4, 4);
      const auto *hello = reinterpret_cast<const uint8_t *>(p.hello);
      Digest mac;
      std::memcpy(mac.data(), hello + 8 + kNonceSize, mac.size());
      std::string nonce(p.hello + 8, kNonceSize);
      if (std::memcmp(p.hello, kHelloMagic, 4) != 0 || rank < 1 || rank >= me.size ||
          served[static_cast<size_t>(rank)] ||
          !digestsEqual(mac,
                        secretMac(secret, "dlc-rendezvous-hello", {{hello, 8 + kNonceSize}})) ||
          !nonces.insert(nonce).second) {
        p.s.reset();
        continue;
      }
      // The length, the bytes under this hello's keystream, and the MAC of both.
      std::vector<uint8_t> answer(8 + n + sizeof(Digest));
      uint64_t len = n;
      std::memcpy(answer.data(), &len, 8);
      if (n)
        std::memcpy(answer.data() + 8, payload, n);
      applyKeystream(secret, hello + 8, answer.data() + 8, n);
      Digest am = answerMac(secret, hello + 8, rank, answer.data(), 8 + n);
      std::memcpy(answer.data() + 8 + n, am.data(), am.size());
      std::string err = sendAll(p.s.fd(), answer.data(), answer.size(), deadline);
      if (!err.empty())
        return Status(StatusCode::Unavailable, "rank 0: cannot send the rendezvous to rank " +
                                                   std::to_string(rank) + ": " + err);
      served[static_cast<size_t>(rank)] = true;
      --left;
      p.s.reset();
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const Pending &p) { return p.s.fd() < 0; }),
                  pending.end());
    if (fds[0].revents & POLLIN) {
      int c = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        if (pending.size() >= kMaxPending)
          pending.erase(pending.begin());
        pending.push_back(Pending{Socket(c), {}, 0, Clock::now()});
      }
    }
  }
  if (left == 0)
    return Status::ok();
  std::vector<int> missing;
  for (int r = 1; r < me.size; ++r)
    if (!served[static_cast<size_t>(r)])
      missing.push_back(r);
  return Status(StatusCode::Unavailable,
                "rank 0: rank" + std::string(missing.size() > 1 ? "s " : " ") + listRanks(missing) +
                    " did not connect to the rendezvous " + spec + " within " +
                    secondsText(timeout) + " (did they start, with the same rendezvous?" +
                    (loopback ? " " + host +
                                    " is a loopback address: ranks on other machines cannot "
                                    "reach it; give an address of this machine's network)"
                              : std::string(")")));
}

Status tcpReceive(const std::string &spec, const std::string &host, int port, const RankInfo &me,
                  const std::string &secret, void *bytes, size_t n, double timeout) {
  Deadline deadline(timeout);
  auto resolved = resolve(host, port, me);
  if (!resolved.ok())
    return resolved.status();
  addrinfo *addrs = resolved->get();

  // Rank 0 may not listen yet: retry until the deadline, each attempt bounded too
  // (an unreachable host would otherwise hold a connect for minutes).
  std::string lastError = "did rank 0 start?";
  Socket s;
  while (s.fd() < 0 && !deadline.passed()) {
    for (addrinfo *a = addrs; a && s.fd() < 0; a = a->ai_next) {
      Socket c(newSocket());
      if (c.fd() < 0)
        return Status(StatusCode::IoError,
                      rankPrefix(me) + "cannot create a socket: " + errnoText());
      int r = ::connect(c.fd(), a->ai_addr, a->ai_addrlen);
      if (r != 0 && errno == EINPROGRESS) {
        Deadline attempt(std::fmin(1.0, deadline.remainingMs() / 1000.0));
        int err = ETIMEDOUT;
        socklen_t len = sizeof err;
        if (waitFd(c.fd(), POLLOUT, attempt))
          ::getsockopt(c.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        r = err ? -1 : 0;
        errno = err;
      }
      if (r == 0)
        s = std::move(c);
      else
        lastError = errnoText() + "; did rank 0 start?";
    }
    if (s.fd() < 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, deadline.remainingMs())));
  }
  if (s.fd() < 0)
    return Status(StatusCode::Unavailable, rankPrefix(me) + "no rendezvous at " + spec + " after " +
                                               secondsText(timeout) + " (" + lastError + ")");

  uint8_t hello[kHelloSize];
  int32_t rank = me.rank;
  std::memcpy(hello, kHelloMagic, 4);
  std::memcpy(hello + 4, &rank, 4);
  int urandom = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool haveNonce = urandom >= 0 && ::read(urandom, hello + 8, kNonceSize) == ssize_t(kNonceSize);
  if (urandom >= 0)
    ::close(urandom);
  if (!haveNonce)
    return Status(StatusCode::IoError, rankPrefix(me) +
                                           "cannot read /dev/urandom for the "
                                           "rendezvous nonce: " +
                                           errnoText());
  Digest mac = secretMac(secret, "dlc-rendezvous-hello", {{hello, 8 + kNonceSize}});
  std::memcpy(hello + 8 + kNonceSize, mac.data(), mac.size());
  std::vector<uint8_t> answer(8 + n + sizeof(Digest));
  std::string err = sendAll(s.fd(), hello, kHelloSize, deadline);
  if (err.empty())
    err = recvAll(s.fd(), answer.data(), 8, deadline);
  if (!err.empty())
    return Status(StatusCode::Unavailable,
                  rankPrefix(me) + "the rendezvous at " + spec + " failed: " + err +
                      (err.rfind("the connection was closed", 0) == 0
                           ? " (rank 0 refused this rank: is " + std::string(kSecretVar) +
                                 " the same on every rank, and is this rank not already served?)"
                           : std::string()));
  uint64_t len = 0;
  std::memcpy(&len, answer.data(), 8);
  if (len != n)
    return Status(StatusCode::Unavailable, rankPrefix(me) + "rank 0 published " +
                                               std::to_string(len) + " bytes at " + spec +
                                               ", expected " + std::to_string(n) +
                                               " (are all ranks the same version of dlc?)");
  err = recvAll(s.fd(), answer.data() + 8, n + sizeof(Digest), deadline);
  if (!err.empty())
    return Status(StatusCode::Unavailable,
                  rankPrefix(me) + "the rendezvous at " + spec + " failed: " + err);
  Digest got;
  std::memcpy(got.data(), answer.data() + 8 + n, got.size());
  if (!digestsEqual(got, answerMac(secret, hello + 8, rank, answer.data(), 8 + n)))
    return Status(StatusCode::Unavailable,
                  rankPrefix(me) + "the answer at " + spec +
                      " is not authentic (not rank 0 of this job, or another " + kSecretVar + ")");
  applyKeystream(secret, hello + 8, answer.data() + 8, n);
  if (n)
    std::memcpy(bytes, answer.data() + 8, n);
  return Status::ok();
}

} // namespace

Status rendezvousExchange(const std::string &spec, const RankInfo &me, void *bytes, size_t n,
                          double timeoutSeconds) {
  auto badSpec = [&] {
    return Status(StatusCode::InvalidArgument,
                  "--rendezvous must be file:PATH or tcp:HOST:PORT, got '" + spec + "'");
  };
  bool isFile = spec.compare(0, 5, "file:") == 0 && spec.size() > 5;
  std::string host;
  int port = 0;
  if (!isFile) {
    size_t colon = spec.rfind(':');
    if (spec.compare(0, 4, "tcp:") != 0 || colon <= 4 || colon + 1 >= spec.size())
      return badSpec();
    host = spec.substr(4, colon - 4);
    std::string portText = spec.substr(colon + 1);
    char *end = nullptr;
    long p = std::strtol(portText.c_str(), &end, 10);
    if (*end || p < 1 || p > 65535)
      return badSpec();
    port = static_cast<int>(p);
  }
  if (me.size <= 1)
    return Status::ok();
  if (isFile) {
    std::string path = spec.substr(5);
    return me.rank == 0 ? filePublish(path, me, bytes, n, timeoutSeconds)
                        : fileReceive(path, me, bytes, n, timeoutSeconds);
  }
  const char *secret = std::getenv(kSecretVar);
  if (!secret || std::strlen(secret) < 16)
    return Status(StatusCode::InvalidArgument,
                  rankPrefix(me) + "the rendezvous " + spec + " needs " + kSecretVar +
                      ": a secret of at least 16 characters, the same on every rank of the job "
                      "(for example `export " +
                      kSecretVar +
                      "=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')`; dlc "
                      "train --nproc makes one for the ranks it starts)");
  return me.rank == 0 ? tcpPublish(spec, host, port, me, secret, bytes, n, timeoutSeconds)
                      : tcpReceive(spec, host, port, me, secret, bytes, n, timeoutSeconds);
}

} // namespace dlc::rt

//===- HostKey.cpp - This user's key for signing host code ---------------===//
#include "dlc/support/HostKey.h"

#include "dlc/support/Files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlc {

namespace {

std::string homeDir() {
  if (const char *h = std::getenv("HOME"); h && *h)
    return h;
  if (const passwd *pw = ::getpwuid(::getuid()); pw && pw->pw_dir)
    return pw->pw_dir;
  return "";
}

/// Makes every missing directory of `dir` with mode 0700.
Status makeDirs(const std::string &dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/')
      continue;
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      return Status(StatusCode::IoError,
                    "cannot create '" + part + "' for the host-code key: " + std::strerror(errno));
  }
  return Status::ok();
}

Result<HostKey> readKey(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return Status(StatusCode::IoError,
                  "cannot read the host-code key '" + path + "': " + std::strerror(errno));
  struct stat st;
  HostKey key{};
  bool good = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::getuid() &&
              (st.st_mode & 077) == 0 && st.st_size == static_cast<off_t>(key.size()) &&
              ::read(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
  ::close(fd);
  if (!good)
    return Status(StatusCode::IoError, "the host-code key '" + path +
                                           "' is not a 32-byte file that only its owner, this "
                                           "user, can read and write");
  return key;
}

} // namespace

std::string hostKeyPath() {
  if (const char *f = std::getenv("DLC_HOST_KEY_FILE"); f && *f)
    return f;
  if (const char *x = std::getenv("XDG_CONFIG_HOME"); x && *x == '/')
    return std::string(x) + "/dlc/host.key";
  return homeDir() + "/.config/dlc/host.key";
}

Result<HostKey> loadHostKey(bool create) {
  std::string path = hostKeyPath();
  struct stat st;
  if (!create || ::lstat(path.c_str(), &st) == 0)
    return readKey(path);
  std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty())
    DLC_RETURN_IF_ERROR(makeDirs(dir));
  HostKey key;
  for (size_t got = 0; got < key.size();) {
    ssize_t n = ::getrandom(key.data() + got, key.size() - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return Status(StatusCode::IoError,
                    std::string("no random bytes for the host-code key: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  // Written beside it and linked into place: of two compilers creating it at once, one
  // key wins and both read that one.
  std::string tmp = path + ".new-XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    return Status(StatusCode::IoError,
                  "cannot write the host-code key '" + path + "': " + std::strerror(errno));
  bool wrote = ::fchmod(fd, 0600) == 0 &&
               ::write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size()) &&
               ::fsync(fd) == 0;
  ::close(fd);
  int linked = wrote ? ::link(tmp.c_str(), path.c_str()) : -1;
  int err = errno;
  ::unlink(tmp.c_str());
  if (!wrote || (linked != 0 && err != EEXIST))
    return Status(StatusCode::IoError,
                  "cannot write the host-code key '" + path + "': " + std::strerror(err));
  return readKey(path);
}

} // namespace dlc

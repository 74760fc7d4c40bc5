//===- Files.cpp - Writing a file whole or not at all ---------------------===//
#include "Files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace dlc::rt {

Status writeFileAtomically(const std::string &path, const void *data, size_t n) {
  // The process id keeps concurrent writers of one path (ranks) apart.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto failed = [&](int err) {
    ::unlink(tmp.c_str());
    return Status(StatusCode::IoError, "cannot write '" + path + "': " + std::strerror(err));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status(StatusCode::IoError, "cannot write '" + path + "': " + std::strerror(errno));
  const char *p = static_cast<const char *>(data);
  for (size_t done = 0; done < n;) {
    ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int err = w < 0 ? errno : EIO;
      ::close(fd);
      return failed(err);
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0)
    return failed(errno);
  return Status::ok();
}

} // namespace dlc::rt

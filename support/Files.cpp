//===- Files.cpp - Writing a file whole or not at all ---------------------===//
#include "dlc/support/Files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlc {

Result<AtomicFile> AtomicFile::open(const std::string &path, unsigned mode) {
  // mkstemp's unique name keeps concurrent writers of one path (ranks, compilers
  // sharing a cache) apart.
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    return Status(StatusCode::IoError, "cannot write '" + path + "': " + std::strerror(errno));
  return AtomicFile(path, std::move(tmp), fd, mode);
}

AtomicFile::AtomicFile(AtomicFile &&o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), mode_(o.mode_),
      error_(std::move(o.error_)) {
  o.fd_ = -1;
  o.tmp_.clear();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0)
    ::close(fd_);
  if (!tmp_.empty())
    ::unlink(tmp_.c_str());
}

Status AtomicFile::failure(int err) {
  if (!error_)
    error_ = Status(StatusCode::IoError, "cannot write '" + path_ + "': " + std::strerror(err));
  return error_;
}

Status AtomicFile::write(const void *data, size_t n) {
  if (error_ || fd_ < 0)
    return error_ ? error_ : failure(EBADF);
  const char *p = static_cast<const char *>(data);
  for (size_t done = 0; done < n;) {
    ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return failure(w < 0 ? errno : EIO);
    done += static_cast<size_t>(w);
  }
  return Status::ok();
}

Status AtomicFile::commit() {
  if (error_ || fd_ < 0)
    return error_ ? error_ : failure(EBADF);
  int fd = fd_;
  fd_ = -1;
  if (::fchmod(fd, mode_) != 0 || ::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0)
    return failure(errno);
  tmp_.clear(); // renamed: nothing to remove
  return Status::ok();
}

Status writeFileAtomically(const std::string &path, const void *data, size_t n, unsigned mode) {
  auto f = AtomicFile::open(path, mode);
  if (!f)
    return f.status();
  if (Status s = f->write(data, n))
    return s;
  return f->commit();
}

} // namespace dlc

//===- Files.cpp - Writing a file whole or not at all ---------------------===//
#include "dlc/support/Files.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlc {

namespace {

/// Removes temporaries of `path` (path.tmp-XXXXXX) that a killed writer left: those
/// untouched for ten minutes (a live writer's file changes as it writes).
void removeStaleTemporaries(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp-";
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  time_t now = ::time(nullptr);
  while (const dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0)
      continue;
    std::string full = (slash == std::string::npos ? std::string() : dir) + name;
    struct stat st;
    if (::lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::getuid() &&
        now - st.st_mtime > 600)
      ::unlink(full.c_str());
  }
  ::closedir(d);
}

} // namespace

Result<AtomicFile> AtomicFile::open(const std::string &path, unsigned mode) {
  // What the rename would fail on is found now, before anything is written.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return Status(StatusCode::IoError, "cannot write '" + path + "': it is a directory");
  removeStaleTemporaries(path);
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
  int err = ::fchmod(fd, mode_) != 0 ? errno : 0;
  if (::close(fd) != 0 && !err)
    err = errno;
  if (!err && ::rename(tmp_.c_str(), path_.c_str()) != 0)
    err = errno;
  if (err) {
    Status s = failure(err);
    ::unlink(tmp_.c_str());
    tmp_.clear();
    return s;
  }
  tmp_.clear(); // renamed: nothing to remove
  return Status::ok();
}

Result<int> openRegularFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Status(StatusCode::IoError, "cannot read '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::IoError, "'" + path + "' is not a regular file");
  }
  // Reads of a regular file do not block; clearing the flag keeps them plain.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Result<std::vector<uint8_t>> readRegularFile(const std::string &path, uint64_t maxBytes) {
  auto fd = openRegularFile(path);
  if (!fd.ok())
    return fd.status();
  struct stat st;
  ::fstat(*fd, &st);
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(*fd);
    return Status(StatusCode::IoError,
                  "'" + path + "' is larger than " + std::to_string(maxBytes) + " bytes");
  }
  std::vector<uint8_t> data;
  try {
    data.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc &) {
    ::close(*fd);
    return Status(StatusCode::IoError, "'" + path + "': not enough memory to read it");
  }
  for (size_t done = 0; done < data.size();) {
    ssize_t r = ::read(*fd, data.data() + done, data.size() - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      int err = r < 0 ? errno : EIO;
      ::close(*fd);
      return Status(StatusCode::IoError,
                    "cannot read '" + path + "': " +
                        (r == 0 ? std::string("it shrank while read") : std::strerror(err)));
    }
    done += static_cast<size_t>(r);
  }
  ::close(*fd);
  return data;
}

Status commitAll(std::vector<AtomicFile> &files) {
  // A file that exists now keeps a second name (a hard link, named like a temporary so
  // that a crash leaves nothing the next writer does not remove) until all are in place.
  std::vector<bool> existed;
  std::vector<std::string> backups;
  for (const AtomicFile &f : files) {
    struct stat st;
    existed.push_back(::lstat(f.path().c_str(), &st) == 0);
    std::string backup;
    if (existed.back() && S_ISREG(st.st_mode)) {
      backup = f.path() + ".tmp-XXXXXX";
      int fd = ::mkostemp(backup.data(), O_CLOEXEC);
      bool linked = fd >= 0 && ::close(fd) == 0 && ::unlink(backup.c_str()) == 0 &&
                    ::link(f.path().c_str(), backup.c_str()) == 0;
      if (!linked) {
        if (fd >= 0)
          ::unlink(backup.c_str());
        backup.clear();
      }
    }
    backups.push_back(std::move(backup));
  }
  Status result;
  size_t done = 0;
  for (; done < files.size(); ++done)
    if (Status s = files[done].commit()) {
      result = s;
      break;
    }
  for (size_t j = 0; j < files.size(); ++j) {
    if (!result || j >= done) { // success, or not replaced: the second name goes
      if (!backups[j].empty())
        ::unlink(backups[j].c_str());
    } else if (!backups[j].empty()) { // replaced: the old file comes back
      ::rename(backups[j].c_str(), files[j].path().c_str());
    } else if (!existed[j]) { // new: it goes again
      ::unlink(files[j].path().c_str());
    }
  }
  return result;
}

bool sameFile(const std::string &a, const std::string &b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

Status refuseOverwrite(const std::string &output, const std::string &what,
                       std::initializer_list<std::pair<std::string, std::string>> inputs) {
  for (const auto &[path, name] : inputs)
    if (!path.empty() && sameFile(output, path))
      return Status(StatusCode::InvalidArgument, what + " '" + output + "' is the " + name +
                                                     " itself: writing it would destroy it");
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

//===- Files.h - Writing a file whole or not at all -------------*- C++ -*-===//
//
// The one way dlc writes a file that someone may read (packages, executables, .npy
// and .npz files, checkpoints, reports, cache entries, the rendezvous file): a reader
// sees the old file or the whole new one, and a failed write leaves nothing behind.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/support/Status.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace dlc {

/// A file written to a unique temporary file beside `path`, which commit() renames
/// over `path`. Destroyed without a commit, it removes the temporary file.
class AtomicFile {
public:
  /// `mode`: the permissions of the finished file (0755 for an executable).
  static Result<AtomicFile> open(const std::string &path, unsigned mode = 0644);
  AtomicFile(AtomicFile &&o) noexcept;
  AtomicFile &operator=(AtomicFile &&) = delete;
  AtomicFile(const AtomicFile &) = delete;
  ~AtomicFile();

  /// Appends `n` bytes. After a failure every later write and the commit fail too.
  Status write(const void *data, size_t n);
  /// Closes the file, gives it its mode and renames it to `path`.
  Status commit();
  const std::string &path() const { return path_; }

private:
  AtomicFile(std::string path, std::string tmp, int fd, unsigned mode)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), mode_(mode) {}
  Status failure(int err);

  std::string path_, tmp_;
  int fd_ = -1;
  unsigned mode_;
  Status error_;
};

/// Commits every file, in order, all or nothing: when one fails, the files this call had
/// already put in place are undone (a new one removed, a replaced one restored from a
/// hard link kept until the end), and the error is returned.
Status commitAll(std::vector<AtomicFile> &files);

/// Opens `path` for reading without blocking on it (a FIFO or a device is refused at
/// once, never waited on) and checks that it is a regular file. Returns the descriptor,
/// which the caller closes.
Result<int> openRegularFile(const std::string &path);
/// The whole of a regular file (openRegularFile), at most `maxBytes` of it.
Result<std::vector<uint8_t>> readRegularFile(const std::string &path,
                                             uint64_t maxBytes = UINT64_MAX);

/// Whether two paths name one existing file (the same device and inode, through any
/// links).
bool sameFile(const std::string &a, const std::string &b);
/// An error when `output` would overwrite one of `inputs` ("--log is the package").
Status refuseOverwrite(const std::string &output, const std::string &what,
                       std::initializer_list<std::pair<std::string, std::string>> inputs);

/// Writes `n` bytes to `path` through an AtomicFile.
Status writeFileAtomically(const std::string &path, const void *data, size_t n,
                           unsigned mode = 0644);

} // namespace dlc

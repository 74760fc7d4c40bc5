//===- Files.h - Writing a file whole or not at all (runtime-internal) ----===//
#pragma once

#include "dlc/package/Status.h"

#include <string>

namespace dlc::rt {

/// Writes `n` bytes to `path` through a temporary file beside it and a rename, so that
/// a reader sees the whole file or none, and a failed write leaves nothing behind.
Status writeFileAtomically(const std::string &path, const void *data, size_t n);

} // namespace dlc::rt

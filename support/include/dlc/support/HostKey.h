//===- HostKey.h - This user's key for signing host code --------*- C++ -*-===//
//
// A package may carry host code (the emu backend's shared object), which a session
// would run as the user. dlc runs it only when the package was built by this user on
// this machine (an HMAC-SHA256 of the package with this key matches the signature the
// compiler wrote), or when the user consents (--allow-host-code). The key is 32 random
// bytes in a file only the user can read: $DLC_HOST_KEY_FILE, else
// $XDG_CONFIG_HOME/dlc/host.key, else ~/.config/dlc/host.key. The compiler creates it
// on first use.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/support/Status.h"

#include <array>
#include <cstdint>
#include <string>

namespace dlc {

using HostKey = std::array<uint8_t, 32>;

/// Where this user's key lives.
std::string hostKeyPath();
/// Reads the key. With `create`, a missing key is made first (random bytes, mode 0600,
/// in a directory of mode 0700; concurrent creators agree on one key). A key that
/// others could read or write, or that is not a regular file of 32 bytes, is an error.
Result<HostKey> loadHostKey(bool create);

} // namespace dlc

//===- Sha256.h - SHA-256 and HMAC-SHA256 -----------------------*- C++ -*-===//
//
// FIPS 180-4's SHA-256 and RFC 2104's HMAC over it, for the packages' host-code
// signatures (HostKey.h) and the kernel cache's integrity checks. Streaming: update()
// takes the data piece by piece (a package's sections are never copied into one
// buffer to be hashed).
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dlc {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t n);
  Digest finish();

private:
  void block(const uint8_t *p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

/// HMAC-SHA256 with `key` (any length).
class HmacSha256 {
public:
  HmacSha256(const void *key, size_t n);
  void update(const void *data, size_t n) { inner_.update(data, n); }
  Digest finish();

private:
  Sha256 inner_;
  uint8_t outerPad_[64];
};

Digest sha256(const void *data, size_t n);
/// Lower-case hex of a digest.
std::string hex(const Digest &d);
/// Whether two digests are equal, in time independent of where they differ.
bool digestsEqual(const Digest &a, const Digest &b);

} // namespace dlc

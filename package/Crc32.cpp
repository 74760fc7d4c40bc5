//===- Crc32.cpp - CRC-32 (IEEE, reflected), slicing by 8 ------------------===//
#include "dlc/package/Package.h"

#include <array>
#include <cstring>

namespace dlc::pkg {

namespace {
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s)
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};
} // namespace

uint32_t crc32(const void *data, size_t n, uint32_t seed) {
  static const Tables tables;
  const auto &t = tables.t;
  const uint8_t *p = static_cast<const uint8_t *>(data);
  uint32_t c = ~seed;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--)
    c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

} // namespace dlc::pkg

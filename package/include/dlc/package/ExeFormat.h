//===- ExeFormat.h - Packages appended to executables -----------*- C++ -*-===//
//
// `dlc compile --emit exe` copies the stub executable (dlc-exe-stub), pads it to a
// page boundary, appends the package and then a 32-byte footer. The stub maps the
// package from /proc/self/exe.
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <cstring>

namespace dlc::cli {

struct ExeFooter {
  char magic[8];          // kExeMagic
  uint64_t packageOffset; // page-aligned
  uint64_t packageSize;
  uint64_t version; // kExeFooterVersion
};
static_assert(sizeof(ExeFooter) == 32);

inline constexpr char kExeMagic[8] = {'D', 'L', 'C', 'E', 'X', 'E', '0', '1'};
inline constexpr uint64_t kExeFooterVersion = 1;
inline constexpr uint64_t kExePackageAlign = 65536; // any page size up to 64 KiB

inline bool isExeFooter(const ExeFooter &f) {
  return std::memcmp(f.magic, kExeMagic, 8) == 0 && f.version == kExeFooterVersion;
}

} // namespace dlc::cli

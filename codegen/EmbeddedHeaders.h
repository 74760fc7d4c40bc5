//===- EmbeddedHeaders.h - Device headers compiled into dlc -----*- C++ -*-===//
#pragma once

#include <string>
#include <vector>

namespace dlc::codegen {

struct EmbeddedFile {
  const char *name;
  const char *contents;
};
/// dlc_device.cuh, dlc_emu_prelude.h, EmuAbi.h and the runtime C API header, embedded at build
/// time.
const std::vector<EmbeddedFile> &embeddedHeaders();

} // namespace dlc::codegen

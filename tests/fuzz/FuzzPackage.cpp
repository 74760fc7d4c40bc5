// libFuzzer target: the .dlc reader (header, checksums, FlatBuffers verifier, every
// reference check) and a walk over the metadata the runtime would read.
#include "dlc/package/Package.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto pf = dlc::pkg::PackageFile::fromBytes(data, size, "fuzz.dlc");
  if (!pf.ok())
    return 0;
  // A verified package: touching everything it references must be safe.
  const dlc::pkg::Package &m = (*pf)->meta();
  volatile uint64_t sink = m.arena_bytes() + m.weight_bytes();
  if (m.weights())
    for (const dlc::pkg::Weight *w : *m.weights())
      if (w->data() && w->data()->size())
        sink = sink + (*pf)->section(w->data())[w->data()->size() - 1];
  if (m.modules())
    for (const dlc::pkg::Module *mod : *m.modules())
      if (mod->data() && mod->data()->size())
        sink = sink + (*pf)->section(mod->data())[0];
  (void)sink;
  return 0;
}

// libFuzzer target: the .dlc reader (header, checksums, FlatBuffers verifier, every
// reference check), a walk over the metadata the runtime would read, and an emu
// session with default options (the trust gate: a mutated package's host code must
// never load, and whatever the session reads first must not crash it). A mutation
// almost never keeps the checksums right, so each input is also tried re-signed
// (current format version, both checksums recomputed): that copy reaches the
// FlatBuffers verifier and the reference checks with the mutated metadata.
#include "dlc/package/Package.h"
#include "dlc/runtime/Runtime.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

void readPackage(const uint8_t *data, size_t size) {
  auto pf = dlc::pkg::PackageFile::fromBytes(data, size, "fuzz.dlc");
  if (!pf.ok())
    return;
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
  if (m.bound_inputs())
    for (const dlc::pkg::BoundInput *b : *m.bound_inputs())
      sink = sink + dlc::pkg::describeBoundInput(*b).size();
  if (m.inputs() && m.inputs()->size())
    sink = sink + dlc::pkg::unknownInputMessage(m, m.inputs()->Get(0)->name()->str()).size();
  (void)sink;
  // As `dlc run` would open it on a machine without a GPU (bounded memory, one thread).
  dlc::rt::SessionOptions o;
  o.device = dlc::rt::DeviceKind::Emu;
  o.emuThreads = 1;
  o.maxMemoryBytes = uint64_t{64} << 20;
  auto session = dlc::rt::Session::create(*pf, o);
  (void)session;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  readPackage(data, size);
  if (size < dlc::pkg::kHeaderSize)
    return 0;
  // The header (package/Package.cpp): version at 8, body checksum at 48 (of the bytes
  // after the header), header checksum at 52 (of bytes [0, 52)).
  std::vector<uint8_t> b(data, data + size);
  uint32_t version = dlc::pkg::kFormatVersion;
  std::memcpy(b.data() + 8, &version, 4);
  uint32_t body =
      dlc::pkg::crc32(b.data() + dlc::pkg::kHeaderSize, b.size() - dlc::pkg::kHeaderSize);
  std::memcpy(b.data() + 48, &body, 4);
  uint32_t header = dlc::pkg::crc32(b.data(), 52);
  std::memcpy(b.data() + 52, &header, 4);
  readPackage(b.data(), b.size());
  return 0;
}

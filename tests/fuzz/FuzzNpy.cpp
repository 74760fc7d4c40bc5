// libFuzzer target: the .npy reader used by `dlc run` and the generated executables.
#include "dlc/runtime/Runtime.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto t = dlc::rt::parseNpy(data, size, "fuzz.npy");
  if (t.ok() && t->byteSize() != t->data.size())
    __builtin_trap(); // a parsed tensor must hold exactly its bytes
  return 0;
}

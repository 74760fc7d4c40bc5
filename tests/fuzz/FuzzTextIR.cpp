// libFuzzer target: the textual IR parser and the verifier; a graph that parses and
// verifies must print and re-parse to the same text.
#include "dlc/ir/TextIR.h"

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  auto g = dlc::ir::parseGraph(text, "fuzz.ir");
  if (!g) {
    llvm::consumeError(g.takeError());
    return 0;
  }
  if (auto e = dlc::ir::verifyGraph(**g)) {
    llvm::consumeError(std::move(e));
    return 0;
  }
  std::string printed = dlc::ir::printGraph(**g);
  auto again = dlc::ir::parseGraph(printed, "printed.ir");
  if (!again || dlc::ir::printGraph(**again) != printed)
    __builtin_trap(); // the round trip is exact for every valid graph
  return 0;
}

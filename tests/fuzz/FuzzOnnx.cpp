// libFuzzer target: the ONNX importer (parse, external-data checks, checker, version
// conversion, shape inference, graph building) on arbitrary bytes. External data is
// resolved inside an empty directory, so no file outside it is ever read.
#include "dlc/frontend/OnnxImporter.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/dlc-fuzz-onnx-XXXXXX";
    const char *d = mkdtemp(tmpl);
    return std::string(d ? d : "/nonexistent");
  }();
  auto r = dlc::frontend::importOnnxBytes(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "fuzz.onnx", dir);
  if (!r)
    llvm::consumeError(r.takeError());
  return 0;
}

//===- ExportCommand.cpp - `dlc export`: the trained model as ONNX ---------===//
//
// The model a training package was compiled from, with the values of a checkpoint
// of `dlc train` (driver::exportOnnx).
//===----------------------------------------------------------------------===//
#include "Args.h"
#include "Commands.h"
#include "dlc/codegen/Artifacts.h"
#include "dlc/driver/Export.h"
#include "dlc/support/Files.h"

namespace dlc::tool {

int runExport(const std::vector<std::string> &argv) {
  ArgParser parser(
      "export", "PACKAGE.dlc --checkpoint CKPT.npz -o MODEL.onnx",
      "Writes the ONNX model a training package was compiled from, with the values of\n"
      "a checkpoint (trained parameters and BatchNorm running statistics).",
      {{"checkpoint", 0, true, false, "FILE.npz", "A checkpoint of `dlc train`"},
       {"output", 'o', true, false, "FILE.onnx", "The model to write"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode);
  if (!args)
    return exitCode;
  if (args->positionals().size() != 1 || !args->has("checkpoint") || !args->has("output")) {
    reportError("export: expected PACKAGE.dlc --checkpoint CKPT.npz -o MODEL.onnx");
    return 2;
  }
  std::string checkpoint = args->getOr("checkpoint", ""), out = args->getOr("output", "");
  if (Status s = refuseOverwrite(
          out, "export: -o", {{args->positionals()[0], "package"}, {checkpoint, "checkpoint"}})) {
    reportError(s.message());
    return 2;
  }
  auto file = pkg::PackageFile::load(args->positionals()[0]);
  if (!file) {
    reportError(file.status().message());
    return 1;
  }
  auto values = rt::readNpz(checkpoint);
  if (!values) {
    reportError(values.status().message());
    return 1;
  }
  auto model = driver::exportOnnx(**file, *values, "checkpoint '" + checkpoint + "'");
  if (!model) {
    reportError(model.takeError());
    return 1;
  }
  if (auto e = codegen::writeFileAtomically(out, model->model)) {
    reportError(std::move(e));
    return 1;
  }
  llvm::errs() << "dlc: wrote " << out << " with " << model->replaced.size()
               << " initializers from the checkpoint\n";
  return 0;
}

} // namespace dlc::tool

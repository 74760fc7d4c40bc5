//===- OpsCommand.cpp - `dlc ops`: the op table ----------------------------===//
#include "Args.h"
#include "Commands.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/OpDef.h"

#include "llvm/Support/FormatAdapters.h"

namespace dlc::tool {

int runOps(const std::vector<std::string> &argv) {
  ArgParser parser("ops", "[--markdown] [--onnx]",
                   "Lists the IR ops with their fusibility, FP16 policy, layout rule and how\n"
                   "autodiff differentiates them (rule, decomposed, or -), or\n"
                   "(--onnx) the ONNX op types the importer handles.",
                   {{"markdown", 0, false, false, "", "Print a Markdown table (as in the README)"},
                    {"onnx", 0, false, false, "",
                     "List the supported ONNX op types (default domain and com.microsoft)"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode);
  if (!args)
    return exitCode;
  if (args->has("onnx")) {
    for (const char *domain : {"", "com.microsoft"}) {
      auto ops = frontend::supportedOnnxOps(domain);
      if (*domain)
        llvm::outs() << "\n" << domain << " (ONNX Runtime's contrib ops):\n";
      for (size_t i = 0; i < ops.size(); ++i)
        llvm::outs() << (i ? (i % 10 ? ", " : ",\n") : "") << ops[i];
      llvm::outs() << "\n";
    }
    return 0;
  }
  bool md = args->has("markdown");
  llvm::raw_ostream &os = llvm::outs();
  if (md)
    os << "| op | fusion | fp16 | layout | gradient |\n|---|---|---|---|---|\n";
  for (size_t i = 0; i < ir::kNumOps; ++i) {
    const ir::OpDef &d = ir::opDef(static_cast<ir::OpKind>(i));
    std::string layout(ir::layoutRuleName(d.layout.kind));
    if (d.layout.kind == ir::LayoutRule::ChannelAxis)
      layout += "(" + std::to_string(d.layout.channelAxis) + ")";
    // "*": the op refines its policy per node (Pow by 2 is allowed).
    std::string fp16 = std::string(ir::fp16PolicyName(d.fp16)) + (d.fp16Refine ? "*" : "");
    const char *grad = d.gradient ? "rule" : d.decompose ? "decomposed" : "-";
    // "*": some nodes of the op are opaque (BatchNormalization in training mode).
    // "legalized": no kernel of its own; the `legalize` pass writes its decomposition,
    // whose ops fuse. "legalized*": some nodes have a kernel (OpDef::hasKernel), shown
    // with their fusibility.
    std::string fusion = d.legalize && !d.hasKernel ? std::string("legalized")
                                                    : ir::describeFusibility(d.fusibility) +
                                                          (d.fusibility.opaqueWhen ? "*" : "") +
                                                          (d.legalize ? ", else legalized" : "");
    if (md)
      os << "| " << d.name << " | " << fusion << " | " << fp16 << " | " << layout << " | " << grad
         << " |\n";
    else
      os << llvm::left_justify(d.name, 24) << llvm::left_justify(fusion, 30)
         << llvm::left_justify(fp16, 8) << llvm::left_justify(layout, 20) << grad << "\n";
  }
  return 0;
}

} // namespace dlc::tool

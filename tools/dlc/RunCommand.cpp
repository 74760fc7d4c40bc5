//===- RunCommand.cpp - `dlc run` and `dlc inspect` ------------------------===//
#include "Args.h"
#include "Commands.h"

#include "dlc/frontend/OnnxImporter.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <cstring>
#include <map>

namespace dlc::tool {

namespace {

llvm::Error toError(const Status &s) { return ir::makeError(s.message()); }

/// Reads an input file: .npy, or a serialized ONNX TensorProto (.pb).
llvm::Expected<rt::HostTensor> readInputFile(const std::string &path) {
  if (llvm::StringRef(path).endswith(".pb")) {
    auto t = frontend::readTensorProtoFile(path);
    if (!t)
      return t.takeError();
    rt::HostTensor h;
    h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t->second.dtype()));
    h.shape = t->second.shape();
    const uint8_t *p = static_cast<const uint8_t *>(t->second.raw());
    h.data.assign(p, p + t->second.byteSize());
    return h;
  }
  auto r = rt::readNpy(path);
  if (!r)
    return toError(r.status());
  return std::move(*r);
}

std::string sanitize(const std::string &name) {
  std::string s;
  for (char c : name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '_';
  if (s.empty() || s == "." || s == "..")
    s = "output";
  return s;
}

double elementAsDouble(const rt::HostTensor &t, int64_t i) {
  const uint8_t *p = t.data.data();
  auto rd = [&](auto v) {
    std::memcpy(&v, p + i * sizeof(v), sizeof(v));
    return static_cast<double>(v);
  };
  switch (t.dtype) {
  case pkg::DType::F32: return rd(float{});
  case pkg::DType::F64: return rd(double{});
  case pkg::DType::I64: return rd(int64_t{});
  case pkg::DType::I32: return rd(int32_t{});
  case pkg::DType::I16: return rd(int16_t{});
  case pkg::DType::I8: return rd(int8_t{});
  case pkg::DType::U8:
  case pkg::DType::Bool: return rd(uint8_t{});
  case pkg::DType::U16: return rd(uint16_t{});
  case pkg::DType::U32: return rd(uint32_t{});
  case pkg::DType::U64: return rd(uint64_t{});
  case pkg::DType::F16: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return ir::halfToFloat(h);
  }
  case pkg::DType::BF16: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return ir::bf16ToFloat(h);
  }
  }
  return 0;
}

void printTensorSummary(const std::string &name, const rt::HostTensor &t) {
  llvm::outs() << name << ": " << pkg::dtypeName(t.dtype) << "[";
  for (size_t i = 0; i < t.shape.size(); ++i)
    llvm::outs() << (i ? "," : "") << t.shape[i];
  llvm::outs() << "] [";
  int64_t n = t.numElements(), shown = std::min<int64_t>(n, 8);
  for (int64_t i = 0; i < shown; ++i)
    llvm::outs() << (i ? ", " : "") << llvm::format("%.6g", elementAsDouble(t, i));
  llvm::outs() << (n > shown ? ", ...]" : "]");
  if (n > 1 && (t.dtype == pkg::DType::F32 || t.dtype == pkg::DType::F16 || t.dtype == pkg::DType::F64)) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (elementAsDouble(t, i) > elementAsDouble(t, best))
        best = i;
    llvm::outs() << "  argmax=" << best;
  }
  llvm::outs() << "\n";
}

llvm::Expected<rt::DeviceKind> parseDevice(const std::string &s) {
  if (s == "auto")
    return rt::DeviceKind::Auto;
  if (s == "cuda")
    return rt::DeviceKind::Cuda;
  if (s == "emu")
    return rt::DeviceKind::Emu;
  return ir::errorf("--device must be auto, cuda or emu, got '{0}'", s);
}

} // namespace

int runRun(const std::vector<std::string> &argv) {
  ArgParser parser("run", "PACKAGE.dlc [--input] NAME=FILE ... [options]",
                   "Runs a compiled package on the GPU (if present) or the emu backend and writes one\n"
                   "NAME.npy per output. Inputs are .npy files or serialized ONNX tensors (.pb).",
                   {{"input", 'i', true, true, "NAME=FILE", "An input (NAME= may be left out for one input)"},
                    {"output-dir", 0, true, false, "DIR", "Where to write the outputs (default: .)"},
                    {"device", 0, true, false, "auto|cuda|emu", "Backend (default auto)"},
                    {"threads", 0, true, false, "N", "Worker threads of the emu backend"},
                    {"quiet", 'q', false, false, "", "Do not print output summaries"}});
  auto args = parser.parse(argv);
  if (!args) {
    reportError(args.takeError());
    return 2;
  }
  if (args->has("help")) {
    parser.printHelp(llvm::outs());
    return 0;
  }
  if (args->positionals().empty()) {
    reportError(ir::makeError("run: expected a package file"));
    return 2;
  }
  auto device = parseDevice(args->getOr("device", "auto"));
  if (!device) {
    reportError(device.takeError());
    return 2;
  }
  auto pf = pkg::PackageFile::load(args->positionals()[0]);
  if (!pf) {
    reportError(toError(pf.status()));
    return 1;
  }
  rt::SessionOptions so;
  so.device = *device;
  so.emuThreads = std::atoi(args->getOr("threads", "0").c_str());
  auto session = rt::Session::create(*pf, so);
  if (!session) {
    reportError(toError(session.status()));
    return 1;
  }
  const pkg::Package &meta = (*session)->package();
  bool quiet = args->has("quiet");
  if (!quiet)
    llvm::errs() << "dlc: running on " << (*session)->backendDescription() << "\n";
  // Inputs: --input NAME=FILE, or positional NAME=FILE / FILE after the package.
  std::vector<std::string> inputSpecs = args->getAll("input");
  inputSpecs.insert(inputSpecs.end(), args->positionals().begin() + 1, args->positionals().end());
  for (const std::string &spec : inputSpecs) {
    std::string name, file;
    size_t eq = spec.find('=');
    if (eq == std::string::npos) {
      if (!meta.inputs() || meta.inputs()->size() != 1) {
        reportError(ir::errorf("run: --input {0}: give NAME=FILE (the model has {1} inputs)", spec,
                               meta.inputs() ? meta.inputs()->size() : 0));
        return 2;
      }
      name = meta.inputs()->Get(0)->name()->str();
      file = spec;
    } else {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    }
    auto t = readInputFile(file);
    if (!t) {
      reportError(t.takeError());
      return 1;
    }
    if (Status s = (*session)->setInput(name, *t)) {
      reportError(ir::errorf("{0}: {1}", file, s.message()));
      return 1;
    }
  }
  if (Status s = (*session)->run()) {
    reportError(toError(s));
    return 1;
  }
  std::string dir = args->getOr("output-dir", ".");
  if (auto ec = llvm::sys::fs::create_directories(dir)) {
    reportError(ir::errorf("cannot create '{0}': {1}", dir, ec.message()));
    return 1;
  }
  if (meta.outputs())
    for (const pkg::TensorInfo *o : *meta.outputs()) {
      auto t = (*session)->getOutput(o->name()->str());
      if (!t) {
        reportError(toError(t.status()));
        return 1;
      }
      std::string path = dir + "/" + sanitize(o->name()->str()) + ".npy";
      if (Status s = rt::writeNpy(path, *t)) {
        reportError(toError(s));
        return 1;
      }
      if (!quiet)
        printTensorSummary(o->name()->str(), *t);
    }
  return 0;
}

int runInspect(const std::vector<std::string> &argv) {
  ArgParser parser("inspect", "PACKAGE.dlc [--json]",
                   "Lists the kernels (launch shape, registers, spills and shared memory per\n"
                   "architecture), library calls and the memory plan of a package.",
                   {{"json", 0, false, false, "", "Machine-readable output"}});
  auto args = parser.parse(argv);
  if (!args) {
    reportError(args.takeError());
    return 2;
  }
  if (args->has("help")) {
    parser.printHelp(llvm::outs());
    return 0;
  }
  if (args->positionals().size() != 1) {
    reportError(ir::makeError("inspect: expected exactly one package file"));
    return 2;
  }
  auto pf = pkg::PackageFile::load(args->positionals()[0]);
  if (!pf) {
    reportError(toError(pf.status()));
    return 1;
  }
  const pkg::Package &m = (*pf)->meta();
  size_t nk = m.kernels() ? m.kernels()->size() : 0;
  std::vector<const pkg::Launch *> firstLaunch(nk, nullptr);
  std::vector<int> launchCount(nk, 0);
  size_t launches = 0, gemms = 0, copies = 0;
  if (m.steps())
    for (const pkg::Step *s : *m.steps()) {
      if (const pkg::Launch *l = s->op_as_Launch()) {
        ++launches;
        ++launchCount[l->kernel()];
        if (!firstLaunch[l->kernel()])
          firstLaunch[l->kernel()] = l;
      } else if (s->op_type() == pkg::StepKind::Gemm) {
        ++gemms;
      } else {
        ++copies;
      }
    }
  if (args->has("json")) {
    llvm::json::Array kernels;
    for (size_t i = 0; i < nk; ++i) {
      const pkg::Kernel *k = m.kernels()->Get(i);
      const pkg::Launch *l = firstLaunch[i];
      llvm::json::Object regs, spills, smem;
      if (k->resources())
        for (const pkg::ArchResources *r : *k->resources()) {
          regs[r->arch()->str()] = r->registers();
          spills[r->arch()->str()] = r->spill_stores() + r->spill_loads();
          smem[r->arch()->str()] = r->static_smem();
        }
      auto dim = [](const pkg::Dim3 *d) {
        return d ? llvm::json::Array{d->x(), d->y(), d->z()} : llvm::json::Array{};
      };
      kernels.push_back(llvm::json::Object{{"name", k->name()->str()},
                                           {"grid", l ? dim(l->grid()) : llvm::json::Array{}},
                                           {"block", l ? dim(l->block()) : llvm::json::Array{}},
                                           {"smem_bytes", l ? l->dynamic_smem() : 0},
                                           {"static_smem_bytes", std::move(smem)},
                                           {"registers", std::move(regs)},
                                           {"spills", std::move(spills)},
                                           {"launches", launchCount[i]},
                                           {"needs_sync", k->needs_sync()},
                                           {"flops", k->flops()}});
    }
    llvm::json::Array targets;
    if (m.modules())
      for (const pkg::Module *mod : *m.modules())
        targets.push_back(mod->target()->str());
    llvm::json::Object root{{"model", m.model() ? m.model()->str() : ""},
                            {"launches", static_cast<int64_t>(launches)},
                            {"library_calls", static_cast<int64_t>(gemms)},
                            {"other_steps", static_cast<int64_t>(copies)},
                            {"arena_bytes", static_cast<int64_t>(m.arena_bytes())},
                            {"weight_bytes", static_cast<int64_t>(m.weight_bytes())},
                            {"package_bytes", static_cast<int64_t>((*pf)->size())},
                            {"targets", std::move(targets)},
                            {"kernels", std::move(kernels)}};
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
    return 0;
  }
  llvm::outs() << "package " << (*pf)->name() << " (" << (*pf)->size() << " bytes), model '"
               << (m.model() ? m.model()->str() : "") << "'\n";
  llvm::outs() << "targets:";
  if (m.modules())
    for (const pkg::Module *mod : *m.modules())
      llvm::outs() << " " << mod->target()->str() << "(" << mod->data()->size() << " B)";
  llvm::outs() << "\nsteps: " << launches << " kernel launches, " << gemms << " library calls, " << copies
               << " copies/memsets\n";
  llvm::outs() << "memory: arena " << m.arena_bytes() << " bytes, weights " << m.weight_bytes() << " bytes\n";
  llvm::outs() << "kernels:\n";
  for (size_t i = 0; i < nk; ++i) {
    const pkg::Kernel *k = m.kernels()->Get(i);
    const pkg::Launch *l = firstLaunch[i];
    llvm::outs() << "  " << llvm::left_justify(k->name()->str(), 36);
    if (l)
      llvm::outs() << " grid " << l->grid()->x() << " block " << l->block()->x();
    if (launchCount[i] > 1)
      llvm::outs() << " x" << launchCount[i];
    if (k->resources())
      for (const pkg::ArchResources *r : *k->resources())
        llvm::outs() << "  " << r->arch()->str() << ":" << r->registers() << "r/" << (r->spill_stores() + r->spill_loads())
                     << "s/" << r->static_smem() << "B";
    llvm::outs() << "\n";
  }
  return 0;
}

} // namespace dlc::tool

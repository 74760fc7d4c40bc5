//===- Artifacts.cpp - --emit exe, lib and cuda ----------------------------===//
#include "dlc/codegen/Artifacts.h"

#include "EmbeddedHeaders.h"
#include "Toolchain.h"
#include "dlc/ir/Graph.h"
#include "dlc/package/ExeFormat.h"
#include "dlc/support/Files.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <map>
#include <sys/stat.h>

namespace dlc::codegen {

namespace {

using ir::errorf;

const char *embedded(const char *name) {
  for (const EmbeddedFile &f : embeddedHeaders())
    if (llvm::StringRef(f.name) == name)
      return f.contents;
  return "";
}

/// A stream into an AtomicFile; the first write error sticks.
class AtomicFileStream : public llvm::raw_ostream {
public:
  explicit AtomicFileStream(AtomicFile &f) : f_(f) { SetUnbuffered(); }
  Status status() const { return status_; }

private:
  void write_impl(const char *p, size_t n) override {
    if (!status_)
      status_ = f_.write(p, n);
    pos_ += n;
  }
  uint64_t current_pos() const override { return pos_; }
  AtomicFile &f_;
  Status status_;
  uint64_t pos_ = 0;
};

llvm::Error writeText(const std::string &path, llvm::StringRef text) {
  return writeFileAtomically(path, text);
}

} // namespace

llvm::Error writeFileAtomically(const std::string &path,
                                llvm::function_ref<llvm::Error(llvm::raw_ostream &)> body,
                                unsigned mode) {
  auto f = AtomicFile::open(path, mode);
  if (!f)
    return ir::makeError(f.status().message());
  {
    AtomicFileStream os(*f);
    if (auto e = body(os))
      return e;
    os.flush();
    if (Status s = os.status())
      return ir::makeError(s.message());
  }
  if (Status s = f->commit())
    return ir::makeError(s.message());
  return llvm::Error::success();
}

llvm::Error writeFileAtomically(const std::string &path, llvm::StringRef data) {
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    os << data;
    return llvm::Error::success();
  });
}

namespace {

std::string shapeText(const flatbuffers::Vector<int64_t> *shape) {
  std::string s = "[";
  for (size_t i = 0; shape && i < shape->size(); ++i)
    s += (i ? "," : "") + std::to_string(shape->Get(i));
  return s + "]";
}

const char *cType(pkg::DType t) {
  switch (t) {
  case pkg::DType::F32:
    return "float";
  case pkg::DType::F64:
    return "double";
  case pkg::DType::F16:
  case pkg::DType::BF16:
  case pkg::DType::U16:
    return "uint16_t";
  case pkg::DType::I64:
    return "int64_t";
  case pkg::DType::I32:
    return "int32_t";
  case pkg::DType::I16:
    return "int16_t";
  case pkg::DType::I8:
    return "int8_t";
  case pkg::DType::U8:
  case pkg::DType::Bool:
  case pkg::DType::F8E4M3:
  case pkg::DType::F8E5M2:
    return "uint8_t";
  case pkg::DType::U32:
    return "uint32_t";
  case pkg::DType::U64:
    return "uint64_t";
  }
  return "uint8_t";
}

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// Parameter names for the typed entry point: C identifiers, unique, not keywords.
struct Param {
  const pkg::TensorInfo *info;
  std::string name;
  bool output;
};

std::vector<Param> params(const pkg::Package &m) {
  static const llvm::StringSet<> reserved = {
      "auto",    "break",  "case",     "char",   "const",    "continue", "default",
      "do",      "double", "else",     "enum",   "extern",   "float",    "for",
      "goto",    "if",     "inline",   "int",    "long",     "register", "restrict",
      "return",  "short",  "signed",   "sizeof", "static",   "struct",   "switch",
      "typedef", "union",  "unsigned", "void",   "volatile", "while",    "bool",
      "class",   "delete", "new",      "this",   "template", "m",        "model"};
  std::vector<Param> ps;
  llvm::StringSet<> used;
  auto add = [&](const pkg::TensorInfo *t, bool out) {
    std::string base = cIdentifier(t->name()->str()), n = base;
    if (reserved.contains(n))
      n = base = n + "_";
    for (int k = 2; used.contains(n); ++k)
      n = base + "_" + std::to_string(k);
    used.insert(n);
    ps.push_back({t, n, out});
  };
  if (m.inputs())
    for (const pkg::TensorInfo *t : *m.inputs())
      add(t, false);
  if (m.outputs())
    for (const pkg::TensorInfo *t : *m.outputs())
      add(t, true);
  return ps;
}

/// A double-quoted C string literal.
std::string cString(const std::string &s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      r += '\\', r += c;
    else if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126)
      r += llvm::formatv("\\{0:o3}", static_cast<unsigned>(static_cast<unsigned char>(c))).str();
    else
      r += c;
  }
  return r + "\"";
}

int runTool(const std::vector<std::string> &args, const std::string &logPath, std::string &log) {
  std::vector<llvm::StringRef> refs(args.begin(), args.end());
  llvm::Optional<llvm::StringRef> redirects[] = {llvm::None, llvm::StringRef(logPath),
                                                 llvm::StringRef(logPath)};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(args[0], refs, llvm::None, redirects, 0, 0, &err);
  if (auto buf = llvm::MemoryBuffer::getFile(logPath))
    log = (*buf)->getBuffer().str();
  if (!err.empty())
    log += err;
  return rc;
}

} // namespace

std::string cIdentifier(const std::string &s) {
  std::string r;
  for (char c : s)
    r += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (r.empty() || std::isdigit(static_cast<unsigned char>(r[0])))
    r = "t_" + r;
  return r;
}

std::string formatSchedule(const pkg::PackageFile &pf) {
  const pkg::Package &m = pf.meta();
  std::string out;
  llvm::raw_string_ostream os(out);
  size_t nb = m.buffers() ? m.buffers()->size() : 0;
  std::vector<std::string> names(nb);
  auto label = [&](const flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>> *v,
                   const char *what) {
    if (v)
      for (const pkg::TensorInfo *t : *v)
        if (t->buffer() < nb && names[t->buffer()].empty())
          names[t->buffer()] = std::string(what) + " '" + t->name()->str() + "' " +
                               pkg::dtypeName(t->dtype()) + shapeText(t->shape());
  };
  label(m.inputs(), "input");
  label(m.outputs(), "output");
  if (m.weights())
    for (const pkg::Weight *w : *m.weights())
      if (w->buffer() < nb && names[w->buffer()].empty())
        names[w->buffer()] = "weight '" + w->name()->str() + "'";
  os << "// Host schedule of model '" << (m.model() ? m.model()->str() : "")
     << "', generated by dlc.\n"
     << "// The runtime executes these steps in order on one stream. bN+OFF is byte OFF of buffer "
        "N.\n"
     << "// arena " << m.arena_bytes() << " bytes (per session), weights " << m.weight_bytes()
     << " bytes (uploaded once per model and device)\n\nbuffers:\n";
  for (size_t i = 0; i < nb; ++i) {
    const pkg::Buffer *b = m.buffers()->Get(i);
    os << llvm::formatv("  b{0,-4} {1,-7} +{2,-10} {3,10} B  {4}\n", i,
                        b->region() == pkg::Region::Weights ? "weights" : "arena", b->offset(),
                        b->bytes(), names[i].empty() ? "temporary" : names[i]);
  }
  auto ref = [](const pkg::BufRef *r) {
    return r ? llvm::formatv("b{0}+{1}", r->buffer(), r->offset()).str() : std::string("?");
  };
  auto dim = [](const pkg::Dim3 *d) {
    return d ? llvm::formatv("({0},{1},{2})", d->x(), d->y(), d->z()).str() : std::string("()");
  };
  bool evaluation = m.eval_outputs() && m.eval_outputs()->size();
  os << "\nsteps:"
     << (evaluation ? " (a training package: [eval] steps run only to evaluate, [both] in both)"
                    : "")
     << "\n";
  size_t i = 0;
  if (m.steps())
    for (const pkg::Step *s : *m.steps()) {
      os << llvm::formatv("  {0,4}  ", i++);
      if (evaluation && s->schedules() != 1)
        os << (s->schedules() == 2 ? "[eval] " : "[both] ");
      // Alternatives: 1 where the device holds the persistent kernel's grid, else 2.
      if (s->alt_group())
        os << "[alt " << s->alt_group() << (s->alt() == 1 ? ": persistent] " : ": per-step] ");
      if (const pkg::Launch *l = s->op_as_Launch()) {
        const pkg::Kernel *k = m.kernels() && l->kernel() < m.kernels()->size()
                                   ? m.kernels()->Get(l->kernel())
                                   : nullptr;
        os << "launch " << (k ? k->name()->str() : "?") << "<<<" << dim(l->grid()) << ", "
           << dim(l->block());
        if (l->dynamic_smem())
          os << ", " << l->dynamic_smem();
        // The parameter buffer as 8-byte words: device addresses by buffer, the rest as integers.
        os << ">>>(";
        size_t n = l->params() ? l->params()->size() : 0;
        for (size_t off = 0; off < n; off += 8) {
          os << (off ? ", " : "");
          const pkg::Reloc *reloc = nullptr;
          if (l->relocs())
            for (const pkg::Reloc *r : *l->relocs())
              if (r->offset() == off)
                reloc = r;
          if (reloc) {
            os << ref(&reloc->ref());
            continue;
          }
          int64_t word = 0;
          std::memcpy(&word, l->params()->data() + off, std::min<size_t>(8, n - off));
          os << word;
        }
        os << ")";
      } else if (const pkg::Gemm *gm = s->op_as_Gemm()) {
        os << llvm::formatv("gemm {0} {1}{2} m={3} n={4} k={5}", pkg::dtypeName(gm->dtype()),
                            gm->trans_a() ? "T" : "N", gm->trans_b() ? "T" : "N", gm->m(), gm->n(),
                            gm->k());
        if (gm->batch() != 1)
          os << llvm::formatv(" batch={0} strides=({1},{2},{3})", gm->batch(), gm->stride_a(),
                              gm->stride_b(), gm->stride_c());
        os << llvm::formatv(" A={0} lda={1} B={2} ldb={3} C={4} ldc={5} ", ref(gm->a()), gm->lda(),
                            ref(gm->b()), gm->ldb(), ref(gm->c()), gm->ldc())
           << " alpha=" << g(gm->alpha()) << " beta=" << g(gm->beta());
        if (gm->c_in())
          os << " Cin=" << ref(gm->c_in());
        if (gm->bias())
          os << " bias=" << ref(gm->bias());
        if (gm->activation() != pkg::GemmActivation::None)
          os << " act=" << pkg::EnumNameGemmActivation(gm->activation());
      } else if (const pkg::Copy *c = s->op_as_Copy()) {
        os << "copy " << c->bytes() << " B " << ref(c->src()) << " -> " << ref(c->dst());
      } else if (const pkg::Memset *ms = s->op_as_Memset()) {
        os << "memset " << ms->bytes() << " B " << ref(ms->dst()) << " = " << int(ms->value());
      } else if (const pkg::Collective *ar = s->op_as_Collective()) {
        if (ar->op() == pkg::CollectiveOp::AllReduce)
          os << "all-reduce bucket " << ar->bucket() << ": " << ar->sources()->size()
             << " gradients, " << ar->count() << " x " << pkg::dtypeName(ar->dtype()) << " in "
             << ref(ar->staging()) << " (mean over the ranks, beside the steps up to its wait)";
        else
          os << pkg::EnumNameCollectiveOp(ar->op()) << " " << ar->bucket() << ": " << ar->count()
             << " x " << pkg::dtypeName(ar->dtype()) << " in " << ref(ar->staging()) << " -> "
             << ref(ar->output()) << " over " << ar->ranks() << " ranks";
      } else if (const pkg::CollectiveWait *w = s->op_as_CollectiveWait()) {
        os << "wait for " << (w->output() ? "collective " : "all-reduce bucket ") << w->bucket()
           << " " << ref(w->output() ? w->output() : w->staging());
      }
      if (s->archs() && s->archs()->size()) {
        os << "  [";
        for (size_t a = 0; a < s->archs()->size(); ++a)
          os << (a ? "," : "") << s->archs()->Get(a)->str();
        os << " only]";
      }
      if (s->node() && s->node()->size())
        os << "    // " << s->node()->str();
      os << "\n";
    }
  return os.str();
}

llvm::Error writeExecutable(llvm::ArrayRef<uint8_t> package, const std::string &stubPath,
                            const std::string &out) {
  auto stub =
      llvm::MemoryBuffer::getFile(stubPath, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!stub)
    return errorf("cannot read the executable stub '{0}': {1}", stubPath,
                  stub.getError().message());
  llvm::StringRef s = (*stub)->getBuffer();
  if (s.size() >= sizeof(cli::ExeFooter)) {
    cli::ExeFooter f;
    std::memcpy(&f, s.data() + s.size() - sizeof f, sizeof f);
    if (cli::isExeFooter(f))
      return errorf("'{0}' already has a package appended; it is not the stub", stubPath);
  }
  return writeFileAtomically(
      out,
      [&](llvm::raw_ostream &os) {
        os << s;
        uint64_t offset =
            (s.size() + cli::kExePackageAlign - 1) / cli::kExePackageAlign * cli::kExePackageAlign;
        os.write_zeros(offset - s.size());
        os.write(reinterpret_cast<const char *>(package.data()), package.size());
        cli::ExeFooter f{};
        std::memcpy(f.magic, cli::kExeMagic, 8);
        f.packageOffset = offset;
        f.packageSize = package.size();
        f.version = cli::kExeFooterVersion;
        os.write(reinterpret_cast<const char *>(&f), sizeof f);
        return llvm::Error::success();
      },
      0755);
}

std::string libraryHeader(const pkg::Package &m, const std::string &name) {
  std::string upper = llvm::StringRef(name).upper();
  std::vector<Param> ps = params(m);
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "/* " << name << ".h: model '" << (m.model() ? m.model()->str() : "")
     << "' compiled by dlc. Generated; do not edit.\n"
     << " *\n"
     << " * Link with lib" << name << ".so (the dlc runtime and the model are inside it).\n"
     << " * A " << name << " handle is used by one thread at a time; create one per thread.\n"
     << " * Every function that can fail returns 0 on success, else non-zero, and\n"
     << " * " << name << "_last_error() gives the calling thread's last message. */\n"
     << "#ifndef " << upper << "_DLC_H\n#define " << upper << "_DLC_H\n\n#include <stdint.h>\n\n"
     << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"
     << "typedef struct " << name << " " << name << ";\n\n";
  for (const Param &p : ps) {
    std::string macro = upper + "_" + llvm::StringRef(p.name).upper();
    uint64_t elems = pkg::tensorBytes(*p.info) / pkg::dtypeSize(p.info->dtype());
    os << "/* " << (p.output ? "output" : "input") << " '" << p.info->name()->str()
       << "': " << pkg::dtypeName(p.info->dtype()) << shapeText(p.info->shape()) << " */\n"
       << "#define " << macro << "_ELEMENTS " << elems << "\n";
  }
  os << "\n/* Loads the model on `device`: \"auto\" or NULL (the GPU if a CUDA driver and device\n"
     << " * are present, else the emu backend), \"cuda\" or \"emu\". NULL on failure. */\n"
     << name << " *" << name << "_create(const char *device);\n"
     << "void " << name << "_free(" << name << " *model);\n"
     << "/* Runs one inference: reads the inputs, writes the outputs (dense, row-major). */\n"
     << "int " << name << "_run(" << name << " *model";
  for (const Param &p : ps)
    os << ",\n    " << (p.output ? "" : "const ") << cType(p.info->dtype()) << " *" << p.name
       << " /* " << pkg::dtypeName(p.info->dtype()) << shapeText(p.info->shape()) << " */";
  os << ");\n"
     << "/* \"cuda (...)\" or \"emu (...)\". */\n"
     << "const char *" << name << "_device(const " << name << " *model);\n"
     << "const char *" << name << "_last_error(void);\n\n"
     << "#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
  return os.str();
}

llvm::Error writeLibrary(const pkg::PackageFile &pf, const LibraryOptions &opts) {
  const pkg::Package &m = pf.meta();
  const std::string &name = opts.name;
  if (name.empty() || cIdentifier(name) != name)
    return errorf("--name '{0}' is not a C identifier", name);
  ToolchainOptions to;
  to.hostCompiler = opts.hostCompiler;
  std::string cxx = hostCompilerPath(to);
  if (cxx.empty())
    return errorf("--emit lib needs a host C++ compiler (set DLC_HOST_CXX or CXX)");
  if (!llvm::sys::fs::exists(opts.runtimeArchive))
    return errorf("the runtime archive '{0}' does not exist", opts.runtimeArchive);

  llvm::SmallString<128> dir;
  if (auto ec = llvm::sys::fs::createUniqueDirectory("dlc-lib", dir))
    return errorf("cannot create a temporary directory: {0}", ec.message());
  auto cleanup = llvm::make_scope_exit([&] { llvm::sys::fs::remove_directories(dir); });
  std::string d(dir);
  std::string header = libraryHeader(m, name);
  std::string sym = "dlc_package_" + name;
  std::vector<Param> ps = params(m);

  std::string src;
  llvm::raw_string_ostream os(src);
  os << "// Generated by dlc: the typed entry points of " << name << ".h over the runtime C API.\n"
     << "#include \"runtime.h\"\n#include \"" << name
     << ".h\"\n#include <cstring>\n#include <new>\n#include <string>\n\n"
     << "extern \"C\" const unsigned char " << sym << "[], " << sym << "_end[];\n"
     << "#define API extern \"C\" __attribute__((visibility(\"default\")))\n\n"
     << "struct " << name << " { dlc_model *model = nullptr; dlc_session *session = nullptr; };\n\n"
     << "namespace {\nthread_local std::string lastError;\n"
     << "int fail(const std::string &msg) { lastError = msg; return 1; }\n"
     << "int failed(dlc_status s) { if (s == DLC_OK) return 0; lastError = dlc_last_error(); "
        "return 1; }\n"
     << "} // namespace\n\n"
     << "API const char *" << name << "_last_error(void) { return lastError.c_str(); }\n\n"
     << "API " << name << " *" << name << "_create(const char *device) {\n"
     << "  dlc_session_options o;\n  std::memset(&o, 0, sizeof o);\n"
     << "  if (!device || !std::strcmp(device, \"auto\")) o.device = DLC_DEVICE_AUTO;\n"
     << "  else if (!std::strcmp(device, \"cuda\")) o.device = DLC_DEVICE_CUDA;\n"
     << "  else if (!std::strcmp(device, \"emu\")) o.device = DLC_DEVICE_EMU;\n"
     << "  else { fail(std::string(\"" << name
     << "_create: device must be auto, cuda or emu, got '\") + device + \"'\"); return nullptr; }\n"
     << "  " << name << " *m = new (std::nothrow) " << name << ";\n"
     << "  if (!m) { fail(\"out of memory\"); return nullptr; }\n"
     << "  if (failed(dlc_model_load_static(" << sym << ", size_t(" << sym << "_end - " << sym
     << "), &m->model)) ||\n"
     << "      failed(dlc_session_create(m->model, &o, &m->session))) {\n"
     << "    " << name << "_free(m);\n    return nullptr;\n  }\n  return m;\n}\n\n"
     << "API void " << name << "_free(" << name << " *m) {\n  if (!m) return;\n"
     << "  dlc_session_free(m->session);\n  dlc_model_free(m->model);\n  delete m;\n}\n\n"
     << "API const char *" << name << "_device(const " << name
     << " *m) { return m ? dlc_session_device(m->session) : \"\"; }\n\n"
     << "API int " << name << "_run(" << name << " *m";
  for (const Param &p : ps)
    os << ", " << (p.output ? "" : "const ") << cType(p.info->dtype()) << " *" << p.name;
  os << ") {\n  if (!m) return fail(\"" << name << "_run: null model handle\");\n";
  for (const Param &p : ps)
    os << "  if (!" << p.name << ") return fail(\"" << name
       << "_run: " << (p.output ? "output" : "input") << " '" << p.name << "' is NULL\");\n";
  for (const Param &p : ps)
    if (!p.output)
      os << "  if (failed(dlc_session_set_input(m->session, " << cString(p.info->name()->str())
         << ", " << p.name << ", " << pkg::tensorBytes(*p.info) << "u))) return 1;\n";
  os << "  if (failed(dlc_session_run(m->session))) return 1;\n";
  for (const Param &p : ps)
    if (p.output)
      os << "  if (failed(dlc_session_get_output(m->session, " << cString(p.info->name()->str())
         << ", " << p.name << ", " << pkg::tensorBytes(*p.info) << "u))) return 1;\n";
  os << "  return 0;\n}\n";
  os.flush();

  // The package, linked in as read-only data (256-byte aligned: used in place).
  std::string pkgPath = d + "/package.dlc";
  if (auto e = writeFileAtomically(pkgPath, [&](llvm::raw_ostream &o) {
        o.write(reinterpret_cast<const char *>(pf.data()), pf.size());
        return llvm::Error::success();
      }))
    return e;
  std::string asmText = ".section .rodata." + sym + ",\"a\",@progbits\n.balign 256\n.globl " + sym +
                        "\n.hidden " + sym + "\n" + sym + ":\n.incbin \"" + pkgPath +
                        "\"\n.globl " + sym + "_end\n.hidden " + sym + "_end\n" + sym +
                        "_end:\n.section .note.GNU-stack,\"\",@progbits\n";
  for (auto [file, text] : {std::pair<std::string, std::string>{"runtime.h", embedded("runtime.h")},
                            {name + ".h", header},
                            {"entry.cpp", src},
                            {"package.S", asmText}})
    if (auto e = writeText(d + "/" + file, text))
      return e;
  std::string tmpLib = d + "/lib.so", log;
  std::vector<std::string> args = {cxx,
                                   "-std=c++17",
                                   "-O2",
                                   "-fPIC",
                                   "-shared",
                                   "-fvisibility=hidden",
                                   "-I" + d,
                                   d + "/entry.cpp",
                                   d + "/package.S",
                                   opts.runtimeArchive,
                                   "-Wl,--exclude-libs,ALL",
                                   "-Wl,-soname," +
                                       llvm::sys::path::filename(opts.libraryPath).str(),
                                   "-static-libstdc++",
                                   "-static-libgcc",
                                   "-ldl",
                                   "-pthread",
                                   "-o",
                                   tmpLib};
  if (int rc = runTool(args, d + "/log.txt", log); rc != 0)
    return errorf("linking {0} failed (exit {1}):\n{2}", opts.libraryPath, rc, log);
  auto lib = llvm::MemoryBuffer::getFile(tmpLib, false, false);
  if (!lib)
    return errorf("cannot read the linked library: {0}", lib.getError().message());
  if (auto e = writeText(opts.headerPath, header))
    return e;
  return writeFileAtomically(
      opts.libraryPath,
      [&](llvm::raw_ostream &o) {
        o << (*lib)->getBuffer();
        return llvm::Error::success();
      },
      0755);
}

llvm::Error writeCudaDirectory(const pkg::PackageFile &pf, const std::string &dir) {
  const pkg::Package &m = pf.meta();
  if (!m.cuda_source() || m.cuda_source()->size() == 0)
    return errorf("the package has no CUDA source");
  if (auto ec = llvm::sys::fs::create_directories(dir))
    return errorf("cannot create '{0}': {1}", dir, ec.message());
  llvm::StringRef source(reinterpret_cast<const char *>(pf.section(m.cuda_source())),
                         m.cuda_source()->size());
  std::string readme =
      "Generated by dlc compile --emit cuda for model '" +
      (m.model() ? m.model()->str() : std::string()) +
      "'.\n\n"
      "  kernels.cu      every kernel of the model: the generated functors and the explicit\n"
      "                  instantiations of the kernel library's templates (one translation unit)\n"
      "  dlc_*.cuh, dlc_params.h, Philox.h  the kernel library the instantiations include\n"
      "  schedule.txt    the host schedule: buffers, and each kernel launch, GEMM (cuBLASLt) and "
      "copy\n\n"
      "Compile as dlc does (NVRTC), or with nvcc, e.g.:\n"
      "  nvcc -std=c++17 -arch=sm_80 -cubin -I. kernels.cu -o kernels.sm_80.cubin\n";
  std::vector<std::pair<std::string, std::string>> files = {
      {"kernels.cu", source.str()}, {"schedule.txt", formatSchedule(pf)}, {"README.txt", readme}};
  // Every embedded header but the emu prelude and the runtime's own ABI headers.
  for (const EmbeddedFile &h : embeddedHeaders())
    if (llvm::StringRef(h.name) != "dlc_emu_prelude.h" && llvm::StringRef(h.name) != "EmuAbi.h" &&
        llvm::StringRef(h.name) != "runtime.h")
      files.push_back({h.name, h.contents});
  for (const auto &[file, text] : files)
    if (auto e = writeText(dir + "/" + file, text))
      return e;
  return llvm::Error::success();
}

} // namespace dlc::codegen

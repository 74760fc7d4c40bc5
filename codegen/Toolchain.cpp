//===- Toolchain.cpp - NVRTC, nvJitLink, the host compiler and their cache ===//
//
// Every compilation is cached on disk under hash(tool version, options, input);
// a cache entry is written through a temporary file and a rename, so concurrent
// compilers never see a partial entry.
//===----------------------------------------------------------------------===//
#include "Toolchain.h"

#include "EmbeddedHeaders.h"
#include "dlc/ir/Graph.h"
#include "dlc/support/Files.h"
#include "dlc/support/HostKey.h"
#include "dlc/support/Sha256.h"

#include "llvm/ADT/Optional.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA1.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <regex>
#include <sstream>

namespace dlc::codegen {

using ir::errorf;
using ir::makeError;

namespace {

std::string cacheRoot(const ToolchainOptions &o) {
  if (!o.cacheDir.empty())
    return o.cacheDir;
  if (const char *d = std::getenv("DLC_CACHE_DIR"))
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"))
    return std::string(x) + "/dlc";
  if (const char *h = std::getenv("HOME"))
    return std::string(h) + "/.cache/dlc";
  return "/tmp/dlc-cache";
}

std::string hashKey(const std::vector<std::string> &parts) {
  llvm::SHA1 sha;
  for (const std::string &p : parts) {
    sha.update(p);
    sha.update(llvm::StringRef("\0", 1));
  }
  auto digest = sha.final();
  std::string hex;
  for (uint8_t b : digest) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", b);
    hex += buf;
  }
  return hex;
}

bool readFile(const std::string &path, std::vector<uint8_t> &out) {
  auto bytes = readRegularFile(path);
  if (!bytes.ok())
    return false;
  out = std::move(*bytes);
  return true;
}

/// The key that authenticates cache entries: this user's host-code key (the cache
/// holds host code, the emu objects). Without one, nothing is cached.
const HostKey *cacheMacKey() {
  static const std::optional<HostKey> key = []() -> std::optional<HostKey> {
    auto k = loadHostKey(/*create=*/true);
    return k.ok() ? std::optional<HostKey>(*k) : std::nullopt;
  }();
  return key ? &*key : nullptr;
}

/// HMAC-SHA256 of an entry's file name and contents.
Digest entryMac(const HostKey &key, const std::string &path, const void *data, size_t n) {
  HmacSha256 mac(key.data(), key.size());
  static const char kLabel[] = "dlc kernel cache entry"; // not a package signature
  mac.update(kLabel, sizeof kLabel);
  std::string name = llvm::sys::path::filename(path).str();
  mac.update(name.data(), name.size() + 1);
  mac.update(data, n);
  return mac.finish();
}

/// A cache entry, written whole or not at all (a failure only costs the entry), ending
/// in its MAC: an entry someone else wrote or damaged is a miss, not code that goes
/// into the next package.
void writeCacheFile(const std::string &path, const void *data, size_t n) {
  const HostKey *key = cacheMacKey();
  if (!key)
    return;
  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  llvm::sys::fs::create_directories(dir);
  auto f = AtomicFile::open(path);
  if (!f)
    return;
  Digest mac = entryMac(*key, path, data, n);
  if (f->write(data, n) || f->write(mac.data(), mac.size()))
    return;
  (void)f->commit();
}

/// Reads a cache entry and checks its MAC.
bool readCacheFile(const std::string &path, std::vector<uint8_t> &out) {
  const HostKey *key = cacheMacKey();
  if (!key || !readFile(path, out) || out.size() < sizeof(Digest))
    return false;
  size_t n = out.size() - sizeof(Digest);
  Digest stored;
  std::memcpy(stored.data(), out.data() + n, stored.size());
  if (!digestsEqual(stored, entryMac(*key, path, out.data(), n)))
    return false;
  out.resize(n);
  return true;
}

std::string cachePath(const ToolchainOptions &o, const std::string &key) {
  return cacheRoot(o) + "/" + key.substr(0, 2) + "/" + key;
}

/// Cache lookup: the files `key`.<ext> for each extension, all or nothing.
bool cacheGet(const ToolchainOptions &o, const std::string &key,
              const std::vector<std::string> &exts, std::vector<std::vector<uint8_t>> &parts) {
  if (!o.useCache)
    return false;
  parts.assign(exts.size(), {});
  for (size_t i = 0; i < exts.size(); ++i)
    if (!readCacheFile(cachePath(o, key) + "." + exts[i], parts[i]))
      return false;
  return true;
}

/// Cache store; the first extension is written last, so a reader that finds it finds all.
void cachePut(const ToolchainOptions &o, const std::string &key,
              const std::vector<std::string> &exts, const std::vector<const std::string *> &parts) {
  if (!o.useCache)
    return;
  for (size_t i = exts.size(); i-- > 0;)
    writeCacheFile(cachePath(o, key) + "." + exts[i], parts[i]->data(), parts[i]->size());
}

std::string str(const std::vector<uint8_t> &v) {
  return std::string(v.begin(), v.end());
}

void dumpSource(const ToolchainOptions &o, const std::string &source) {
  if (o.failureDumpPath.empty())
    return;
  (void)writeFileAtomically(o.failureDumpPath, source.data(), source.size());
}

std::string nvrtcVersionString() {
  uint32_t v = nvrtcVersionNumber();
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string nvJitLinkVersionString() {
  unsigned major = 0, minor = 0;
  ::nvJitLinkVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string joinLines(const std::vector<std::string> &v) {
  std::string s;
  for (const std::string &x : v)
    s += x + "\n";
  return s;
}

} // namespace

std::map<std::string, KernelResources> parsePtxasLog(const std::string &log) {
  std::map<std::string, KernelResources> r;
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex props(R"(Function properties for ([A-Za-z0-9_]+))");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::string current;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry) || std::regex_search(line, m, props)) {
      current = m[1];
      r[current];
    } else if (!current.empty() && std::regex_search(line, m, frame)) {
      r[current].stackBytes = std::stoi(m[1]);
      r[current].spillStores = std::stoi(m[2]);
      r[current].spillLoads = std::stoi(m[3]);
    } else if (!current.empty() && std::regex_search(line, m, used)) {
      r[current].registers = std::stoi(m[1]);
      std::smatch s;
      if (std::regex_search(line, s, smem))
        r[current].sharedBytes = std::stoi(s[1]);
    }
  }
  return r;
}

llvm::Expected<PtxModule> compileToPtx(const std::string &source, const std::string &virtualArch,
                                       const std::vector<std::string> &nameExpressions,
                                       const ToolchainOptions &opts) {
  PtxModule m;
  m.virtualArch = virtualArch;
  std::vector<std::string> options = {"--gpu-architecture=" + virtualArch,
                                      "-I" + opts.cudaRoot + "/include", "--std=c++17"};
  std::vector<std::string> keyParts = {"nvrtc-ptx", nvrtcVersionString(), source,
                                       joinLines(nameExpressions)};
  keyParts.insert(keyParts.end(), options.begin(), options.end());
  for (const EmbeddedFile &h : embeddedHeaders())
    keyParts.push_back(h.contents);
  std::string key = hashKey(keyParts);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<uint8_t>> parts;
  if (cacheGet(opts, key, {"ptx", "log", "names"}, parts)) {
    m.ptx = str(parts[0]);
    m.log = str(parts[1]);
    std::string names = str(parts[2]);
    for (size_t pos = 0, nl; (nl = names.find('\n', pos)) != std::string::npos; pos = nl + 1)
      m.loweredNames.push_back(names.substr(pos, nl - pos));
    if (m.loweredNames.size() == nameExpressions.size()) {
      m.cached = true;
      return m;
    }
    m.loweredNames.clear();
  }
  std::vector<const char *> headerSrc, headerNames;
  for (const EmbeddedFile &h : embeddedHeaders()) {
    headerSrc.push_back(h.contents);
    headerNames.push_back(h.name);
  }
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, source.c_str(), "dlc_kernels.cu",
                         static_cast<int>(headerSrc.size()), headerSrc.data(),
                         headerNames.data()) != NVRTC_SUCCESS)
    return makeError("nvrtcCreateProgram failed");
  auto destroy = llvm::make_scope_exit([&] { nvrtcDestroyProgram(&prog); });
  for (const std::string &e : nameExpressions)
    nvrtcAddNameExpression(prog, e.c_str());
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvrtcResult res = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  m.log.resize(logSize);
  if (logSize)
    nvrtcGetProgramLog(prog, m.log.data());
  while (!m.log.empty() && m.log.back() == '\0')
    m.log.pop_back();
  if (res != NVRTC_SUCCESS) {
    dumpSource(opts, source);
    return errorf("NVRTC failed for {0} ({1}){2}:\n{3}", virtualArch, nvrtcGetErrorString(res),
                  opts.failureDumpPath.empty() ? "" : "; source written to " + opts.failureDumpPath,
                  m.log);
  }
  for (const std::string &e : nameExpressions) {
    const char *lowered = nullptr;
    if (nvrtcGetLoweredName(prog, e.c_str(), &lowered) != NVRTC_SUCCESS || !lowered)
      return errorf("internal error: NVRTC has no lowered name for {0}", e);
    m.loweredNames.push_back(lowered);
  }
  size_t n = 0;
  nvrtcGetPTXSize(prog, &n);
  m.ptx.resize(n);
  nvrtcGetPTX(prog, m.ptx.data());
  if (m.ptx.empty() || m.ptx.back() != '\0')
    m.ptx.push_back('\0'); // cuModuleLoadData and nvJitLink take NUL-terminated PTX
  m.seconds = since(t0);
  std::string names = joinLines(m.loweredNames);
  cachePut(opts, key, {"ptx", "log", "names"}, {&m.ptx, &m.log, &names});
  return m;
}

llvm::Expected<CompiledModule> ptxToCubin(const PtxModule &ptx, const std::string &arch,
                                          const ToolchainOptions &opts) {
  CompiledModule m;
  m.target = arch;
  m.kind = CompiledModule::Cubin;
  std::vector<std::string> options = {"-arch=" + arch, "-Xptxas=-v"};
  std::vector<std::string> keyParts = {"nvjitlink", nvJitLinkVersionString(), ptx.ptx};
  keyParts.insert(keyParts.end(), options.begin(), options.end());
  std::string key = hashKey(keyParts);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<uint8_t>> parts;
  if (cacheGet(opts, key, {"cubin", "log"}, parts)) {
    m.image = std::move(parts[0]);
    m.log = str(parts[1]);
    m.resources = parsePtxasLog(m.log);
    m.cached = true;
    return m;
  }
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvJitLinkHandle h = nullptr;
  if (nvJitLinkCreate(&h, static_cast<uint32_t>(argv.size()), argv.data()) != NVJITLINK_SUCCESS)
    return errorf("nvJitLinkCreate failed for {0}", arch);
  auto destroy = llvm::make_scope_exit([&] { nvJitLinkDestroy(&h); });
  nvJitLinkResult res =
      nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx.ptx.data(), ptx.ptx.size(), "dlc_kernels.ptx");
  if (res == NVJITLINK_SUCCESS)
    res = nvJitLinkComplete(h);
  size_t infoSize = 0, errSize = 0;
  nvJitLinkGetInfoLogSize(h, &infoSize);
  nvJitLinkGetErrorLogSize(h, &errSize);
  std::string info(infoSize, '\0'), err(errSize, '\0');
  if (infoSize)
    nvJitLinkGetInfoLog(h, info.data());
  if (errSize)
    nvJitLinkGetErrorLog(h, err.data());
  m.log = info + err;
  while (!m.log.empty() && m.log.back() == '\0')
    m.log.pop_back();
  if (res != NVJITLINK_SUCCESS)
    return errorf("ptxas (nvJitLink) failed for {0} (error {1}):\n{2}", arch, static_cast<int>(res),
                  m.log);
  size_t n = 0;
  nvJitLinkGetLinkedCubinSize(h, &n);
  m.image.resize(n);
  nvJitLinkGetLinkedCubin(h, m.image.data());
  m.resources = parsePtxasLog(m.log);
  m.seconds = since(t0);
  std::string image(m.image.begin(), m.image.end());
  cachePut(opts, key, {"cubin", "log"}, {&image, &m.log});
  return m;
}

llvm::Expected<CompiledModule> compileWithNvrtc(const std::string &source,
                                                const std::string &target,
                                                const ToolchainOptions &opts) {
  bool ptxTarget = target.rfind("compute_", 0) == 0;
  std::string virt = ptxTarget ? target : "compute_" + target.substr(target.find('_') + 1);
  auto ptx = compileToPtx(source, virt, {}, opts);
  if (!ptx)
    return ptx.takeError();
  if (!ptxTarget)
    return ptxToCubin(*ptx, target, opts);
  CompiledModule m;
  m.target = target;
  m.kind = CompiledModule::Ptx;
  m.image.assign(ptx->ptx.begin(), ptx->ptx.end());
  m.log = ptx->log;
  m.cached = ptx->cached;
  m.seconds = ptx->seconds;
  return m;
}

std::string hostCompilerPath(const ToolchainOptions &opts) {
  std::vector<std::string> candidates;
  if (!opts.hostCompiler.empty())
    candidates.push_back(opts.hostCompiler);
  if (const char *e = std::getenv("DLC_HOST_CXX"))
    candidates.push_back(e);
  if (const char *e = std::getenv("CXX"))
    candidates.push_back(e);
  candidates.push_back("c++");
  candidates.push_back("g++");
  candidates.push_back("clang++");
  for (const std::string &c : candidates) {
    if (c.find('/') != std::string::npos) {
      if (llvm::sys::fs::can_execute(c))
        return c;
      continue;
    }
    if (auto p = llvm::sys::findProgramByName(c))
      return *p;
  }
  return "";
}

bool hostCompilerAvailable(const ToolchainOptions &opts) {
  return !hostCompilerPath(opts).empty();
}

llvm::Expected<CompiledModule> compileForEmu(const std::string &source,
                                             const ToolchainOptions &opts) {
  CompiledModule m;
  m.target = opts.emuCheck ? "emu-x86_64-check" : "emu-x86_64";
  m.kind = CompiledModule::EmuObject;
  std::string cxx = hostCompilerPath(opts);
  if (cxx.empty())
    return makeError("no host C++ compiler found for the emu target (set DLC_HOST_CXX or CXX, or "
                     "leave emu out of --target)");
  // Sanitizer instrumentation without a sanitizer runtime (compiled, then linked apart,
  // so that no libubsan or libasan is linked): misaligned accesses call the handler in
  // dlc_emu_prelude.h; with emuCheck, every load and store calls the prelude's access
  // callbacks (kernel-address mode, each access a call, no stack or global redzones),
  // which --check uses for initcheck and racecheck on shared memory.
  std::vector<std::string> flags = {
      "-std=c++17",          "-O2", "-fPIC",       "-fwrapv",
      "-fvisibility=hidden", "-w",  "-DDLC_EMU=1", "-fsanitize=alignment"};
  // (c++ may be either compiler: the file it resolves to tells.)
  llvm::SmallString<256> realCxx;
  if (llvm::sys::fs::real_path(cxx, realCxx))
    realCxx = cxx;
  if (opts.emuCheck && llvm::sys::path::filename(realCxx).contains("clang"))
    flags.insert(flags.end(), {"-fsanitize=kernel-address", "-mllvm",
                               "-asan-instrumentation-with-call-threshold=0", "-mllvm",
                               "-asan-stack=0", "-mllvm", "-asan-globals=0"});
  else if (opts.emuCheck)
    flags.insert(flags.end(),
                 {"-fsanitize=kernel-address", "--param=asan-instrumentation-with-call-threshold=0",
                  "--param=asan-stack=0", "--param=asan-globals=0"});
  std::vector<std::string> keyParts = {"emu", "static-shared-lowering-1", cxx, source};
  keyParts.insert(keyParts.end(), flags.begin(), flags.end());
  for (const EmbeddedFile &h : embeddedHeaders())
    keyParts.push_back(h.contents);
  // The compiler's identity is part of the key: the file it resolves to, its size and
  // modification time (as ccache checks compilers; no process to start).
  {
    llvm::sys::fs::file_status st;
    if (!llvm::sys::fs::status(realCxx, st))
      keyParts.push_back(std::string(realCxx) + ":" + std::to_string(st.getSize()) + ":" +
                         std::to_string(llvm::sys::toTimeT(st.getLastModificationTime())));
    else
      keyParts.push_back(cxx);
  }
  std::string key = hashKey(keyParts);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<uint8_t>> parts;
  if (cacheGet(opts, key, {"bin", "log"}, parts)) {
    m.image = std::move(parts[0]);
    m.log = str(parts[1]);
    m.cached = true;
    return m;
  }

  llvm::SmallString<128> dir;
  if (auto ec = llvm::sys::fs::createUniqueDirectory("dlc-emu", dir))
    return errorf("cannot create a temporary directory: {0}", ec.message());
  auto cleanup = llvm::make_scope_exit([&] { llvm::sys::fs::remove_directories(dir); });
  // #line names each file without the temporary directory, which must not reach the
  // module (sanitizer source locations): packages are byte-identical build to build.
  for (const EmbeddedFile &h : embeddedHeaders()) {
    std::ofstream f(std::string(dir) + "/" + h.name);
    f << "#line 1 \"" << h.name << "\"\n" << h.contents;
  }
  std::string src = std::string(dir) + "/kernels.cpp", obj = std::string(dir) + "/kernels.o",
              out = std::string(dir) + "/kernels.so", log = std::string(dir) + "/log.txt";
  {
    std::ofstream f(src);
    f << "#line 1 \"kernels.cpp\"\n" << source;
  }
  std::vector<std::string> args = {cxx};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"-I" + std::string(dir), "-I" + opts.cudaRoot + "/include", "-include",
                           std::string(dir) + "/dlc_emu_prelude.h", "-c", src, "-o", obj});
  std::vector<llvm::StringRef> argRefs(args.begin(), args.end());
  llvm::Optional<llvm::StringRef> redirects[] = {llvm::None, llvm::StringRef(log),
                                                 llvm::StringRef(log)};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(cxx, argRefs, llvm::None, redirects, 0, 0, &err);
  if (rc == 0) {
    std::vector<llvm::StringRef> link = {cxx, "-shared", "-fPIC", obj, "-o", out};
    rc = llvm::sys::ExecuteAndWait(cxx, link, llvm::None, redirects, 0, 0, &err);
  }
  std::vector<uint8_t> logBytes;
  readFile(log, logBytes);
  m.log.assign(logBytes.begin(), logBytes.end());
  if (rc != 0 || !readFile(out, m.image)) {
    dumpSource(opts, source);
    return errorf("the host compiler failed to build the emu kernels (exit {0}{1}){2}:\n{3}", rc,
                  err.empty() ? "" : ", " + err,
                  opts.failureDumpPath.empty() ? "" : "; source written to " + opts.failureDumpPath,
                  m.log);
  }
  m.seconds = since(t0);
  std::string image(m.image.begin(), m.image.end());
  cachePut(opts, key, {"bin", "log"}, {&image, &m.log});
  return m;
}

uint32_t nvrtcVersionNumber() {
  int major = 0, minor = 0;
  ::nvrtcVersion(&major, &minor);
  return static_cast<uint32_t>(major * 1000 + minor * 10);
}

} // namespace dlc::codegen

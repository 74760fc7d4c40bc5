//===- ConformanceRunner.cpp - ONNX backend test data through dlc ----------===//
//
// For each case directory (model.onnx + test_data_set_*/input_N.pb, output_N.pb)
// under the ONNX test data, import the model and execute it, then compare with the
// expected outputs. Each case runs in a forked child with a time limit, so a crash
// or a hang is recorded as such instead of ending the run.
//
// Statuses: pass, fail (numbers differ), unsupported (the importer reports an
// unsupported op/attribute/type), error (any other import or run-time error),
// crash, timeout.
//
// With --expected FILE, every case listed there must pass (exit 1 otherwise);
// cases that pass but are not listed are reported so the file can be updated.
//===----------------------------------------------------------------------===//
#include "dlc/codegen/Compiler.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/Interpreter.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace dlc;

namespace {

struct Options {
  std::string dataRoot = "/usr/share/libonnx-testdata/data";
  std::vector<std::string> suites = {"node", "pytorch-converted", "pytorch-operator", "simple"};
  // interp | interp-opt | emu | emu-equiv (-O2 against -O0, both on emu)
  std::string mode = "interp";
  std::vector<std::string> targets = {"emu"}; // for --mode emu
  std::string cacheDir;
  bool requireNoSpills = false; // emu mode: any kernel that spills registers fails the case
  std::string report;
  std::string expected;
  std::string writeExpected;
  std::string filter;
  int shard = 0, shards = 1; // run cases whose index % shards == shard
  double rtol = 1e-3, atol = 1e-5;
  int timeoutSec = 120;
  bool verbose = false;
};

struct CaseResult {
  std::string name;   // suite/case
  std::string status; // pass fail unsupported error crash timeout
  std::string detail;
  std::vector<std::string> opTypes; // op types of the model (from the importer's view)
  double maxAbs = 0, maxRel = 0;
  double seconds = 0;
  int64_t kernels = -1; // emu mode: kernels in the package (0: everything folded at compile time)
};

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> r;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.')
        r.push_back(e->d_name);
    closedir(d);
  }
  std::sort(r.begin(), r.end());
  return r;
}

bool exists(const std::string &p) {
  return access(p.c_str(), F_OK) == 0;
}

/// The op types of the ONNX graph, read with a tiny protobuf scan-free approach:
/// we ask the importer for nothing here; the op list comes from the IR of a
/// successful import, or from the error text.
std::string firstLine(const std::string &s) {
  return s.substr(0, s.find('\n'));
}

/// The ONNX 1.12 test data stores bfloat16 tensors as UINT16; reinterpret them.
ir::Tensor asDeclared(const ir::Tensor &t, const ir::Value *v) {
  if (!v || t.type() == v->type() || t.shape() != v->shape())
    return t;
  bool swap16 = (t.dtype() == ir::DType::U16 && v->dtype() == ir::DType::BF16);
  if (!swap16)
    return t;
  ir::Tensor r(v->type());
  std::memcpy(r.mutableRaw(), t.raw(), t.byteSize());
  return r;
}

/// Runs the graph's package on a runtime session, returning outputs by name.
llvm::Expected<ir::TensorMap> runOnSession(rt::Session &s, const ir::Graph &g,
                                           const ir::TensorMap &feed) {
  for (const auto &[name, t] : feed) {
    rt::HostTensor h;
    h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t.dtype()));
    h.shape = t.shape();
    const uint8_t *p = static_cast<const uint8_t *>(t.raw());
    h.data.assign(p, p + t.byteSize());
    if (Status st = s.setInput(name, h))
      return ir::makeError(st.message());
  }
  if (Status st = s.run())
    return ir::makeError(st.message());
  ir::TensorMap out;
  for (const ir::GraphOutput &o : g.outputs()) {
    auto h = s.getOutput(o.name);
    if (!h)
      return ir::makeError(h.status().message());
    ir::Tensor t(o.value->type());
    std::memcpy(t.mutableRaw(), h->data.data(), h->data.size());
    out[o.name] = t;
  }
  return out;
}

/// Runs one case in-process; called in the child.
CaseResult runCase(const Options &o, const std::string &suite, const std::string &caseName) {
  CaseResult r;
  r.name = suite + "/" + caseName;
  std::string dir = o.dataRoot + "/" + suite + "/" + caseName;
  std::string model = dir + "/model.onnx";

  std::vector<std::string> sets;
  for (const std::string &e : listDir(dir))
    if (e.rfind("test_data_set_", 0) == 0)
      sets.push_back(e);
  if (sets.empty()) {
    r.status = "error";
    r.detail = "no test data sets";
    return r;
  }
  auto inputNames = frontend::onnxInputNames(model);
  if (!inputNames) {
    r.status = "error";
    r.detail = llvm::toString(inputNames.takeError());
    return r;
  }
  auto loadSet = [&](const std::string &set, const char *prefix,
                     std::vector<ir::Tensor> &out) -> llvm::Error {
    for (int i = 0;; ++i) {
      std::string p = dir + "/" + set + "/" + prefix + "_" + std::to_string(i) + ".pb";
      if (!exists(p))
        return llvm::Error::success();
      auto t = frontend::readTensorProtoFile(p);
      if (!t)
        return t.takeError();
      out.push_back(std::move(t->second));
    }
  };

  // Inputs that cannot be read (sequences, strings) are reported after importing,
  // so that an unsupported model is classified as such.
  std::vector<ir::Tensor> inputs0;
  std::string inputError;
  if (auto e = loadSet(sets[0], "input", inputs0)) {
    inputError = llvm::toString(std::move(e));
    inputs0.clear();
  }
  frontend::ImportOptions io;
  for (size_t i = 0; i < inputs0.size() && i < inputNames->size(); ++i) {
    io.specializable[(*inputNames)[i]] = inputs0[i];
    io.inputShapes[(*inputNames)[i]] = inputs0[i].shape();
  }
  auto imported = frontend::importOnnxFile(model, io);
  if (!imported) {
    std::string msg = llvm::toString(imported.takeError());
    r.status = msg.find("unsupported") != std::string::npos ? "unsupported" : "error";
    r.detail = firstLine(msg);
    // "model.onnx: node ... (OpType, opset N): ..." -> collect op types for the summary
    std::regex opRe("\\(([A-Za-z0-9]+)(, domain [^,]*)?, opset [0-9]+\\)");
    std::set<std::string> ops;
    for (std::sregex_iterator it(msg.begin(), msg.end(), opRe), end; it != end; ++it)
      ops.insert((*it)[1]);
    r.opTypes.assign(ops.begin(), ops.end());
    return r;
  }
  if (!inputError.empty()) {
    r.status = inputError.find("unsupported") != std::string::npos ? "unsupported" : "error";
    r.detail = inputError;
    return r;
  }
  ir::Graph &g = *imported->graph;
  {
    std::set<std::string> ops;
    for (const ir::Node &n : g.nodes())
      ops.insert(std::string(n.opName()));
    r.opTypes.assign(ops.begin(), ops.end());
  }
  bool equiv = o.mode == "emu-equiv";
  std::unique_ptr<ir::Graph> unoptimized = equiv ? g.clone() : nullptr;
  if (o.mode == "interp-opt" || o.mode == "emu" || equiv) {
    passes::PassManagerOptions pmo;
    pmo.verifyEach = true;
    passes::PassManager pm(pmo);
    passes::PassContext ctx;
    if (auto e = pm.run(g, passes::defaultPipeline(2), ctx)) {
      r.status = "error";
      r.detail = "passes: " + firstLine(llvm::toString(std::move(e)));
      return r;
    }
  }

  // Compiles a graph for the emu backend and opens a session; on failure fills r.
  auto emuSession = [&](const ir::Graph &graph, std::unique_ptr<rt::Session> &out) -> bool {
    codegen::CompileOptions co;
    co.targets = o.targets;
    co.cacheDir = o.cacheDir;
    codegen::CompileReport rep;
    auto bytes = codegen::compileGraph(graph, co, &rep);
    r.kernels = static_cast<int64_t>(rep.kernels + rep.libraryCalls);
    if (bytes && o.requireNoSpills && rep.totalSpills > 0) {
      r.status = "fail";
      r.detail = "kernels spill " + std::to_string(rep.totalSpills) + " bytes of registers";
      return false;
    }
    if (!bytes) {
      r.status = "error";
      r.detail = "compile: " + firstLine(llvm::toString(bytes.takeError()));
      return false;
    }
    auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), r.name);
    if (!pf) {
      r.status = "error";
      r.detail = pf.status().message();
      return false;
    }
    rt::SessionOptions so;
    so.device = rt::DeviceKind::Emu;
    so.emuThreads = 1;
    auto s = rt::Session::create(*pf, so);
    if (!s) {
      r.status = "error";
      r.detail = "load: " + firstLine(s.status().message());
      return false;
    }
    out = std::move(*s);
    return true;
  };
  std::unique_ptr<rt::Session> session, reference;
  if (equiv && !emuSession(*unoptimized, reference))
    return r;
  if ((o.mode == "emu" || equiv) && !emuSession(g, session))
    return r;

  for (const std::string &set : sets) {
    std::vector<ir::Tensor> ins, outs;
    if (auto e = loadSet(set, "input", ins)) {
      r.status = "error";
      r.detail = llvm::toString(std::move(e));
      return r;
    }
    if (auto e = loadSet(set, "output", outs)) {
      r.status = "error";
      r.detail = llvm::toString(std::move(e));
      return r;
    }
    ir::TensorMap feed;
    for (size_t i = 0; i < ins.size() && i < inputNames->size(); ++i) {
      const std::string &name = (*inputNames)[i];
      if (std::find(imported->specializedInputs.begin(), imported->specializedInputs.end(), name) !=
          imported->specializedInputs.end()) {
        if (!ins[i].bitwiseEqual(inputs0[i])) {
          r.status = "unsupported";
          r.detail = "input '" + name + "' was specialized to a constant but differs in " + set;
          return r;
        }
        continue;
      }
      feed[name] = asDeclared(ins[i], g.findValue(name));
    }
    auto res = session ? runOnSession(*session, g, feed) : ir::interpret(g, feed);
    if (!res) {
      r.status = "error";
      r.detail = "run: " + firstLine(llvm::toString(res.takeError()));
      return r;
    }
    if (equiv) { // the reference is the -O0 package on the same inputs
      auto ref = runOnSession(*reference, *unoptimized, feed);
      if (!ref) {
        r.status = "error";
        r.detail = "run -O0: " + firstLine(llvm::toString(ref.takeError()));
        return r;
      }
      for (size_t i = 0; i < outs.size() && i < g.outputs().size(); ++i)
        outs[i] = ref->at(unoptimized->outputs()[i].name);
    }
    if (outs.size() != g.outputs().size()) {
      r.status = "error";
      r.detail = "expected " + std::to_string(outs.size()) + " outputs, model has " +
                 std::to_string(g.outputs().size());
      return r;
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      const ir::Tensor &got = res->at(g.outputs()[i].name);
      outs[i] = asDeclared(outs[i], g.outputs()[i].value);
      if (got.dtype() != outs[i].dtype()) {
        r.status = "fail";
        r.detail = "output " + std::to_string(i) + " has dtype " +
                   std::string(ir::dtypeName(got.dtype())) + ", expected " +
                   std::string(ir::dtypeName(outs[i].dtype()));
        return r;
      }
      auto cmp = ir::compareTensors(got, outs[i], o.rtol, o.atol);
      r.maxAbs = std::max(r.maxAbs, cmp.maxAbsError);
      r.maxRel = std::max(r.maxRel, cmp.maxRelError);
      if (!cmp.ok) {
        r.status = "fail";
        r.detail = set + " output " + std::to_string(i) + " ('" + g.outputs()[i].name +
                   "'): " + cmp.message;
        return r;
      }
    }
  }
  r.status = "pass";
  return r;
}

llvm::json::Object toJson(const CaseResult &r) {
  llvm::json::Array ops;
  for (const auto &op : r.opTypes)
    ops.push_back(op);
  return llvm::json::Object{{"case", r.name},
                            {"status", r.status},
                            {"detail", r.detail},
                            {"max_abs_error", r.maxAbs},
                            {"max_rel_error", r.maxRel},
                            {"ops", std::move(ops)},
                            {"seconds", r.seconds},
                            {"kernels", r.kernels}};
}

/// Forks, runs the case in the child, and reads its JSON result through a pipe.
CaseResult runIsolated(const Options &o, const std::string &suite, const std::string &c) {
  auto start = std::chrono::steady_clock::now();
  int fds[2];
  if (pipe(fds) != 0) {
    return {suite + "/" + c, "error", "pipe failed", {}, 0, 0, 0};
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(o.timeoutSec);
    CaseResult r = runCase(o, suite, c);
    std::string s;
    llvm::raw_string_ostream os(s);
    os << llvm::json::Value(toJson(r));
    os.flush();
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = write(fds[1], s.data() + off, s.size() - off);
      if (n <= 0)
        break;
      off += n;
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string buf;
  char tmp[4096];
  ssize_t n;
  while ((n = read(fds[0], tmp, sizeof(tmp))) > 0)
    buf.append(tmp, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CaseResult r;
  r.name = suite + "/" + c;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFSIGNALED(status)) {
    r.status = WTERMSIG(status) == SIGALRM ? "timeout" : "crash";
    r.detail = std::string("signal ") + strsignal(WTERMSIG(status));
    return r;
  }
  auto v = llvm::json::parse(buf);
  if (!v || !v->getAsObject()) {
    if (!v)
      llvm::consumeError(v.takeError());
    r.status = "crash";
    r.detail = "no result from the child process";
    return r;
  }
  const llvm::json::Object &obj = *v->getAsObject();
  r.status = obj.getString("status").getValueOr("error").str();
  r.detail = obj.getString("detail").getValueOr("").str();
  r.maxAbs = obj.getNumber("max_abs_error").getValueOr(0);
  r.maxRel = obj.getNumber("max_rel_error").getValueOr(0);
  r.kernels = obj.getInteger("kernels").getValueOr(-1);
  if (const auto *ops = obj.getArray("ops"))
    for (const auto &op : *ops)
      if (auto s = op.getAsString())
        r.opTypes.push_back(s->str());
  return r;
}

int usage() {
  llvm::errs()
      << "usage: dlc-conformance [--data-root DIR] [--suites a,b] [--mode "
         "interp|interp-opt|emu|emu-equiv]\n"
         "                       [--targets emu,sm_80,...] [--cache-dir DIR] [--shard I/N]\n"
         "                       [--require-no-spills]\n"
         "                       [--filter REGEX] [--report FILE.jsonl] [--expected FILE]\n"
         "                       [--write-expected FILE] [--rtol X] [--atol X] [--verbose]\n";
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : std::string(); };
    if (a == "--data-root")
      o.dataRoot = next();
    else if (a == "--suites") {
      o.suites.clear();
      std::stringstream ss(next());
      for (std::string s; std::getline(ss, s, ',');)
        o.suites.push_back(s);
    } else if (a == "--mode")
      o.mode = next();
    else if (a == "--filter")
      o.filter = next();
    else if (a == "--report")
      o.report = next();
    else if (a == "--expected")
      o.expected = next();
    else if (a == "--write-expected")
      o.writeExpected = next();
    else if (a == "--rtol")
      o.rtol = std::atof(next().c_str());
    else if (a == "--atol")
      o.atol = std::atof(next().c_str());
    else if (a == "--targets") {
      o.targets.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');)
        o.targets.push_back(t);
    } else if (a == "--require-no-spills")
      o.requireNoSpills = true;
    else if (a == "--cache-dir")
      o.cacheDir = next();
    else if (a == "--timeout")
      o.timeoutSec = std::atoi(next().c_str());
    else if (a == "--shard") {
      std::string v = next();
      size_t slash = v.find('/');
      o.shard = std::atoi(v.substr(0, slash).c_str());
      o.shards =
          slash == std::string::npos ? 1 : std::max(1, std::atoi(v.substr(slash + 1).c_str()));
    } else if (a == "--verbose" || a == "-v")
      o.verbose = true;
    else
      return usage();
  }
  if (o.mode != "interp" && o.mode != "interp-opt" && o.mode != "emu" && o.mode != "emu-equiv")
    return usage();
  if (!exists(o.dataRoot)) {
    llvm::errs() << "dlc-conformance: error: test data not found at " << o.dataRoot
                 << " (install the Debian package libonnx-testdata)\n";
    return 1;
  }
  std::regex filter(o.filter.empty() ? ".*" : o.filter);
  std::vector<CaseResult> results;
  std::map<std::string, int> counts;
  size_t index = 0;
  for (const std::string &suite : o.suites) {
    for (const std::string &c : listDir(o.dataRoot + "/" + suite)) {
      if (!std::regex_search(suite + "/" + c, filter))
        continue;
      if (index++ % o.shards != static_cast<size_t>(o.shard))
        continue;
      CaseResult r = runIsolated(o, suite, c);
      ++counts[r.status];
      if (o.verbose || (r.status != "pass" && r.status != "unsupported"))
        llvm::errs() << r.status << ": " << r.name << (r.detail.empty() ? "" : ": ") << r.detail
                     << "\n";
      results.push_back(std::move(r));
    }
  }

  if (!o.report.empty()) {
    std::ofstream f(o.report);
    for (const auto &r : results) {
      std::string s;
      llvm::raw_string_ostream os(s);
      os << llvm::json::Value(toJson(r));
      f << os.str() << "\n";
    }
  }

  // Op types involved in non-passing cases.
  std::map<std::string, std::map<std::string, int>> byOp;
  for (const auto &r : results)
    if (r.status != "pass")
      for (const auto &op : r.opTypes)
        ++byOp[r.status][op];
  for (const auto &[status, ops] : byOp) {
    std::vector<std::pair<int, std::string>> v;
    for (const auto &[op, n] : ops)
      v.push_back({-n, op});
    std::sort(v.begin(), v.end());
    llvm::outs() << status << " cases by op type:";
    for (const auto &[n, op] : v)
      llvm::outs() << " " << op << "(" << -n << ")";
    llvm::outs() << "\n";
  }

  int rc = 0;
  if (!o.expected.empty()) {
    std::ifstream f(o.expected);
    if (!f) {
      llvm::errs() << "dlc-conformance: error: cannot read " << o.expected << "\n";
      return 1;
    }
    std::set<std::string> expected;
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && line[0] != '#')
        expected.insert(line);
    std::map<std::string, const CaseResult *> byName;
    for (const auto &r : results)
      byName[r.name] = &r;
    int regressions = 0, newPasses = 0;
    for (const std::string &e : expected) {
      auto it = byName.find(e);
      if (it == byName.end())
        continue; // filtered out
      if (it->second->status != "pass") {
        llvm::errs() << "REGRESSION: " << e << " is expected to pass but is " << it->second->status
                     << ": " << it->second->detail << "\n";
        ++regressions;
      }
    }
    for (const auto &r : results)
      if (r.status == "pass" && !expected.count(r.name)) {
        llvm::errs() << "newly passing (add to " << o.expected << "): " << r.name << "\n";
        ++newPasses;
      }
    llvm::outs() << regressions << " regressions, " << newPasses << " newly passing\n";
    if (regressions)
      rc = 1;
  }
  if (!o.writeExpected.empty()) {
    std::ofstream f(o.writeExpected);
    f << "# Cases that must pass (dlc-conformance --mode " << o.mode << "). One per line.\n";
    for (const auto &r : results)
      if (r.status == "pass")
        f << r.name << "\n";
  }
  if (o.mode == "emu") {
    int withKernels = 0, folded = 0;
    for (const auto &r : results)
      if (r.status == "pass")
        (r.kernels > 0 ? withKernels : folded)++;
    llvm::outs() << "passing cases that ran kernels or GEMMs: " << withKernels
                 << ", folded entirely at compile time: " << folded << "\n";
  }
  int passed = counts["pass"];
  int total = static_cast<int>(results.size());
  llvm::outs() << "statuses:";
  for (const auto &[s, n] : counts)
    llvm::outs() << " " << s << "=" << n;
  llvm::outs() << "\n" << passed << " passed, " << (total - passed) << " failed\n";
  return rc;
}

//===- OnnxLibrary.cpp - The ONNX library's passes, sandboxed --------------===//
#include "OnnxLibrary.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dlc::frontend {

using namespace ir;

namespace {

/// onnx::checker::check_model with the model's directory set, so that external data
/// is looked up next to the model rather than in the current directory.
void checkModel(const onnx::ModelProto &model, const std::string &modelDir) {
  if (!model.ir_version())
    fail_check("the model does not have an ir_version set properly");
  if (model.ir_version() > onnx::IR_VERSION)
    fail_check("the model's ir_version ", model.ir_version(),
               " is newer than this ONNX library supports (", onnx::IR_VERSION, ")");
  std::unordered_map<std::string, int> opsets;
  for (const auto &o : model.opset_import())
    opsets[o.domain()] = static_cast<int>(o.version());
  onnx::checker::CheckerContext ctx;
  ctx.set_ir_version(static_cast<int>(model.ir_version()));
  ctx.set_opset_imports(opsets);
  ctx.set_model_dir(modelDir);
  onnx::checker::LexicalScopeContext lex;
  onnx::checker::check_graph(model.graph(), ctx, lex);
  onnx::checker::check_model_local_functions(model, ctx, lex);
}

/// The ONNX library's passes: checker, shape inference (before the version converter
/// too: its adapters, e.g. opset 7's broadcasting, need shapes), conversion of
/// opsets below 17, shape inference again.
void runOnnxLibrary(onnx::ModelProto &model, const std::string &modelDir, const ImportOptions &opts,
                    int originalOpset, OnnxLibraryResult &r) {
  auto oneLine = [](std::string what) {
    while (!what.empty() && (what.back() == '\n' || what.back() == ' '))
      what.pop_back();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return what;
  };
  if (opts.runChecker) {
    try {
      checkModel(model, modelDir);
    } catch (const std::exception &e) {
      r.error = oneLine(e.what());
      return;
    }
  }
  auto inferShapes = [&](const char *when) {
    try {
      onnx::ShapeInferenceOptions siOpts(/*check_type=*/false, /*error_mode=*/0,
                                         /*enable_data_propagation=*/true);
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), siOpts);
    } catch (const std::exception &e) {
      r.notes.push_back(std::string("ONNX shape inference failed ") + when + " (" +
                        oneLine(e.what()) + "); dlc infers shapes itself");
    }
  };
  if (opts.convertVersion && originalOpset < 17) {
    inferShapes("before opset conversion");
    try {
      model = onnx::version_conversion::ConvertVersion(model, 17);
      r.opset = 17;
    } catch (const std::exception &e) {
      r.notes.push_back("opset " + std::to_string(originalOpset) +
                        " could not be converted to 17 (" + oneLine(e.what()) +
                        "); importing at the original opset");
    }
  }
  inferShapes("on the model");
}

} // namespace

/// Whether the ONNX library has a schema for every default-domain op of the graph at
/// `opset` (ONNX Runtime's SimplifiedLayerNormalization is a default-domain op the
/// library does not know; its checker would refuse the model).
bool libraryKnowsOps(const onnx::GraphProto &g, int opset) {
  for (const auto &n : g.node()) {
    if (canonicalDomain(n.domain()).empty() &&
        !onnx::OpSchemaRegistry::Schema(n.op_type(), opset, ""))
      return false;
    for (const auto &a : n.attribute()) {
      if (a.has_g() && !libraryKnowsOps(a.g(), opset))
        return false;
      for (const auto &sg : a.graphs())
        if (!libraryKnowsOps(sg, opset))
          return false;
    }
  }
  return true;
}

llvm::Error runOnnxLibrarySandboxed(onnx::ModelProto &model, const std::string &modelDir,
                                    const ImportOptions &opts, int originalOpset,
                                    OnnxLibraryResult &r) {
  int fds[2];
  if (::pipe(fds) != 0)
    return makeError(std::string("pipe failed: ") + std::strerror(errno));
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return makeError(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // A crash here only ends this child: no handler (a sanitizer's, a fuzzer's) runs.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      ::signal(sig, SIG_DFL);
    runOnnxLibrary(model, modelDir, opts, originalOpset, r);
    std::string out;
    auto put = [&](const std::string &s) {
      uint64_t n = s.size();
      out.append(reinterpret_cast<const char *>(&n), sizeof n);
      out += s;
    };
    put(r.error);
    put(std::to_string(r.opset));
    put(std::to_string(r.notes.size()));
    for (const std::string &n : r.notes)
      put(n);
    put(r.error.empty() ? model.SerializeAsString() : std::string());
    for (size_t off = 0; off < out.size();) {
      ssize_t w = ::write(fds[1], out.data() + off, out.size() - off);
      if (w <= 0)
        ::_exit(3);
      off += static_cast<size_t>(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string in;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    in.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return makeError(std::string("the ONNX library crashed (") + strsignal(WTERMSIG(status)) +
                     ") while checking or converting this model: it is malformed");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return makeError("the ONNX library's checks failed (exit " +
                     std::to_string(WEXITSTATUS(status)) + ")");
  size_t off = 0;
  bool ok = true;
  auto get = [&]() {
    uint64_t n = 0;
    if (off + sizeof n > in.size()) {
      ok = false;
      return std::string();
    }
    std::memcpy(&n, in.data() + off, sizeof n);
    off += sizeof n;
    if (n > in.size() - off) {
      ok = false;
      return std::string();
    }
    std::string s = in.substr(off, n);
    off += n;
    return s;
  };
  r.error = get();
  r.opset = std::atoi(get().c_str());
  size_t notes = static_cast<size_t>(std::atoll(get().c_str()));
  r.notes.clear();
  for (size_t i = 0; i < notes && ok; ++i)
    r.notes.push_back(get());
  std::string bytes = get();
  if (!ok)
    return makeError("internal error: a truncated reply from the ONNX library's process");
  if (r.error.empty() && !model.ParseFromString(bytes))
    return makeError("internal error: the ONNX library's process returned an unreadable model");
  return llvm::Error::success();
}

} // namespace dlc::frontend

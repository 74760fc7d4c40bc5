//===- Module.cpp - dlc._dlc: the runtime for Python ----------------------===//
//
// A pybind11 extension over the C++ runtime (dlcrt): a Session loads a package once
// (rt::Model: the weights are shared) and runs it from any number of Python threads.
// The compiler, inspect and export are the library calls of dlc/driver (the dlc
// command line calls the same), with options as arguments and results as values.
// Each call takes an idle rt::Session from a pool (one is created when none is idle),
// so calls from several threads run concurrently, each on its own arena, and the GIL
// is released while inputs are uploaded, the schedule runs and outputs come back.
// Inputs are numpy arrays of the input's dtype (bfloat16 as uint16 bit patterns, as
// `dlc run` takes them); a non-contiguous array is copied first. The ONNX Runtime
// conventions (InferenceSession, NodeArg, providers) live in the Python layer
// (python/dlc/__init__.py).
//===----------------------------------------------------------------------===//
#include "dlc/codegen/Artifacts.h"
#include "dlc/driver/Compile.h"
#include "dlc/driver/Export.h"
#include "dlc/driver/Inspect.h"
#include "dlc/runtime.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <functional>
#include <mutex>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace dlc::python {
namespace {

/// dlc.Error, raised for everything but bad arguments (ValueError), and its
/// subclasses dlc.DataError for bad input data (an index out of range, a loop past its
/// bound) and dlc.CompileError for a model that does not compile. Handles that live as
/// long as the interpreter (never released).
py::handle errorType, dataErrorType, compileErrorType;

[[noreturn]] void raise(const Status &s) {
  if (s.code() == StatusCode::InvalidArgument)
    throw py::value_error(s.message());
  PyErr_SetString((s.code() == StatusCode::DataError ? dataErrorType : errorType).ptr(),
                  s.message().c_str());
  throw py::error_already_set();
}

/// An llvm::Error raised as `type` (dlc.CompileError, dlc.Error).
[[noreturn]] void raise(llvm::Error e, py::handle type) {
  PyErr_SetString(type.ptr(), llvm::toString(std::move(e)).c_str());
  throw py::error_already_set();
}

/// The numpy dtype that carries a package dtype.
py::dtype numpyType(pkg::DType d) {
  switch (d) {
  case pkg::DType::F32:
    return py::dtype("float32");
  case pkg::DType::F16:
    return py::dtype("float16");
  case pkg::DType::BF16:
    return py::dtype("uint16"); // bit patterns: numpy has no bfloat16
  case pkg::DType::F64:
    return py::dtype("float64");
  case pkg::DType::I64:
    return py::dtype("int64");
  case pkg::DType::I32:
    return py::dtype("int32");
  case pkg::DType::I16:
    return py::dtype("int16");
  case pkg::DType::I8:
    return py::dtype("int8");
  case pkg::DType::U8:
    return py::dtype("uint8");
  case pkg::DType::U16:
    return py::dtype("uint16");
  case pkg::DType::U32:
    return py::dtype("uint32");
  case pkg::DType::U64:
    return py::dtype("uint64");
  case pkg::DType::Bool:
    return py::dtype("bool");
  case pkg::DType::F8E4M3:
  case pkg::DType::F8E5M2:
    return py::dtype("uint8"); // bit patterns (never a model's input or output)
  }
  throw py::value_error("unknown dtype");
}

std::vector<int64_t> shapeOf(const pkg::TensorInfo &t) {
  return t.shape() ? std::vector<int64_t>(t.shape()->begin(), t.shape()->end())
                   : std::vector<int64_t>{};
}

using Tensors = flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>>;

int indexOf(const Tensors *list, const std::string &n) {
  for (size_t i = 0; list && i < list->size(); ++i)
    if (list->Get(static_cast<uint32_t>(i))->name()->str() == n)
      return static_cast<int>(i);
  return -1;
}

std::string dimsString(const std::vector<int64_t> &dims) {
  std::string r;
  for (int64_t d : dims)
    r += (r.empty() ? "" : ",") + std::to_string(d);
  return "[" + r + "]";
}

/// A numpy array as a host tensor of `dt` (copied, in C order and native byte order);
/// `what` names it. Its dtype and shape (`shapeProblem`) are checked before anything is
/// copied: a small view of a huge broadcast shape is refused, not expanded.
rt::HostTensor
tensorOf(const std::string &what, const py::handle &value, pkg::DType dt,
         const std::function<std::string(const std::vector<int64_t> &)> &shapeProblem) {
  if (!py::isinstance<py::array>(value))
    throw py::value_error(what + " must be a numpy array, got " +
                          std::string(py::str(py::type::of(value).attr("__name__"))));
  py::array a = py::reinterpret_borrow<py::array>(value);
  py::dtype want = numpyType(dt);
  if (a.dtype().num() != want.num())
    throw py::value_error(what + " has dtype " + std::string(py::str(a.dtype())) +
                          ", the model expects " + std::string(py::str(want)) +
                          (dt == pkg::DType::BF16 ? " (bfloat16 bit patterns)" : ""));
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  if (std::string p = shapeProblem(shape); !p.empty())
    throw py::value_error(p);
  // One copy into C order and this machine's byte order ('>f4' on x86 is swapped).
  a = py::module_::import("numpy").attr("ascontiguousarray")(a, want.attr("newbyteorder")("="));
  rt::HostTensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  const auto *bytes = static_cast<const uint8_t *>(a.data());
  t.data.assign(bytes, bytes + a.nbytes());
  return t;
}

/// A host tensor as a new numpy array.
py::array arrayOf(const rt::HostTensor &t) {
  py::array a(numpyType(t.dtype), t.shape);
  std::memcpy(a.mutable_data(), t.data.data(), t.data.size());
  return a;
}

/// The feed ({name: array}) as one host tensor per input of the package, in its order:
/// every input must be there, and no other name.
std::vector<rt::HostTensor> tensorsOf(const pkg::Package &m, const py::dict &feed) {
  size_t ni = m.inputs() ? m.inputs()->size() : 0;
  std::vector<rt::HostTensor> tensors(ni);
  std::vector<bool> given(ni, false);
  for (const auto &[key, value] : feed) {
    std::string name = py::str(key);
    int i = indexOf(m.inputs(), name);
    if (i < 0)
      throw py::value_error(pkg::unknownInputMessage(m, name));
    tensors[static_cast<size_t>(i)] =
        tensorOf("input '" + name + "'", value, m.inputs()->Get(static_cast<uint32_t>(i))->dtype(),
                 [&](const std::vector<int64_t> &shape) {
                   return pkg::inputShapeProblem(m, static_cast<uint32_t>(i), shape);
                 });
    given[static_cast<size_t>(i)] = true;
  }
  for (size_t i = 0; i < ni; ++i)
    if (!given[i])
      throw py::value_error("input '" + m.inputs()->Get(static_cast<uint32_t>(i))->name()->str() +
                            "' is missing from the feed");
  return tensors;
}

Status setInputs(rt::Session &s, const pkg::Package &m,
                 const std::vector<rt::HostTensor> &tensors) {
  for (size_t i = 0; i < tensors.size(); ++i)
    DLC_RETURN_IF_ERROR(
        s.setInput(m.inputs()->Get(static_cast<uint32_t>(i))->name()->str(), tensors[i]));
  return Status::ok();
}

/// "auto" | "cuda" | "cuda:N" | "emu", and the emu threads, as session options.
rt::SessionOptions sessionOptions(const std::string &device, int threads, bool allowHostCode,
                                  const std::string &tactics, const std::string &tacticsCacheDir) {
  rt::SessionOptions o;
  o.allowHostCode = allowHostCode;
  o.tacticsCacheDir = tacticsCacheDir;
  if (tactics == "auto" || tactics == "dlc" || tactics == "vendor")
    o.tactics = tactics == "auto"  ? rt::SessionOptions::Tactics::Auto
                : tactics == "dlc" ? rt::SessionOptions::Tactics::Dlc
                                   : rt::SessionOptions::Tactics::Vendor;
  else if (!tactics.empty())
    throw py::value_error("tactics must be 'auto', 'dlc', 'vendor' or None, got '" + tactics + "'");
  if (device == "auto" || device == "emu" || device == "cuda")
    o.device = device == "auto"  ? rt::DeviceKind::Auto
               : device == "emu" ? rt::DeviceKind::Emu
                                 : rt::DeviceKind::Cuda;
  else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9 &&
           device.find_first_not_of("0123456789", 5) == std::string::npos) {
    o.device = rt::DeviceKind::Cuda;
    o.cudaDevice = std::stoi(device.substr(5));
  } else
    throw py::value_error("device must be 'auto', 'cuda', 'cuda:N' or 'emu', got '" + device + "'");
  if (threads < 0 || threads > rt::kMaxEmuThreads)
    throw py::value_error("threads must be 0 (one per core) to " +
                          std::to_string(rt::kMaxEmuThreads));
  o.emuThreads = threads;
  return o;
}

std::unique_ptr<rt::Session> createSession(const std::shared_ptr<const rt::Model> &model,
                                           const rt::SessionOptions &opts) {
  auto s = rt::Session::create(model, opts);
  if (!s)
    raise(s.status());
  return std::move(*s);
}

/// Name, numpy dtype, package dtype and shape of each tensor; for inputs also the
/// smallest and largest shape (they differ along --input-shape ranges).
py::list describe(const pkg::Package &m, const Tensors *list, bool inputs) {
  py::list r;
  for (size_t i = 0; list && i < list->size(); ++i) {
    const pkg::TensorInfo &t = *list->Get(static_cast<uint32_t>(i));
    py::dict d;
    d["name"] = t.name()->str();
    d["dtype"] = pkg::dtypeName(t.dtype());
    d["numpy_dtype"] = numpyType(t.dtype());
    std::vector<int64_t> shape = shapeOf(t);
    pkg::ShapeBounds b{shape, shape};
    if (inputs)
      b = pkg::inputShapeBounds(m, static_cast<uint32_t>(i));
    d["shape"] = shape;
    d["min_shape"] = b.min;
    d["max_shape"] = b.max;
    r.append(std::move(d));
  }
  return r;
}

/// A session's tactics (rt::Session::tactics) as a list of dicts.
py::list tacticsList(const rt::Session &s) {
  py::list out;
  for (const rt::TacticChoice &c : s.tactics()) {
    py::list cands;
    for (const rt::TacticChoice::Candidate &k : c.candidates) {
      py::dict d;
      d["kind"] = k.kind;
      d["description"] = k.description;
      d["microseconds"] = k.micros >= 0 ? py::object(py::float_(k.micros)) : py::object(py::none());
      d["problem"] = k.problem;
      cands.append(d);
    }
    py::dict d;
    d["node"] = c.node;
    d["schedule"] = c.schedule;
    d["candidates"] = cands;
    d["chosen"] = c.chosen;
    d["how"] = c.how;
    out.append(d);
  }
  return out;
}

/// An inference session: one model, a pool of runtime sessions (see the top).
class Session {
public:
  Session(std::shared_ptr<const pkg::PackageFile> pf, const std::string &device, int threads,
          bool allowHostCode, const std::string &tactics, const std::string &tacticsCacheDir)
      : model_(std::make_shared<const rt::Model>(std::move(pf))),
        opts_(sessionOptions(device, threads, allowHostCode, tactics, tacticsCacheDir)) {
    auto s = createSession(model_, opts_);
    device_ = s->backendDescription();
    tactics_ = tacticsList(*s);
    // Emu by choice or because no GPU is there: the first session says which.
    opts_.device = s->deviceKind();
    idle_.push_back(std::move(s));
  }

  const std::string &device() const { return device_; }
  /// The first runtime session's tactics (the others read the same cache).
  py::list tactics() const { return tactics_; }
  py::list inputs() const { return describe(model_->meta(), model_->meta().inputs(), true); }
  py::list outputs() const { return describe(model_->meta(), model_->meta().outputs(), false); }

  /// Runs with every input of `feed`; returns the outputs named in `names` (all when
  /// None), in that order.
  py::list run(const py::dict &feed, const std::optional<std::vector<std::string>> &names) {
    const pkg::Package &m = model_->meta();
    std::vector<rt::HostTensor> tensors = tensorsOf(m, feed);
    std::vector<int> outs;
    if (names) {
      for (const std::string &n : *names) {
        int o = indexOf(m.outputs(), n);
        if (o < 0)
          throw py::value_error("the model has no output named '" + n + "'" + outputList());
        outs.push_back(o);
      }
    } else {
      for (size_t o = 0; m.outputs() && o < m.outputs()->size(); ++o)
        outs.push_back(static_cast<int>(o));
    }
    auto outName = [&](size_t k) {
      return m.outputs()->Get(static_cast<uint32_t>(outs[k]))->name()->str();
    };
    std::unique_ptr<rt::Session> s;
    Status st;
    std::vector<std::vector<int64_t>> shapes;
    {
      py::gil_scoped_release nogil;
      s = acquire(st);
      if (!st)
        st = setInputs(*s, m, tensors);
      if (!st)
        st = s->run();
      for (size_t k = 0; !st && k < outs.size(); ++k)
        shapes.push_back(s->outputShape(outName(k)));
    }
    if (st) {
      release(std::move(s));
      raise(st);
    }
    std::vector<py::array> arrays;
    for (size_t k = 0; k < outs.size(); ++k)
      arrays.push_back(py::array(
          numpyType(m.outputs()->Get(static_cast<uint32_t>(outs[k]))->dtype()), shapes[k]));
    {
      py::gil_scoped_release nogil;
      for (size_t k = 0; !st && k < outs.size(); ++k)
        st = s->getOutputBytes(outName(k), arrays[k].mutable_data(),
                               static_cast<size_t>(arrays[k].nbytes()));
      release(std::move(s));
    }
    if (st)
      raise(st);
    py::list result;
    for (py::array &a : arrays)
      result.append(std::move(a));
    return result;
  }

  /// rt::benchmark's order statistics (milliseconds) of uploading the inputs, running,
  /// downloading every output and the three together, as `dlc bench` measures them
  /// (the GIL released).
  py::dict bench(const py::dict &feed, int warmup, int iterations) {
    const pkg::Package &m = model_->meta();
    std::vector<rt::HostTensor> tensors = tensorsOf(m, feed);
    std::vector<std::pair<std::string, rt::HostTensor>> upload;
    for (size_t i = 0; i < tensors.size(); ++i)
      upload.emplace_back(m.inputs()->Get(static_cast<uint32_t>(i))->name()->str(),
                          std::move(tensors[i]));
    Status st;
    rt::BenchTimes times;
    {
      py::gil_scoped_release nogil;
      std::unique_ptr<rt::Session> s = acquire(st);
      if (!st) {
        auto t = rt::benchmark(*s, upload, warmup, iterations);
        if (t)
          times = std::move(*t);
        else
          st = t.takeStatus();
      }
      release(std::move(s));
    }
    if (st)
      raise(st);
    auto stats = [](const std::vector<double> &v) {
      rt::BenchStats b = rt::benchStats(v);
      py::dict d;
      d["min"] = b.min;
      d["median"] = b.median;
      d["p90"] = b.p90;
      d["p99"] = b.p99;
      d["max"] = b.max;
      return d;
    };
    py::dict r;
    r["h2d_ms"] = stats(times.h2d);
    r["compute_ms"] = stats(times.compute);
    r["d2h_ms"] = stats(times.d2h);
    r["total_ms"] = stats(times.total);
    return r;
  }

  /// driver::inspect's report as JSON text (`dlc inspect --json`).
  std::string inspectJson() const {
    return llvm::formatv("{0}", driver::toJson(driver::inspect(model_->file()))).str();
  }

private:
  std::shared_ptr<const rt::Model> model_;
  rt::SessionOptions opts_;
  std::string device_;
  py::list tactics_;
  std::mutex mu_;
  std::vector<std::unique_ptr<rt::Session>> idle_;

  /// An idle session, or a new one (status set when it cannot be created).
  std::unique_ptr<rt::Session> acquire(Status &st) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        auto s = std::move(idle_.back());
        idle_.pop_back();
        return s;
      }
    }
    auto s = rt::Session::create(model_, opts_);
    if (!s) {
      st = s.takeStatus();
      return nullptr;
    }
    return std::move(*s);
  }
  void release(std::unique_ptr<rt::Session> s) {
    if (!s)
      return;
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(s));
  }
  std::string outputList() const {
    std::string r;
    const pkg::Package &m = model_->meta();
    for (size_t i = 0; m.outputs() && i < m.outputs()->size(); ++i)
      r += (r.empty() ? " (outputs: " : ", ") +
           m.outputs()->Get(static_cast<uint32_t>(i))->name()->str();
    return r.empty() ? r : r + ")";
  }
};

/// A training session: one runtime session whose variables (parameters, optimizer
/// state, running statistics) are the state being trained. Calls are serialized.
class TrainingSession {
public:
  TrainingSession(std::shared_ptr<const pkg::PackageFile> pf, const std::string &device,
                  int threads, bool allowHostCode, const std::string &tactics,
                  const std::string &tacticsCacheDir)
      : model_(std::make_shared<const rt::Model>(std::move(pf))) {
    if (!model_->meta().variables() || model_->meta().variables()->size() == 0)
      throw py::value_error(
          "this package has no variables: it is not a training package (compile the model "
          "with dlc compile --train)");
    s_ = createSession(model_,
                       sessionOptions(device, threads, allowHostCode, tactics, tacticsCacheDir));
  }
  py::list tactics() const { return tacticsList(*s_); }

  std::string device() const { return s_->backendDescription(); }
  py::list inputs() const { return describe(model_->meta(), model_->meta().inputs(), true); }
  py::list outputs() const { return describe(model_->meta(), model_->meta().outputs(), false); }

  /// One training step (evaluate: the loss without the update); returns the loss.
  double step(const py::dict &feed, bool evaluate) {
    const pkg::Package &m = model_->meta();
    std::vector<rt::HostTensor> tensors = tensorsOf(m, feed);
    rt::HostTensor loss;
    locked([&] {
      DLC_RETURN_IF_ERROR(setInputs(*s_, m, tensors));
      DLC_RETURN_IF_ERROR(evaluate ? s_->evaluate() : s_->run());
      auto l = s_->getOutput(m.outputs()->Get(0)->name()->str());
      if (!l)
        return l.takeStatus();
      loss = std::move(*l);
      return Status::ok();
    });
    if (loss.dtype != pkg::DType::F32 || loss.data.size() < 4)
      throw py::value_error("the package's first output is not an f32 loss");
    float v;
    std::memcpy(&v, loss.data.data(), 4);
    return v;
  }

  /// The outputs of the last step or evaluation, by name.
  py::dict lastOutputs() const {
    std::vector<std::pair<std::string, rt::HostTensor>> got;
    locked([&] {
      const pkg::Package &m = model_->meta();
      for (size_t i = 0; m.outputs() && i < m.outputs()->size(); ++i) {
        std::string name = m.outputs()->Get(static_cast<uint32_t>(i))->name()->str();
        auto t = s_->getOutput(name);
        if (!t)
          return t.takeStatus();
        got.emplace_back(name, std::move(*t));
      }
      return Status::ok();
    });
    return dictOf(got);
  }

  /// Trainable parameters only, or every variable.
  py::dict variables(bool trainableOnly) const {
    std::vector<std::pair<std::string, rt::HostTensor>> got;
    locked([&] {
      for (const std::string &name : s_->variableNames()) {
        if (trainableOnly && !s_->variableTrainable(name))
          continue;
        auto t = s_->getVariable(name);
        if (!t)
          return t.takeStatus();
        got.emplace_back(name, std::move(*t));
      }
      return Status::ok();
    });
    return dictOf(got);
  }

  /// Sets the named variables (all checked before any is written).
  void setVariables(const py::dict &values) {
    const pkg::Package &m = model_->meta();
    std::vector<std::pair<std::string, rt::HostTensor>> ts;
    for (const auto &[key, value] : values) {
      std::string name = py::str(key);
      const pkg::Variable *var = nullptr;
      for (const pkg::Variable *v : *m.variables())
        if (v->name()->str() == name)
          var = v;
      if (!var)
        throw py::value_error("the package has no variable named '" + name + "'");
      std::vector<int64_t> want;
      if (var->shape())
        want.assign(var->shape()->begin(), var->shape()->end());
      rt::HostTensor t = tensorOf(
          "variable '" + name + "'", value, var->dtype(), [&](const std::vector<int64_t> &s) {
            return s == want ? std::string()
                             : "variable '" + name + "' has shape " + dimsString(s) +
                                   ", the model expects " + dimsString(want);
          });
      ts.emplace_back(name, std::move(t));
    }
    locked([&] {
      for (const auto &[name, t] : ts)
        DLC_RETURN_IF_ERROR(s_->setVariable(name, t));
      return Status::ok();
    });
  }

  void saveCheckpoint(const std::string &path) const {
    locked([&] { return s_->saveCheckpoint(path); });
  }
  void loadCheckpoint(const std::string &path) {
    locked([&] { return s_->loadCheckpoint(path); });
  }
  void reset() {
    locked([&] { return s_->resetVariables(); });
  }

  /// The ONNX model the package was compiled from with the session's variables
  /// (driver::exportOnnx, as `dlc export`), written atomically to `path`; returns the
  /// number of initializers replaced.
  size_t exportOnnx(const std::string &path) const {
    std::map<std::string, rt::HostTensor> values;
    locked([&] {
      for (const std::string &name : s_->variableNames()) {
        auto t = s_->getVariable(name);
        if (!t)
          return t.takeStatus();
        values.emplace(name, std::move(*t));
      }
      return Status::ok();
    });
    llvm::Expected<size_t> replaced = [&]() -> llvm::Expected<size_t> {
      py::gil_scoped_release nogil;
      auto r = driver::exportOnnx(model_->file(), values, "the session");
      if (!r)
        return r.takeError();
      if (auto e = codegen::writeFileAtomically(path, r->model))
        return e;
      return r->replaced.size();
    }();
    if (!replaced)
      raise(replaced.takeError(), errorType);
    return *replaced;
  }

private:
  std::shared_ptr<const rt::Model> model_;
  std::unique_ptr<rt::Session> s_;
  mutable std::mutex mu_;

  /// Runs `work` on the session with the GIL released and the session's lock held
  /// (taken only without the GIL, so that no thread waits for one holding the other);
  /// its error raises.
  template <class F> void locked(F &&work) const {
    Status st;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      st = work();
    }
    if (st)
      raise(st);
  }
  static py::dict dictOf(const std::vector<std::pair<std::string, rt::HostTensor>> &ts) {
    py::dict d;
    for (const auto &[name, t] : ts)
      d[py::str(name)] = arrayOf(t);
    return d;
  }
};

std::shared_ptr<const pkg::PackageFile> loadPath(const std::string &path) {
  auto pf = pkg::PackageFile::load(path);
  if (!pf)
    raise(pf.status());
  return *pf;
}

std::shared_ptr<const pkg::PackageFile> loadBytes(const py::bytes &b) {
  std::string_view v = b;
  auto r = pkg::PackageFile::fromBytes(v.data(), v.size(), "<bytes>"); // copies
  if (!r)
    raise(r.status());
  return *r;
}

/// Both constructors of a session class: from bytes (first: pybind11 would also
/// convert bytes to the path's std::string) and from a path.
template <class T> void constructors(py::class_<T> &c) {
  c.def(py::init([](const py::bytes &data, const std::string &device, int threads,
                    bool allowHostCode, const std::string &tactics, const std::string &cacheDir) {
          return std::make_unique<T>(loadBytes(data), device, threads, allowHostCode, tactics,
                                     cacheDir);
        }),
        py::arg("data"), py::arg("device") = "auto", py::arg("threads") = 0,
        py::arg("allow_host_code") = false, py::arg("tactics") = "",
        py::arg("tactics_cache_dir") = "")
      .def(
          py::init([](const std::string &path, const std::string &device, int threads,
                      bool allowHostCode, const std::string &tactics, const std::string &cacheDir) {
            return std::make_unique<T>(loadPath(path), device, threads, allowHostCode, tactics,
                                       cacheDir);
          }),
          py::arg("path"), py::arg("device") = "auto", py::arg("threads") = 0,
          py::arg("allow_host_code") = false, py::arg("tactics") = "",
          py::arg("tactics_cache_dir") = "");
}

/// dlc.compile: driver::compile with the Python layer's options (checked there for
/// type; values are checked here). Bad options raise ValueError, a model that does
/// not compile dlc.CompileError. The GIL is released while it compiles.
void compileModel(const std::string &model, const std::string &output,
                  const std::optional<py::bytes> &data, const std::vector<std::string> &targets,
                  bool fp16, bool bf16, const std::string &layout,
                  const std::map<std::string, std::vector<std::string>> &inputShapes, int optLevel,
                  const std::string &cacheDir, bool verbose, const std::optional<py::dict> &train,
                  std::optional<bool> tf32, bool deterministic) {
  auto check = [](llvm::Error e) {
    if (e)
      throw py::value_error(llvm::toString(std::move(e)));
  };
  driver::CompileOptions o;
  o.model = model;
  if (data)
    o.modelBytes = std::string(*data);
  o.output = output;
  o.targets = targets;
  o.optLevel = optLevel;
  o.cacheDir = cacheDir;
  o.tf32 = tf32;
  o.deterministic = deterministic;
  if (fp16 || bf16) {
    passes::PrecisionOptions po;
    po.reduced = bf16 ? ir::DType::BF16 : ir::DType::F16;
    o.precision = po;
  }
  auto mode = passes::parseLayoutMode(layout);
  if (!mode)
    check(mode.takeError());
  o.layout = *mode;
  for (const auto &[name, dims] : inputShapes) {
    std::string spec = name + "=";
    for (size_t i = 0; i < dims.size(); ++i)
      spec += (i ? "," : "") + dims[i];
    auto shape = driver::parseInputShape(spec);
    if (!shape)
      check(shape.takeError());
    if (shape->ranged())
      o.shapeRanges.push_back(*shape);
    else
      o.import.inputShapes[name] = shape->min;
  }
  if (train) {
    passes::TrainingOptions t;
    for (const auto &[key, value] : *train) {
      std::string k = py::str(key);
      if (k == "loss") {
        auto l = passes::parseLossKind(py::str(value).cast<std::string>());
        if (!l)
          check(l.takeError());
        t.loss = *l;
      } else if (k == "optimizer") {
        auto opt = passes::parseOptimizerKind(py::str(value).cast<std::string>());
        if (!opt)
          check(opt.takeError());
        t.optimizer = *opt;
      } else if (k == "label") {
        t.label = py::str(value);
      } else if (k == "fused_attention_dropout") {
        t.fuseAttentionDropout = value.cast<bool>();
      } else if (k == "lr" || k == "momentum" || k == "weight_decay") {
        double v = value.cast<double>();
        (k == "lr" ? t.lr : k == "momentum" ? t.momentum : t.weightDecay) = v;
      } else {
        throw py::value_error("unknown training option '" + k + "'");
      }
    }
    check(passes::validateTrainingOptions(t));
    o.training = t;
  }
  check(driver::validate(o));
  o.onNote = [](const std::string &n) { llvm::errs() << "dlc: note: " << n << "\n"; };
  o.onWarning = [](const std::string &w) { llvm::errs() << "dlc: warning: " << w << "\n"; };
  if (verbose)
    o.log = [](const std::string &line) { llvm::errs() << "dlc: " << line << "\n"; };
  llvm::Expected<driver::CompileResult> r = [&] {
    py::gil_scoped_release nogil;
    return driver::compile(o);
  }();
  if (!r)
    raise(r.takeError(), compileErrorType);
}

/// The external-data files a serialized ONNX model names (the cache key covers them).
std::vector<std::string> externalDataFiles(const py::bytes &model) {
  std::string_view bytes = model;
  auto r = frontend::onnxExternalDataFiles(llvm::StringRef(bytes.data(), bytes.size()));
  if (!r)
    raise(r.takeError(), compileErrorType);
  return *r;
}

} // namespace
} // namespace dlc::python

PYBIND11_MODULE(_dlc, m) {
  using namespace dlc::python;
  m.doc() =
      "dlc: load .dlc packages and run them, compile models (see the dlc package for the ONNX "
      "Runtime-style API)";
  errorType = py::exception<std::runtime_error>(m, "Error", PyExc_RuntimeError).release();
  dataErrorType = py::exception<std::range_error>(m, "DataError", errorType.ptr()).release();
  compileErrorType = py::exception<std::logic_error>(m, "CompileError", errorType.ptr()).release();
  m.attr("runtime_api_version") = DLC_RUNTIME_API_VERSION;
  m.attr("package_format_version") = dlc::pkg::kFormatVersion;
  m.def("compile", &compileModel, py::arg("model"), py::arg("output"), py::arg("data"),
        py::arg("targets"), py::arg("fp16"), py::arg("bf16"), py::arg("layout"),
        py::arg("input_shapes"), py::arg("opt_level"), py::arg("cache_dir"), py::arg("verbose"),
        py::arg("train"), py::arg("tf32"), py::arg("deterministic"),
        "driver::compile: the model (a path, or its bytes in `data`) into a package at `output`");
  m.def("external_data_files", &externalDataFiles, py::arg("model"),
        "the external-data locations a serialized ONNX model names");
  py::class_<Session> session(m, "Session");
  constructors(session);
  session.def_property_readonly("device", &Session::device)
      .def("inputs", &Session::inputs)
      .def("outputs", &Session::outputs)
      .def("run", &Session::run, py::arg("feed"), py::arg("names") = py::none())
      .def("bench", &Session::bench, py::arg("feed"), py::arg("warmup"), py::arg("iterations"))
      .def("inspect_json", &Session::inspectJson)
      .def("tactics", &Session::tactics);
  py::class_<TrainingSession> training(m, "TrainingSession");
  constructors(training);
  training.def_property_readonly("device", &TrainingSession::device)
      .def("inputs", &TrainingSession::inputs)
      .def("outputs", &TrainingSession::outputs)
      .def("step", &TrainingSession::step, py::arg("feed"), py::arg("evaluate") = false)
      .def("last_outputs", &TrainingSession::lastOutputs)
      .def("tactics", &TrainingSession::tactics)
      .def("variables", &TrainingSession::variables, py::arg("trainable_only"))
      .def("set_variables", &TrainingSession::setVariables, py::arg("values"))
      .def("save_checkpoint", &TrainingSession::saveCheckpoint, py::arg("path"))
      .def("load_checkpoint", &TrainingSession::loadCheckpoint, py::arg("path"))
      .def("reset", &TrainingSession::reset)
      .def("export_onnx", &TrainingSession::exportOnnx, py::arg("path"));
}

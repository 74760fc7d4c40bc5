//===- dlc/runtime.hpp - Header-only C++ wrapper of the C API ----*- C++ -*-===//
//
//   dlc::Model model = dlc::Model::load("mymodel.dlc");
//   dlc::Session session(model);               // or Session(model, DLC_DEVICE_EMU)
//   session.setInput("image", image);           // std::vector<float>: dtype and size checked
//   session.run();
//   std::vector<float> probs = session.output<float>("probs");
//
// Errors throw dlc::Error (status + message). Handles are freed by destructors.
//===----------------------------------------------------------------------===//
#ifndef DLC_RUNTIME_HPP
#define DLC_RUNTIME_HPP

#include "dlc/runtime.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dlc {

class Error : public std::runtime_error {
public:
  Error(dlc_status s, const std::string &msg) : std::runtime_error(msg), status_(s) {}
  dlc_status status() const { return status_; }

private:
  dlc_status status_;
};

inline void check(dlc_status s) {
  if (s != DLC_OK)
    throw Error(s, dlc_last_error());
}

/// The element type of a C++ type (for the checked setInput/output).
template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr dlc_dtype value = DLC_F32; };
template <> struct DTypeOf<double> { static constexpr dlc_dtype value = DLC_F64; };
template <> struct DTypeOf<int64_t> { static constexpr dlc_dtype value = DLC_I64; };
template <> struct DTypeOf<int32_t> { static constexpr dlc_dtype value = DLC_I32; };
template <> struct DTypeOf<int16_t> { static constexpr dlc_dtype value = DLC_I16; };
template <> struct DTypeOf<int8_t> { static constexpr dlc_dtype value = DLC_I8; };
template <> struct DTypeOf<uint8_t> { static constexpr dlc_dtype value = DLC_U8; };
template <> struct DTypeOf<bool> { static constexpr dlc_dtype value = DLC_BOOL; };

struct TensorInfo {
  std::string name;
  dlc_dtype dtype;
  std::vector<long> shape;
  size_t bytes;
};

class Model {
public:
  static Model load(const std::string &path) {
    dlc_model *m = nullptr;
    check(dlc_model_load_file(path.c_str(), &m));
    return Model(m);
  }
  static Model fromMemory(const void *data, size_t size) {
    dlc_model *m = nullptr;
    check(dlc_model_load_memory(data, size, &m));
    return Model(m);
  }
  /// A package linked into the program (not copied; must outlive the model).
  static Model fromStatic(const void *data, size_t size) {
    dlc_model *m = nullptr;
    check(dlc_model_load_static(data, size, &m));
    return Model(m);
  }
  std::vector<TensorInfo> inputs() const { return infos(false); }
  /// The smallest and largest shape input `index` takes (equal to its shape unless the
  /// package was compiled with --input-shape ranges).
  std::pair<std::vector<long>, std::vector<long>> inputShapeRange(int index) const {
    dlc_tensor_info ti;
    check(dlc_model_input_info(m_.get(), index, &ti));
    std::vector<long> lo(static_cast<size_t>(ti.rank)), hi(static_cast<size_t>(ti.rank));
    check(dlc_model_input_shape_range(m_.get(), index, lo.data(), hi.data()));
    return {lo, hi};
  }
  std::vector<TensorInfo> outputs() const { return infos(true); }
  /// Training packages: the variables (parameters, optimizer and model state).
  std::vector<TensorInfo> variables() const {
    int n = 0;
    check(dlc_model_num_variables(m_.get(), &n));
    std::vector<TensorInfo> r;
    for (int i = 0; i < n; ++i) {
      dlc_tensor_info ti;
      check(dlc_model_variable_info(m_.get(), i, &ti, nullptr));
      r.push_back({ti.name, ti.dtype, std::vector<long>(ti.shape, ti.shape + ti.rank), ti.bytes});
    }
    return r;
  }
  dlc_model *get() const { return m_.get(); }

private:
  explicit Model(dlc_model *m) : m_(m, &dlc_model_free) {}
  std::vector<TensorInfo> infos(bool out) const {
    int n = 0;
    check(out ? dlc_model_num_outputs(m_.get(), &n) : dlc_model_num_inputs(m_.get(), &n));
    std::vector<TensorInfo> r;
    for (int i = 0; i < n; ++i) {
      dlc_tensor_info ti;
      check(out ? dlc_model_output_info(m_.get(), i, &ti) : dlc_model_input_info(m_.get(), i, &ti));
      r.push_back({ti.name, ti.dtype, std::vector<long>(ti.shape, ti.shape + ti.rank), ti.bytes});
    }
    return r;
  }
  std::shared_ptr<dlc_model> m_;
};

struct SessionOptions {
  dlc_device device = DLC_DEVICE_AUTO;
  int emuThreads = 0; // 0: one per core
  int cudaDevice = 0; // CUDA device ordinal
};

/// One per thread; sessions of one Model share its weights.
class Session {
public:
  explicit Session(const Model &model, dlc_device device = DLC_DEVICE_AUTO)
      : Session(model, SessionOptions{device, 0, 0}) {}
  Session(const Model &model, const SessionOptions &opts)
      : model_(model), s_(nullptr, &dlc_session_free) {
    dlc_session_options o;
    std::memset(&o, 0, sizeof o);
    o.device = opts.device;
    o.emu_threads = opts.emuThreads;
    o.cuda_device = opts.cudaDevice;
    dlc_session *s = nullptr;
    check(dlc_session_create(model.get(), &o, &s));
    s_.reset(s);
  }
  std::string device() const { return dlc_session_device(s_.get()); }
  void setInput(const std::string &name, const void *data, size_t bytes) {
    check(dlc_session_set_input(s_.get(), name.c_str(), data, bytes));
  }
  /// Checks T against the input's dtype and v's size against its element count.
  template <class T> void setInput(const std::string &name, const std::vector<T> &v) {
    const TensorInfo t = find(model_.inputs(), name, "input");
    if (t.dtype != DTypeOf<T>::value)
      throw Error(DLC_ERROR_INVALID_ARGUMENT,
                  "input '" + name + "': the element type does not match the model's");
    setInput(name, v.data(), v.size() * sizeof(T));
  }
  /// Checked against the model's dtype and shape.
  void setInput(const std::string &name, dlc_dtype dtype, const std::vector<long> &shape,
                const void *data) {
    check(dlc_session_set_input_tensor(s_.get(), name.c_str(), dtype, shape.data(),
                                       static_cast<int>(shape.size()), data));
  }
  /// cuda only: zero-copy I/O at caller-owned device addresses, on the caller's stream.
  void bindDeviceInput(const std::string &name, unsigned long ptr) {
    check(dlc_session_bind_device_input(s_.get(), name.c_str(), ptr));
  }
  void bindDeviceOutput(const std::string &name, unsigned long ptr) {
    check(dlc_session_bind_device_output(s_.get(), name.c_str(), ptr));
  }
  void setStream(void *cuStream) { check(dlc_session_set_stream(s_.get(), cuStream)); }
  void run() { check(dlc_session_run(s_.get())); }

  // Training packages (dlc compile --train).
  /// One training step: set the inputs and the label, then step() returns the loss.
  float step() {
    run();
    return output<float>(model_.outputs().at(0).name).at(0);
  }
  /// The loss (and outputs) of the current parameters, without a step.
  float evaluate() {
    check(dlc_session_evaluate(s_.get()));
    return output<float>(model_.outputs().at(0).name).at(0);
  }
  template <class T> std::vector<T> variable(const std::string &name) {
    const TensorInfo t = find(model_.variables(), name, "variable");
    if (t.dtype != DTypeOf<T>::value)
      throw Error(DLC_ERROR_INVALID_ARGUMENT,
                  "variable '" + name + "': the element type does not match");
    std::vector<T> v(t.bytes / sizeof(T));
    check(dlc_session_get_variable(s_.get(), name.c_str(), v.data(), t.bytes));
    return v;
  }
  template <class T> void setVariable(const std::string &name, const std::vector<T> &v) {
    const TensorInfo t = find(model_.variables(), name, "variable");
    if (t.dtype != DTypeOf<T>::value)
      throw Error(DLC_ERROR_INVALID_ARGUMENT,
                  "variable '" + name + "': the element type does not match");
    check(dlc_session_set_variable(s_.get(), name.c_str(), v.data(), v.size() * sizeof(T)));
  }
  void saveCheckpoint(const std::string &path) {
    check(dlc_session_save_checkpoint(s_.get(), path.c_str()));
  }
  void loadCheckpoint(const std::string &path) {
    check(dlc_session_load_checkpoint(s_.get(), path.c_str()));
  }
  void getOutput(const std::string &name, void *data, size_t bytes) {
    check(dlc_session_get_output(s_.get(), name.c_str(), data, bytes));
  }
  /// The output's shape at the last run (it follows the inputs' in a shape-range package).
  std::vector<long> outputShape(const std::string &name) const {
    std::vector<long> shape(find(model_.outputs(), name, "output").shape.size());
    check(dlc_session_output_shape(s_.get(), name.c_str(), shape.data(),
                                   static_cast<int>(shape.size())));
    return shape;
  }
  template <class T> std::vector<T> output(const std::string &name) {
    const TensorInfo t = find(model_.outputs(), name, "output");
    if (t.dtype != DTypeOf<T>::value)
      throw Error(DLC_ERROR_INVALID_ARGUMENT,
                  "output '" + name + "': the element type does not match the model's");
    size_t n = 1;
    for (long d : outputShape(name))
      n *= static_cast<size_t>(d);
    std::vector<T> v(n);
    getOutput(name, v.data(), n * sizeof(T));
    return v;
  }

private:
  static TensorInfo find(const std::vector<TensorInfo> &list, const std::string &name,
                         const char *what) {
    for (const TensorInfo &t : list)
      if (t.name == name)
        return t;
    throw Error(DLC_ERROR_INVALID_ARGUMENT,
                std::string("the model has no ") + what + " named '" + name + "'");
  }
  Model model_;
  std::unique_ptr<dlc_session, void (*)(dlc_session *)> s_;
};

} // namespace dlc

#endif // DLC_RUNTIME_HPP

//===- CApi.cpp - The C API over the C++ runtime ----------------------------===//
//
// Every entry point validates its handles and sizes, converts Status into a
// dlc_status plus a thread-local message, and catches every C++ exception so that
// none crosses the C boundary.
//===----------------------------------------------------------------------===//
#include "dlc/runtime.h"
#include "dlc/runtime/Runtime.h"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

using namespace dlc;

static_assert(sizeof(long) == 8 && sizeof(int64_t) == sizeof(long), "the C API assumes LP64");

struct dlc_model {
  std::shared_ptr<const rt::Model> model;
};

struct dlc_session {
  std::unique_ptr<rt::Session> session;
  std::string device;
};

namespace {

thread_local std::string lastError;

dlc_status toC(StatusCode c) {
  switch (c) {
  case StatusCode::Ok:
    return DLC_OK;
  case StatusCode::InvalidArgument:
    return DLC_ERROR_INVALID_ARGUMENT;
  case StatusCode::InvalidPackage:
    return DLC_ERROR_INVALID_PACKAGE;
  case StatusCode::Unavailable:
    return DLC_ERROR_UNAVAILABLE;
  case StatusCode::LaunchFailure:
    return DLC_ERROR_LAUNCH;
  case StatusCode::IoError:
    return DLC_ERROR_IO;
  case StatusCode::DataError:
    return DLC_ERROR_DATA;
  case StatusCode::Internal:
    return DLC_ERROR_INTERNAL;
  }
  return DLC_ERROR_INTERNAL;
}

dlc_status fail(dlc_status s, const std::string &msg) {
  lastError = msg;
  return s;
}

dlc_status report(const Status &s) {
  if (s.isOk()) {
    lastError.clear();
    return DLC_OK;
  }
  return fail(toC(s.code()), s.message());
}

/// Runs `body` and turns exceptions into DLC_ERROR_INTERNAL.
template <class F> dlc_status guarded(F &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(DLC_ERROR_INTERNAL, "out of memory");
  } catch (const std::exception &e) {
    return fail(DLC_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(DLC_ERROR_INTERNAL, "internal error");
  }
}

/// Name, dtype, shape and size of a TensorInfo or a Variable.
template <class T> void describe(const T *t, dlc_tensor_info *info) {
  info->name = t->name()->c_str();
  info->dtype = static_cast<dlc_dtype>(t->dtype());
  info->rank = t->shape() ? static_cast<int>(t->shape()->size()) : 0;
  info->shape = t->shape() ? reinterpret_cast<const long *>(t->shape()->data()) : nullptr;
  size_t bytes = pkg::dtypeSize(t->dtype());
  if (t->shape())
    for (int64_t d : *t->shape())
      bytes *= static_cast<size_t>(d);
  info->bytes = bytes;
}

dlc_status tensorInfo(const dlc_model *m, int index, bool output, dlc_tensor_info *info) {
  if (!m || !info)
    return fail(DLC_ERROR_INVALID_ARGUMENT, "null model or info pointer");
  const auto *list = output ? m->model->meta().outputs() : m->model->meta().inputs();
  int n = list ? static_cast<int>(list->size()) : 0;
  if (index < 0 || index >= n)
    return fail(DLC_ERROR_INVALID_ARGUMENT, std::string(output ? "output" : "input") + " index " +
                                                std::to_string(index) + " is out of range (" +
                                                std::to_string(n) + ")");
  describe(list->Get(index), info);
  lastError.clear();
  return DLC_OK;
}

/// The dlc_model_load_* functions: checks, then wraps what `load` returns.
template <class F> dlc_status loadModel(const void *source, dlc_model **out, F &&load) {
  return guarded([&] {
    if (!source || !out)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null source or output pointer");
    *out = nullptr;
    auto pf = load();
    if (!pf)
      return report(pf.status());
    *out = new dlc_model{std::make_shared<const rt::Model>(std::move(*pf))};
    return report(Status::ok());
  });
}

} // namespace

extern "C" {

const char *dlc_last_error(void) {
  return lastError.c_str();
}
int dlc_runtime_api_version(void) {
  return DLC_RUNTIME_API_VERSION;
}

const char *dlc_status_string(dlc_status s) {
  switch (s) {
  case DLC_OK:
    return "ok";
  case DLC_ERROR_INVALID_ARGUMENT:
    return "invalid argument";
  case DLC_ERROR_INVALID_PACKAGE:
    return "invalid package";
  case DLC_ERROR_UNAVAILABLE:
    return "unavailable";
  case DLC_ERROR_LAUNCH:
    return "launch failure";
  case DLC_ERROR_INTERNAL:
    return "internal error";
  case DLC_ERROR_IO:
    return "I/O error";
  case DLC_ERROR_DATA:
    return "invalid input data";
  case DLC_STATUS_FORCE_INT32_:
    break;
  }
  return "unknown status";
}

dlc_status dlc_model_load_file(const char *path, dlc_model **out) {
  return loadModel(path, out, [&] { return pkg::PackageFile::load(path); });
}

dlc_status dlc_model_load_memory(const void *data, size_t size, dlc_model **out) {
  return loadModel(data, out, [&] { return pkg::PackageFile::fromBytes(data, size, "<memory>"); });
}

dlc_status dlc_model_load_static(const void *data, size_t size, dlc_model **out) {
  return loadModel(
      data, out, [&] { return pkg::PackageFile::fromStaticBytes(data, size, "<linked package>"); });
}

void dlc_model_free(dlc_model *model) {
  delete model;
}

dlc_status dlc_model_num_inputs(const dlc_model *m, int *count) {
  if (!m || !count)
    return fail(DLC_ERROR_INVALID_ARGUMENT, "null model or count pointer");
  *count = m->model->meta().inputs() ? static_cast<int>(m->model->meta().inputs()->size()) : 0;
  return DLC_OK;
}

dlc_status dlc_model_num_outputs(const dlc_model *m, int *count) {
  if (!m || !count)
    return fail(DLC_ERROR_INVALID_ARGUMENT, "null model or count pointer");
  *count = m->model->meta().outputs() ? static_cast<int>(m->model->meta().outputs()->size()) : 0;
  return DLC_OK;
}

dlc_status dlc_model_input_info(const dlc_model *m, int index, dlc_tensor_info *info) {
  return tensorInfo(m, index, false, info);
}
dlc_status dlc_model_output_info(const dlc_model *m, int index, dlc_tensor_info *info) {
  return tensorInfo(m, index, true, info);
}

namespace {

dlc_status createSession(dlc_model *model, const dlc_session_options *options, bool allowHostCode,
                         dlc_session **out, dlc_tactics tactics = DLC_TACTICS_DEFAULT) {
  return guarded([&] {
    if (!model || !out)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null model or output pointer");
    *out = nullptr;
    rt::SessionOptions so;
    if (tactics < DLC_TACTICS_DEFAULT || tactics > DLC_TACTICS_VENDOR)
      return fail(DLC_ERROR_INVALID_ARGUMENT,
                  "unknown tactics family " + std::to_string(static_cast<int>(tactics)));
    so.tactics = static_cast<rt::SessionOptions::Tactics>(tactics);
    if (options) {
      if (options->device < DLC_DEVICE_AUTO || options->device > DLC_DEVICE_EMU)
        return fail(DLC_ERROR_INVALID_ARGUMENT,
                    "unknown device " + std::to_string(options->device));
      so.device = static_cast<rt::DeviceKind>(options->device);
      so.emuThreads = options->emu_threads;
      so.cudaDevice = options->cuda_device;
      so.check = options->check != 0;
      so.cudaGraphs = options->no_cuda_graphs == 0;
    }
    so.allowHostCode = allowHostCode;
    auto s = rt::Session::create(model->model, so);
    if (!s)
      return report(s.status());
    auto *h = new dlc_session{std::move(*s), ""};
    h->device = h->session->backendDescription();
    *out = h;
    return report(Status::ok());
  });
}

} // namespace

dlc_status dlc_session_create(dlc_model *model, const dlc_session_options *options,
                              dlc_session **out) {
  return createSession(model, options, /*allowHostCode=*/false, out);
}

dlc_status dlc_session_create_allowing_host_code(dlc_model *model,
                                                 const dlc_session_options *options,
                                                 dlc_session **out) {
  return createSession(model, options, /*allowHostCode=*/true, out);
}

dlc_status dlc_session_create_with_tactics(dlc_model *model, const dlc_session_options *options,
                                           dlc_tactics tactics, dlc_session **out) {
  return createSession(model, options, /*allowHostCode=*/false, out, tactics);
}

void dlc_session_free(dlc_session *session) {
  delete session;
}

const char *dlc_session_device(const dlc_session *session) {
  return session ? session->device.c_str() : "";
}

dlc_status dlc_session_set_input(dlc_session *s, const char *name, const void *data, size_t size) {
  return guarded([&] {
    if (!s || !name)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or name");
    return report(s->session->setInputBytes(name, data, size));
  });
}

/// The largest rank the C API takes: a caller's shape array is read up to `rank`.
constexpr int kMaxRank = 64;

dlc_status dlc_session_set_input_tensor(dlc_session *s, const char *name, dlc_dtype dtype,
                                        const long *shape, int rank, const void *data) {
  return guarded([&] {
    if (!s || !name)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or name");
    if (rank < 0 || rank > kMaxRank || (rank > 0 && !shape))
      return fail(DLC_ERROR_INVALID_ARGUMENT, "input '" + std::string(name) +
                                                  "': null shape, or a rank outside 0.." +
                                                  std::to_string(kMaxRank));
    int i = s->session->inputIndex(name);
    if (i < 0)
      return fail(DLC_ERROR_INVALID_ARGUMENT,
                  pkg::unknownInputMessage(s->session->package(), name));
    const pkg::TensorInfo *in = s->session->package().inputs()->Get(i);
    if (static_cast<int>(in->dtype()) != static_cast<int>(dtype))
      return fail(DLC_ERROR_INVALID_ARGUMENT,
                  "input '" + std::string(name) + "' is " + pkg::dtypeName(in->dtype()) + ", got " +
                      (dtype >= DLC_F32 && dtype <= DLC_BOOL
                           ? pkg::dtypeName(static_cast<pkg::DType>(dtype))
                           : "dtype " + std::to_string(int(dtype))));
    if (s->session->package().shape_ranges()) { // any shape in the ranges: the session checks it
      rt::HostTensor t;
      t.dtype = in->dtype();
      t.shape.assign(shape, shape + rank);
      if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; }))
        return fail(DLC_ERROR_INVALID_ARGUMENT,
                    "input '" + std::string(name) + "': a negative dimension");
      if (!data && t.byteSize())
        return fail(DLC_ERROR_INVALID_ARGUMENT, "input '" + std::string(name) + "': data is null");
      const auto *bytes = static_cast<const uint8_t *>(data);
      t.data.assign(bytes, bytes + (data ? t.byteSize() : 0));
      return report(s->session->setInput(name, t));
    }
    auto want = [&] {
      std::string r = "[";
      for (size_t k = 0; in->shape() && k < in->shape()->size(); ++k)
        r += (k ? "," : "") + std::to_string(in->shape()->Get(k));
      return r + "]";
    };
    bool same = in->shape() && static_cast<int>(in->shape()->size()) == rank;
    for (int k = 0; same && k < rank; ++k)
      same = in->shape()->Get(k) == shape[k];
    if (!same) {
      std::string got = "[";
      for (int k = 0; k < rank; ++k)
        got += (k ? "," : "") + std::to_string(shape[k]);
      return fail(DLC_ERROR_INVALID_ARGUMENT,
                  "input '" + std::string(name) + "' has shape " + want() + ", got " + got + "]");
    }
    size_t bytes = pkg::dtypeSize(in->dtype());
    for (int k = 0; k < rank; ++k)
      bytes *= static_cast<size_t>(shape[k]);
    return report(s->session->setInputBytes(name, data, bytes));
  });
}

dlc_status dlc_model_input_shape_range(const dlc_model *m, int index, long *minShape,
                                       long *maxShape) {
  return guarded([&] {
    dlc_tensor_info info;
    if (dlc_status st = tensorInfo(m, index, false, &info))
      return st;
    if (info.rank > 0 && (!minShape || !maxShape))
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null shape pointer");
    pkg::ShapeBounds b = pkg::inputShapeBounds(m->model->meta(), static_cast<uint32_t>(index));
    std::copy(b.min.begin(), b.min.end(), minShape);
    std::copy(b.max.begin(), b.max.end(), maxShape);
    return DLC_OK;
  });
}

dlc_status dlc_session_output_shape(dlc_session *s, const char *name, long *shape, int rank) {
  return guarded([&] {
    if (!s || !name || (rank > 0 && !shape))
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session, name or shape pointer");
    if (s->session->outputIndex(name) < 0)
      return fail(DLC_ERROR_INVALID_ARGUMENT,
                  "the model has no output named '" + std::string(name) + "'");
    std::vector<int64_t> got = s->session->outputShape(name);
    if (static_cast<int>(got.size()) != rank)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "output '" + std::string(name) + "' has rank " +
                                                  std::to_string(got.size()) + ", got room for " +
                                                  std::to_string(rank));
    std::copy(got.begin(), got.end(), shape);
    return report(Status::ok());
  });
}

dlc_status dlc_session_bind_device_input(dlc_session *s, const char *name, unsigned long ptr) {
  return guarded([&] {
    if (!s || !name)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or name");
    return report(s->session->bindDevice(name, false, ptr));
  });
}

dlc_status dlc_session_bind_device_output(dlc_session *s, const char *name, unsigned long ptr) {
  return guarded([&] {
    if (!s || !name)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or name");
    return report(s->session->bindDevice(name, true, ptr));
  });
}

dlc_status dlc_session_set_stream(dlc_session *s, void *stream) {
  return guarded([&] {
    if (!s)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session");
    return report(s->session->setStream(stream));
  });
}

dlc_status dlc_session_run(dlc_session *s) {
  return guarded([&] {
    if (!s)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session");
    return report(s->session->run());
  });
}

dlc_status dlc_session_get_output(dlc_session *s, const char *name, void *data, size_t size) {
  return guarded([&] {
    if (!s || !name)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or name");
    return report(s->session->getOutputBytes(name, data, size));
  });
}

dlc_status dlc_model_num_variables(const dlc_model *m, int *count) {
  if (!m || !count)
    return fail(DLC_ERROR_INVALID_ARGUMENT, "null model or count pointer");
  *count =
      m->model->meta().variables() ? static_cast<int>(m->model->meta().variables()->size()) : 0;
  return DLC_OK;
}

dlc_status dlc_model_variable_info(const dlc_model *m, int index, dlc_tensor_info *info,
                                   int *trainable) {
  if (!m || !info)
    return fail(DLC_ERROR_INVALID_ARGUMENT, "null model or info pointer");
  const auto *list = m->model->meta().variables();
  int n = list ? static_cast<int>(list->size()) : 0;
  if (index < 0 || index >= n)
    return fail(DLC_ERROR_INVALID_ARGUMENT, "variable index " + std::to_string(index) +
                                                " is out of range (" + std::to_string(n) + ")");
  describe(list->Get(index), info);
  if (trainable)
    *trainable = list->Get(index)->trainable() ? 1 : 0;
  lastError.clear();
  return DLC_OK;
}

dlc_status dlc_session_evaluate(dlc_session *s) {
  return guarded([&] {
    if (!s)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session");
    return report(s->session->evaluate());
  });
}

dlc_status dlc_session_get_variable(dlc_session *s, const char *name, void *data, size_t size) {
  return guarded([&] {
    if (!s || !name || (!data && size))
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session, name or data");
    auto v = s->session->getVariable(name);
    if (!v)
      return report(v.status());
    if (size != v->data.size())
      return fail(DLC_ERROR_INVALID_ARGUMENT, "variable '" + std::string(name) + "' holds " +
                                                  std::to_string(v->data.size()) + " bytes, not " +
                                                  std::to_string(size));
    std::memcpy(data, v->data.data(), size);
    return report(Status::ok());
  });
}

dlc_status dlc_session_set_variable(dlc_session *s, const char *name, const void *data,
                                    size_t size) {
  return guarded([&] {
    if (!s || !name || (!data && size))
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session, name or data");
    return report(s->session->setVariableBytes(name, data, size));
  });
}

dlc_status dlc_session_reset_variables(dlc_session *s) {
  return guarded([&] {
    if (!s)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session");
    return report(s->session->resetVariables());
  });
}

dlc_status dlc_session_save_checkpoint(dlc_session *s, const char *path) {
  return guarded([&] {
    if (!s || !path)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or path");
    return report(s->session->saveCheckpoint(path));
  });
}

dlc_status dlc_session_load_checkpoint(dlc_session *s, const char *path) {
  return guarded([&] {
    if (!s || !path)
      return fail(DLC_ERROR_INVALID_ARGUMENT, "null session or path");
    return report(s->session->loadCheckpoint(path));
  });
}

} // extern "C"

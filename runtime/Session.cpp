#include "Backend.h"
#include "dlc/support/Half.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace dlc::rt {

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double HostTensor::element(int64_t i) const {
  const uint8_t *p = data.data();
  auto rd = [&](auto v) {
    std::memcpy(&v, p + i * sizeof(v), sizeof(v));
    return static_cast<double>(v);
  };
  switch (dtype) {
  case pkg::DType::F32:
    return rd(float{});
  case pkg::DType::F64:
    return rd(double{});
  case pkg::DType::I64:
    return rd(int64_t{});
  case pkg::DType::I32:
    return rd(int32_t{});
  case pkg::DType::I16:
    return rd(int16_t{});
  case pkg::DType::I8:
    return rd(int8_t{});
  case pkg::DType::U8:
  case pkg::DType::Bool:
    return rd(uint8_t{});
  case pkg::DType::F8E4M3:
  case pkg::DType::F8E5M2:
    return f8ToFloat(p[i], dtype == pkg::DType::F8E5M2);
  case pkg::DType::U16:
    return rd(uint16_t{});
  case pkg::DType::U32:
    return rd(uint32_t{});
  case pkg::DType::U64:
    return rd(uint64_t{});
  case pkg::DType::F16:
  case pkg::DType::BF16: {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return dtype == pkg::DType::F16 ? halfToFloat(h) : bf16ToFloat(h);
  }
  }
  return 0;
}

int64_t HostTensor::firstNonFinite() const {
  if (dtype != pkg::DType::F32 && dtype != pkg::DType::F64 && dtype != pkg::DType::F16 &&
      dtype != pkg::DType::BF16)
    return -1;
  for (int64_t i = 0, n = numElements(); i < n; ++i)
    if (!std::isfinite(element(i)))
      return i;
  return -1;
}

HostTensor HostTensor::zeros(pkg::DType dt, std::vector<int64_t> shape) {
  HostTensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.data.assign(t.byteSize(), 0);
  return t;
}

const char *deviceKindName(DeviceKind k) {
  switch (k) {
  case DeviceKind::Auto:
    return "auto";
  case DeviceKind::Cuda:
    return "cuda";
  case DeviceKind::Emu:
    return "emu";
  }
  return "?";
}

struct Model::Shared {
  std::mutex mu;
  std::map<std::pair<DeviceKind, int>, std::shared_ptr<WeightStore>> stores;
};

Model::Model(std::shared_ptr<const pkg::PackageFile> pkg)
    : pkg_(std::move(pkg)), shared_(new Shared()) {}
Model::~Model() = default;

std::shared_ptr<WeightStore>
Model::weights(DeviceKind kind, int device,
               const std::function<std::shared_ptr<WeightStore>()> &make) const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  auto &slot = shared_->stores[{kind, device}];
  if (!slot)
    slot = make();
  return slot;
}

Session::~Session() = default;

std::string shapeString(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

template <class T> static std::vector<int64_t> shapeOf(const T *t) {
  return t->shape() ? std::vector<int64_t>(t->shape()->begin(), t->shape()->end())
                    : std::vector<int64_t>{};
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<const pkg::PackageFile> pkg,
                                                 const SessionOptions &opts) {
  return create(std::make_shared<const Model>(std::move(pkg)), opts);
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<const Model> model,
                                                 const SessionOptions &opts) {
  if (opts.emuThreads < 0 || opts.emuThreads > kMaxEmuThreads)
    return Status(StatusCode::InvalidArgument, "emu threads must be 0 (one per core) to " +
                                                   std::to_string(kMaxEmuThreads) + ", got " +
                                                   std::to_string(opts.emuThreads));
  if (const pkg::Package &m = model->file().meta();
      opts.maxMemoryBytes && m.arena_bytes() + m.weight_bytes() > opts.maxMemoryBytes)
    return Status(StatusCode::InvalidArgument,
                  model->file().name() + " needs " +
                      std::to_string(m.arena_bytes() + m.weight_bytes()) + " bytes (arena " +
                      std::to_string(m.arena_bytes()) + ", weights " +
                      std::to_string(m.weight_bytes()) + "), more than the session's limit of " +
                      std::to_string(opts.maxMemoryBytes) + " bytes");
  std::unique_ptr<Session> s(new Session());
  s->model_ = std::move(model);
  s->pkg_ = std::shared_ptr<const pkg::PackageFile>(s->model_, &s->model_->file());
  s->opts_ = opts;
  // Test suites turn the emu checks on for every session they make (README).
  if (const char *e = std::getenv("DLC_EMU_CHECK"); e && *e && std::string(e) != "0")
    s->opts_.check = true;
  if (uint32_t zero = s->pkg_->meta().zero_ranks();
      zero && static_cast<uint32_t>(opts.rank.size) != zero)
    return Status(StatusCode::InvalidArgument,
                  s->pkg_->name() + " shards its optimizer state over " + std::to_string(zero) +
                      " ranks (dlc compile --zero " + std::to_string(zero) + "): run it on " +
                      std::to_string(zero) + " ranks, not " + std::to_string(opts.rank.size));
  else if (zero && !opts.communicator)
    return Status(StatusCode::InvalidArgument,
                  s->pkg_->name() +
                      ": ZeRO-1 checkpoints gather the optimizer's shards through MPI: start the "
                      "ranks with mpirun");
  if (opts.device == DeviceKind::Cuda || opts.device == DeviceKind::Auto) {
    auto cuda = createCudaBackend(s->opts_);
    if (cuda) {
      s->backend_ = std::move(*cuda);
    } else if (opts.device == DeviceKind::Cuda) {
      return Status(cuda.status().code(), "device cuda: " + cuda.status().message());
    } else if (cuda.status().code() != StatusCode::Unavailable) {
      return cuda.takeStatus(); // e.g. a device ordinal that does not exist: not a reason for emu
    }
  }
  if (!s->backend_)
    s->backend_ = createEmuBackend(s->opts_);
  if (Status st = s->backend_->prepare(*s->model_))
    return st;
  if (Status st = s->resetVariables())
    return st;
  const pkg::Package &m = s->pkg_->meta();
  s->inputSet_.assign(m.inputs() ? m.inputs()->size() : 0, false);
  // Steps planned for another architecture (tile choices) do not run here.
  int arch = s->arch_ = chooseStepArch(stepArchs(m), s->backend_->computeCapability());
  // Alternatives (pkg::Step::alt_group): a persistent kernel's steps where this device
  // holds its cooperative grid at once, else the per-step schedule.
  auto chooseAlternatives = [&](const auto *steps, std::map<uint32_t, uint8_t> &chosen) {
    if (!steps)
      return;
    for (const pkg::Step *st : *steps) {
      if (!st->alt_group() || st->tactic() != pkg::TacticKind::None ||
          chosen.count(st->alt_group()) || st->alt() != 1 || !stepRunsOn(*st, arch) ||
          st->op_type() != pkg::StepKind::Launch)
        continue;
      const pkg::Launch *l = st->op_as_Launch();
      if (!m.kernels() || l->kernel() >= m.kernels()->size() ||
          !m.kernels()->Get(l->kernel())->cooperative())
        continue;
      bool fits = false;
      std::string why;
      Status f = s->backend_->fitsResident(*l, fits, why);
      if (f)
        why = f.message();
      const std::string node = st->node() ? st->node()->str() : "?";
      chosen[st->alt_group()] = fits ? 1 : 2;
      std::string note =
          fits ? "'" + node + "' runs its persistent kernel (" + why + ")"
               : "'" + node + "' runs step by step: its persistent kernel's grid does not fit " +
                     "this device at once (" + why + ")";
      if (std::find(s->scheduleNotes_.begin(), s->scheduleNotes_.end(), note) ==
          s->scheduleNotes_.end())
        s->scheduleNotes_.push_back(note);
    }
  };
  auto add = [&](const Tensors *inputs, const Tensors *outputs, const auto *buffers,
                 const auto *steps, const auto *checks, uint32_t checkBuffer) {
    Schedule sc;
    chooseAlternatives(steps, sc.chosen);
    sc.all = steps;
    sc.inputs = inputs;
    sc.outputs = outputs;
    sc.buffers = buffers;
    sc.checks = checks;
    sc.checkBuffer = checkBuffer;
    s->buildSteps(sc); // tactics: the default until they are chosen
    s->schedules_.push_back(std::move(sc));
  };
  add(m.inputs(), m.outputs(), m.buffers(), m.steps(), m.checks(), m.check_buffer());
  if (m.variants())
    for (const pkg::ShapeVariant *v : *m.variants())
      add(v->inputs(), v->outputs(), v->buffers(), v->steps(), v->checks(), v->check_buffer());
  // The package's own schedule's tactics now; a shape variant's when it first runs.
  if (Status st = s->chooseTactics(0))
    return st;
  s->ranged_ = s->schedules_.size() > 1;
  if (s->ranged_) {
    s->staged_.resize(s->inputSet_.size());
    for (size_t i = 0; i < s->staged_.size(); ++i)
      s->staged_[i].shape = shapeOf(m.inputs()->Get(i));
  }
  return s;
}

namespace {

const pkg::Variable *findVariable(const pkg::Package &m, const std::string &name) {
  if (m.variables())
    for (const pkg::Variable *v : *m.variables())
      if (v->name()->str() == name)
        return v;
  return nullptr;
}

} // namespace

std::vector<std::string> Session::variableNames() const {
  std::vector<std::string> names;
  if (const auto *vs = pkg_->meta().variables())
    for (const pkg::Variable *v : *vs)
      names.push_back(v->name()->str());
  return names;
}

bool Session::variableTrainable(const std::string &name) const {
  const pkg::Variable *v = findVariable(pkg_->meta(), name);
  return v && v->trainable();
}

bool Session::variableSharded(const std::string &name) const {
  const pkg::Variable *v = findVariable(pkg_->meta(), name);
  return v && v->sharded();
}

Result<HostTensor> Session::getVariable(const std::string &name) const {
  const pkg::Variable *v = findVariable(pkg_->meta(), name);
  if (!v)
    return Status(StatusCode::InvalidArgument, "the package has no variable '" + name + "'");
  HostTensor t = HostTensor::zeros(v->dtype(), shapeOf(v));
  if (Status st = backend_->download(t.data.data(), pkg::BufRef(v->buffer(), 0), t.byteSize()))
    return st;
  return t;
}

namespace {

/// The variable `name` when `t` has its dtype and shape; else an error.
Result<const pkg::Variable *> matchVariable(const pkg::Package &m, const std::string &name,
                                            const HostTensor &t) {
  const pkg::Variable *v = findVariable(m, name);
  if (!v)
    return Status(StatusCode::InvalidArgument, "the package has no variable '" + name + "'");
  if (t.dtype != v->dtype() || t.shape != shapeOf(v) || t.data.size() != t.byteSize())
    return Status(StatusCode::InvalidArgument, "variable '" + name + "' is " +
                                                   pkg::dtypeName(v->dtype()) +
                                                   shapeString(shapeOf(v)) + ", got " +
                                                   pkg::dtypeName(t.dtype) + shapeString(t.shape));
  return v;
}

} // namespace

Status Session::setVariable(const std::string &name, const HostTensor &t) {
  auto v = matchVariable(pkg_->meta(), name, t);
  if (!v)
    return v.takeStatus();
  return backend_->upload(pkg::BufRef((*v)->buffer(), 0), t.data.data(), t.byteSize());
}

Status Session::setVariableBytes(const std::string &name, const void *data, size_t size) {
  const pkg::Variable *v = findVariable(pkg_->meta(), name);
  if (!v)
    return Status(StatusCode::InvalidArgument, "the package has no variable '" + name + "'");
  if (size != v->data()->size())
    return Status(StatusCode::InvalidArgument, "variable '" + name + "' holds " +
                                                   std::to_string(v->data()->size()) +
                                                   " bytes, not " + std::to_string(size));
  return backend_->upload(pkg::BufRef(v->buffer(), 0), data, size);
}

Status Session::resetVariables() {
  if (const auto *vs = pkg_->meta().variables())
    for (const pkg::Variable *v : *vs)
      if (Status st = backend_->upload(pkg::BufRef(v->buffer(), 0), pkg_->section(v->data()),
                                       v->data()->size()))
        return st;
  return Status::ok();
}

Status Session::saveCheckpoint(const std::string &path) const {
  NpzArrays vars;
  for (const std::string &name : variableNames()) {
    auto v = getVariable(name);
    if (!v)
      return v.takeStatus();
    if (opts_.rank.size > 1 && variableSharded(name)) { // a collective: every rank sends its shard
      HostTensor all = HostTensor::zeros(v->dtype, {v->numElements() * opts_.rank.size});
      DLC_RETURN_IF_ERROR(
          opts_.communicator->allGather(v->data.data(), all.data.data(), v->data.size()));
      v = std::move(all);
    }
    // A diverged run keeps the last good checkpoint instead of replacing it.
    if (int64_t bad = v->firstNonFinite(); bad >= 0)
      return Status(StatusCode::DataError,
                    "variable '" + name + "' holds a non-finite value (element " +
                        std::to_string(bad) + "): the checkpoint '" + path + "' is not written");
    vars[name] = std::move(*v);
  }
  return opts_.rank.rank == 0 ? writeNpz(path, vars) : Status::ok();
}

Status Session::loadCheckpoint(const std::string &path) {
  auto ck = readNpz(path);
  if (!ck)
    return ck.takeStatus();
  // Check everything before changing anything.
  for (const std::string &name : variableNames()) {
    auto it = ck->find(name);
    if (it == ck->end())
      return Status(StatusCode::InvalidArgument,
                    "checkpoint '" + path + "' has no value for the variable '" + name + "'");
    if (opts_.rank.size > 1 && variableSharded(name)) { // every rank's shard: this rank's
      HostTensor &t = it->second;
      size_t share = findVariable(pkg_->meta(), name)->data()->size();
      if (t.byteSize() != share * static_cast<size_t>(opts_.rank.size))
        return Status(StatusCode::InvalidArgument,
                      "checkpoint '" + path + "': '" + name + "' is not " +
                          std::to_string(opts_.rank.size) +
                          " shards (was it saved by this package on as many ranks?)");
      t.data.erase(t.data.begin(),
                   t.data.begin() + static_cast<std::ptrdiff_t>(share * opts_.rank.rank));
      t.data.resize(share);
      t.shape = {static_cast<int64_t>(share / pkg::dtypeSize(t.dtype))};
    }
    if (auto v = matchVariable(pkg_->meta(), name, it->second); !v)
      return Status(StatusCode::InvalidArgument,
                    "checkpoint '" + path + "': " + v.status().message());
  }
  for (const std::string &name : variableNames())
    DLC_RETURN_IF_ERROR(setVariable(name, ck->at(name)));
  return Status::ok();
}

Status Session::broadcastVariables(int root) {
  if (opts_.rank.size <= 1)
    return Status::ok();
  if (const auto *vs = pkg_->meta().variables())
    for (const pkg::Variable *v : *vs)
      if (!v->sharded()) // each rank's own shard of ZeRO-1 optimizer state
        DLC_RETURN_IF_ERROR(
            backend_->broadcast(pkg::BufRef(v->buffer(), 0), v->data()->size(), root));
  return backend_->synchronize();
}

CollectiveStats Session::collectiveStats() const {
  return backend_->collectiveStats();
}

std::string Session::backendDescription() const {
  return backend_->describe();
}
std::string Session::backendNote() const {
  return backend_->note();
}
DeviceKind Session::deviceKind() const {
  return backend_->kind();
}

int Session::inputIndex(const std::string &name) const {
  const pkg::Package &m = pkg_->meta();
  if (m.inputs())
    for (size_t i = 0; i < m.inputs()->size(); ++i)
      if (m.inputs()->Get(i)->name()->str() == name)
        return static_cast<int>(i);
  return -1;
}

bool Session::hasEvalSchedule() const {
  const pkg::Package &m = pkg_->meta();
  return m.eval_outputs() && m.eval_outputs()->size() > 0;
}

const flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>> *Session::outputList() const {
  return evalMode_ ? pkg_->meta().eval_outputs() : schedule().outputs;
}

std::vector<int64_t> Session::inputShape(const std::string &name) const {
  int i = inputIndex(name);
  if (i < 0)
    return {};
  return ranged_ ? staged_[i].shape : shapeOf(pkg_->meta().inputs()->Get(i));
}

std::vector<int64_t> Session::outputShape(const std::string &name) const {
  int i = outputIndex(name);
  return i < 0 ? std::vector<int64_t>{} : shapeOf(outputList()->Get(i));
}

/// A shape-range package: `t` must have the input's dtype and rank, its fixed
/// dimensions, and ranged dimensions inside their ranges.
Status Session::checkRangedInput(int index, const HostTensor &t) const {
  const pkg::Package &m = pkg_->meta();
  const pkg::TensorInfo *in = m.inputs()->Get(index);
  std::string name = in->name()->str();
  if (t.dtype != in->dtype())
    return Status(StatusCode::InvalidArgument,
                  "input '" + name + "' has dtype " + pkg::dtypeName(t.dtype) +
                      ", the model expects " + pkg::dtypeName(in->dtype()));
  if (std::string p = pkg::inputShapeProblem(m, static_cast<uint32_t>(index), t.shape); !p.empty())
    return Status(StatusCode::InvalidArgument, p);
  if (t.data.size() != t.byteSize())
    return Status(StatusCode::InvalidArgument,
                  "input '" + name + "' holds " + std::to_string(t.data.size()) +
                      " bytes, expected " + std::to_string(t.byteSize()));
  return Status::ok();
}

/// A shape-range package: the schedule whose inputs have the staged shapes, made
/// current; then the staged inputs are uploaded into its buffers.
Status Session::selectSchedule() {
  auto matches = [&](size_t k) {
    for (size_t i = 0; i < staged_.size(); ++i) {
      const auto *shape = schedules_[k].inputs->Get(i)->shape();
      if (shape ? !std::equal(shape->begin(), shape->end(), staged_[i].shape.begin(),
                              staged_[i].shape.end())
                : !staged_[i].shape.empty())
        return false;
    }
    return true;
  };
  // Runs at one shape keep their schedule; a new shape searches them all.
  size_t found = matches(current_) ? current_ : schedules_.size();
  for (size_t k = 0; k < schedules_.size() && found == schedules_.size(); ++k)
    if (matches(k))
      found = k;
  if (found == schedules_.size()) {
    std::string shapes;
    for (size_t i = 0; i < staged_.size(); ++i)
      shapes += (i ? ", " : "") + pkg_->meta().inputs()->Get(i)->name()->str() +
                shapeString(staged_[i].shape);
    return Status(StatusCode::InvalidArgument,
                  "no shape in the package's ranges has the inputs " + shapes +
                      " (dimensions compiled with the same range vary together and must be equal)");
  }
  current_ = found;
  backend_->useSchedule(schedule().buffers, current_);
  if (!schedules_[current_].tacticsChosen)
    DLC_RETURN_IF_ERROR(chooseTactics(current_));
  for (size_t i = 0; i < staged_.size(); ++i)
    DLC_RETURN_IF_ERROR(backend_->upload(pkg::BufRef(schedule().inputs->Get(i)->buffer(), 0),
                                         staged_[i].data.data(), staged_[i].data.size()));
  return Status::ok();
}

int Session::outputIndex(const std::string &name) const {
  const auto *outs = outputList();
  if (outs)
    for (size_t i = 0; i < outs->size(); ++i)
      if (outs->Get(i)->name()->str() == name)
        return static_cast<int>(i);
  return -1;
}

/// The input or output `name` for a host copy of `size` bytes at `data`: it must exist
/// and the size must be exactly the tensor's.
static Status hostTransfer(const flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>> *tensors,
                           int index, const char *what, const std::string &name, const void *data,
                           size_t size, const pkg::TensorInfo *&t) {
  if (index < 0)
    return Status(StatusCode::InvalidArgument,
                  std::string("the model has no ") + what + " named '" + name + "'");
  t = tensors->Get(index);
  if (!data && size)
    return Status(StatusCode::InvalidArgument, std::string(what) + " '" + name + "': data is null");
  if (size != pkg::tensorBytes(*t))
    return Status(StatusCode::InvalidArgument, std::string(what) + " '" + name + "' has " +
                                                   std::to_string(pkg::tensorBytes(*t)) +
                                                   " bytes, the buffer has " +
                                                   std::to_string(size));
  return Status::ok();
}

Status Session::setInputBytes(const std::string &name, const void *data, size_t size) {
  int i = inputIndex(name);
  if (i < 0)
    return Status(StatusCode::InvalidArgument, pkg::unknownInputMessage(pkg_->meta(), name));
  if (ranged_) { // the bytes of the input's last shape (at first, the opt shape)
    HostTensor t;
    t.dtype = pkg_->meta().inputs()->Get(i)->dtype();
    t.shape = staged_[i].shape;
    if (size != t.byteSize())
      return Status(StatusCode::InvalidArgument,
                    "input '" + name + "' has " + std::to_string(t.byteSize()) +
                        " bytes at its shape " + shapeString(t.shape) + ", the buffer has " +
                        std::to_string(size) +
                        "; the package takes a range of shapes: give the shape with the data "
                        "(dlc_session_set_input_tensor, Session::setInput)");
    if (!data && size)
      return Status(StatusCode::InvalidArgument, "input '" + name + "': data is null");
    t.data.assign(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + size);
    staged_[i] = std::move(t);
    inputSet_[i] = true;
    return Status::ok();
  }
  const pkg::TensorInfo *in = nullptr;
  DLC_RETURN_IF_ERROR(hostTransfer(pkg_->meta().inputs(), i, "input", name, data, size, in));
  DLC_RETURN_IF_ERROR(backend_->upload(pkg::BufRef(in->buffer(), 0), data, size));
  inputSet_[i] = true;
  return Status::ok();
}

Status Session::bindDevice(const std::string &name, bool isOutput, uint64_t devicePtr) {
  int i = isOutput ? outputIndex(name) : inputIndex(name);
  if (i < 0)
    return Status(StatusCode::InvalidArgument, isOutput
                                                   ? "the model has no output named '" + name + "'"
                                                   : pkg::unknownInputMessage(pkg_->meta(), name));
  if (ranged_)
    return Status(StatusCode::InvalidArgument,
                  "'" + name +
                      "': device pointers cannot be bound in a package "
                      "compiled for a range of shapes (each shape has its own buffers); "
                      "set the data from the host");
  if (!devicePtr)
    return Status(StatusCode::InvalidArgument, "device pointer for '" + name + "' is null");
  const pkg::TensorInfo *t = (isOutput ? pkg_->meta().outputs() : pkg_->meta().inputs())->Get(i);
  // Kernels read interface tensors element by element (never as float4), so the
  // element's alignment is all a bound pointer needs.
  size_t align = pkg::dtypeSize(t->dtype());
  if (align > 1 && devicePtr % align)
    return Status(StatusCode::InvalidArgument, "device pointer for '" + name +
                                                   "' is not aligned to its " +
                                                   std::to_string(align) + "-byte elements");
  DLC_RETURN_IF_ERROR(backend_->bindExternal(t->buffer(), devicePtr));
  if (!isOutput)
    inputSet_[i] = true;
  return Status::ok();
}

Status Session::setStream(void *stream) {
  return backend_->setStream(stream);
}

Status Session::getOutputBytes(const std::string &name, void *data, size_t size) const {
  DLC_RETURN_IF_ERROR(checkOutputsReady());
  const pkg::TensorInfo *o = nullptr;
  DLC_RETURN_IF_ERROR(hostTransfer(outputList(), outputIndex(name), "output", name, data, size, o));
  return backend_->download(data, pkg::BufRef(o->buffer(), 0), size);
}

Status Session::setInput(const std::string &name, const HostTensor &t) {
  const pkg::Package &m = pkg_->meta();
  if (ranged_) {
    int i = inputIndex(name);
    if (i < 0)
      return Status(StatusCode::InvalidArgument, pkg::unknownInputMessage(m, name));
    DLC_RETURN_IF_ERROR(checkRangedInput(i, t));
    staged_[i] = t;
    inputSet_[i] = true;
    return Status::ok();
  }
  if (m.inputs())
    for (size_t i = 0; i < m.inputs()->size(); ++i) {
      const pkg::TensorInfo *in = m.inputs()->Get(i);
      if (in->name()->str() != name)
        continue;
      auto shape = shapeOf(in);
      if (t.dtype != in->dtype())
        return Status(StatusCode::InvalidArgument,
                      "input '" + name + "' has dtype " + pkg::dtypeName(t.dtype) +
                          ", the model expects " + pkg::dtypeName(in->dtype()));
      if (t.shape != shape)
        return Status(StatusCode::InvalidArgument, "input '" + name + "' has shape " +
                                                       shapeString(t.shape) +
                                                       ", the model expects " + shapeString(shape));
      if (t.data.size() != t.byteSize())
        return Status(StatusCode::InvalidArgument,
                      "input '" + name + "' holds " + std::to_string(t.data.size()) +
                          " bytes, expected " + std::to_string(t.byteSize()));
      DLC_RETURN_IF_ERROR(
          backend_->upload(pkg::BufRef(in->buffer(), 0), t.data.data(), t.data.size()));
      inputSet_[i] = true;
      return Status::ok();
    }
  return Status(StatusCode::InvalidArgument, pkg::unknownInputMessage(m, name));
}

Status Session::run() {
  outputsReady_ = false;
  Status s = runSteps(false);
  outputsReady_ = s.isOk();
  return s;
}

Status Session::evaluate() {
  outputsReady_ = false;
  Status s = runSteps(true);
  outputsReady_ = s.isOk();
  return s;
}

Status Session::checkOutputsReady() const {
  if (outputsReady_)
    return Status::ok();
  return Status(StatusCode::InvalidArgument,
                "no outputs to read: the session has not run yet, or its last run failed");
}

Status Session::runSteps(bool evaluation) {
  const pkg::Package &m = pkg_->meta();
  for (size_t i = 0; i < inputSet_.size(); ++i)
    if (!inputSet_[i])
      return Status(StatusCode::InvalidArgument,
                    "input '" + m.inputs()->Get(i)->name()->str() + "' was not set");
  profile_.clear();
  if (ranged_)
    DLC_RETURN_IF_ERROR(selectSchedule());
  const std::vector<const pkg::Step *> &mainSteps = schedule().steps;
  // Evaluation runs the package's evaluation schedule, or without one the training
  // step less its commit (the commit copies are the main schedule's last steps).
  evalMode_ = evaluation && hasEvalSchedule();
  const std::vector<const pkg::Step *> &steps = evalMode_ ? schedule().evalSteps : mainSteps;
  size_t count = steps.size() - (evaluation && !evalMode_ ? m.commit_steps() : 0);
  // Steps conditional on a run-time If condition read the condition back to the host
  // (once per run and condition) and run only on their side, so such a schedule is
  // issued step by step rather than captured.
  bool conditional = std::any_of(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(count),
                                 [](const pkg::Step *s) { return s->predicate() != nullptr; });
  bool whole = !evalMode_ && count == mainSteps.size() && !conditional;
  std::map<std::pair<uint32_t, uint64_t>, bool> conditions;
  auto runs = [&](const pkg::Step &s, bool &yes) -> Status {
    yes = true;
    if (const pkg::BufRef *c = s.predicate()) {
      auto key = std::make_pair(c->buffer(), c->offset());
      auto it = conditions.find(key);
      if (it == conditions.end()) {
        uint8_t byte = 0;
        DLC_RETURN_IF_ERROR(backend_->download(&byte, *c, 1));
        it = conditions.emplace(key, byte != 0).first;
      }
      yes = it->second == s.when();
    }
    return Status::ok();
  };
  auto issue = [&]() -> Status {
    for (size_t k = 0; k < count; ++k) {
      const pkg::Step *s = steps[k];
      bool yes = true;
      DLC_RETURN_IF_ERROR(runs(*s, yes));
      if (!yes)
        continue;
      std::string node = s->node() ? s->node()->str() : "";
      auto t0 = std::chrono::steady_clock::now();
      const char *kind = "";
      if (Status st = issueStep(*s, evaluation, kind))
        return st;
      if (opts_.profile) {
        DLC_RETURN_IF_ERROR(backend_->synchronize());
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count();
        profile_.push_back({node, kind, us});
      }
    }
    return Status::ok();
  };
  // The backend may capture the main schedule once (a CUDA graph) and replay it;
  // the evaluation, or the step without its commit, is issued step by step.
  DLC_RETURN_IF_ERROR(whole ? backend_->execute(issue) : issue());
  DLC_RETURN_IF_ERROR(backend_->synchronize());
  return checkDataErrors();
}

void Session::buildSteps(Schedule &sc) const {
  sc.steps.clear();
  sc.evalSteps.clear();
  if (!sc.all)
    return;
  // Tactic groups not chosen yet run their first dlc alternative.
  for (const pkg::TacticGroup &g : pkg::tacticGroups(sc.all, arch_))
    sc.chosen.emplace(g.group, g.defaultAlt());
  for (const pkg::Step *st : *sc.all) {
    if (!stepRunsOn(*st, arch_))
      continue;
    if (st->alt_group()) {
      // (A persistent kernel's group not chosen: its per-step schedule, alternative 2.)
      auto it = sc.chosen.find(st->alt_group());
      if (st->alt() != (it != sc.chosen.end() ? it->second : uint8_t{2}))
        continue;
    }
    if (st->schedules() & 1)
      sc.steps.push_back(st);
    if (st->schedules() & 2)
      sc.evalSteps.push_back(st);
  }
}

Status Session::issueStep(const pkg::Step &s, bool evaluation, const char *&kind) {
  std::string node = s.node() ? s.node()->str() : "";
  switch (s.op_type()) {
  case pkg::StepKind::Launch:
    kind = "launch";
    return backend_->launch(*s.op_as_Launch(), node);
  case pkg::StepKind::Gemm: {
    kind = "gemm";
    const pkg::Gemm &g = *s.op_as_Gemm();
    bool epilogueApplied = true;
    Status st = backend_->gemm(g, node, epilogueApplied);
    if (!st && !epilogueApplied) {
      if (!g.fallback())
        return Status(StatusCode::Internal, "GEMM of node '" + node +
                                                "' ran without its epilogue, and the "
                                                "package has no fallback kernel for it");
      st = backend_->launch(*g.fallback(), node);
    }
    return st;
  }
  case pkg::StepKind::CudnnConv:
    kind = "cudnn";
    return backend_->cudnnConv(*s.op_as_CudnnConv(), node);
  case pkg::StepKind::CudnnSdpa:
    kind = "cudnn";
    return backend_->cudnnSdpa(*s.op_as_CudnnSdpa(), node);
  case pkg::StepKind::Copy:
    kind = "copy";
    return backend_->copy(*s.op_as_Copy());
  case pkg::StepKind::Memset:
    kind = "memset";
    return backend_->memset(*s.op_as_Memset());
  case pkg::StepKind::Collective:
    kind = "all-reduce";
    // An evaluation runs on one rank: its collectives stay local.
    return backend_->collective(*s.op_as_Collective(), evaluation);
  case pkg::StepKind::CollectiveWait:
    kind = "wait";
    return evaluation ? Status::ok() : backend_->waitCollective(*s.op_as_CollectiveWait());
  default:
    return Status(StatusCode::InvalidPackage, "unknown step kind");
  }
}

/// The check words of the launches that can meet bad data (package.fbs: Check): the
/// first nonzero one names its node.
Status Session::checkDataErrors() const {
  const Schedule &sc = schedule();
  if (!sc.checks || sc.checks->size() == 0)
    return Status::ok();
  const pkg::Buffer *b = sc.buffers->Get(sc.checkBuffer);
  std::vector<uint32_t> words(b->bytes() / 4);
  DLC_RETURN_IF_ERROR(
      backend_->download(words.data(), pkg::BufRef(sc.checkBuffer, 0), words.size() * 4));
  for (const pkg::Check *c : *sc.checks) {
    uint32_t w = words[c->offset() / 4];
    if (w)
      return Status(StatusCode::DataError,
                    "node '" + c->node()->str() + "': " + c->what()->str() +
                        " (the input data is invalid for this model; the outputs of "
                        "this run are not meaningful)");
  }
  return Status::ok();
}

Result<HostTensor> Session::getOutput(const std::string &name) const {
  DLC_RETURN_IF_ERROR(checkOutputsReady());
  if (const auto *outs = outputList())
    for (const pkg::TensorInfo *o : *outs) {
      if (o->name()->str() != name)
        continue;
      HostTensor t = HostTensor::zeros(o->dtype(), shapeOf(o));
      if (Status s = backend_->download(t.data.data(), pkg::BufRef(o->buffer(), 0), t.data.size()))
        return s;
      return t;
    }
  return Status(StatusCode::InvalidArgument, "the model has no output named '" + name + "'");
}

} // namespace dlc::rt

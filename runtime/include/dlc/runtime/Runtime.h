//===- Runtime.h - Loading and running .dlc packages (C++ API) --*- C++ -*-===//
//
// The runtime library (dlcrt) links no LLVM, ONNX, protobuf or fmt. A Session owns
// one backend (cuda or emu), an arena allocated once and the weights uploaded
// once; run() executes the package's schedule.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/Package.h"
#include "dlc/runtime/Collectives.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dlc::rt {

struct HostTensor {
  pkg::DType dtype = pkg::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numElements() const;
  size_t byteSize() const { return static_cast<size_t>(numElements()) * pkg::dtypeSize(dtype); }
  /// Element i as a double (FP16 and BF16 widened, integers converted).
  double element(int64_t i) const;
  /// The index of the first NaN or infinity of a float tensor, else -1.
  int64_t firstNonFinite() const;
  static HostTensor zeros(pkg::DType dt, std::vector<int64_t> shape);
};

enum class DeviceKind { Auto, Cuda, Emu };
const char *deviceKindName(DeviceKind k);

/// The most worker threads an emu session may ask for.
inline constexpr int kMaxEmuThreads = 1024;

struct SessionOptions {
  DeviceKind device = DeviceKind::Auto;
  /// emu: run the package's host code (its emu module) even when it was not compiled
  /// by this user on this machine (its signature does not verify with this user's
  /// key, dlc/support/HostKey.h). Running a package's host code runs whatever its
  /// author put there, as the user: consent for packages from trusted sources only.
  bool allowHostCode = false;
  /// The most memory the session may take for the package's arena and weights
  /// together, checked before anything is allocated (0: no limit but the machine's or
  /// the GPU's memory). For servers that admit packages from elsewhere.
  uint64_t maxMemoryBytes = 0;
  /// Worker threads of the emu backend (0: one per hardware thread; at most
  /// kMaxEmuThreads).
  int emuThreads = 0;
  /// CUDA device ordinal (cuDeviceGet) for the cuda backend.
  int cudaDevice = 0;
  /// The emu backend runs the steps planned for this compute capability (80 for
  /// sm_80; tile choices differ per architecture). 0: the newest in the package.
  int emuComputeCapability = 0;
  /// Record per-step wall time (host-side; on emu it is CPU time, not GPU time).
  bool profile = false;
  /// emu: the checks that cost time, as compute-sanitizer makes them on a GPU
  /// (README: "Emu as a sanitizer").
  bool check = false;
  /// emu: the order in which the threads of a block run between barriers. A kernel
  /// whose results depend on it has a race.
  enum class ThreadOrder { Forward, Reverse, Random };
  ThreadOrder emuThreadOrder = ThreadOrder::Forward;
  /// Run GEMM bias/activation epilogues as the package's fallback kernel, as a GPU
  /// does when no cuBLASLt algorithm applies them (emu; for tests of that path).
  bool gemmEpilogueKernel = false;
  /// cuda: capture the schedule as a CUDA graph on the first run and replay it after
  /// (off with profiling; falls back to step-by-step launches where capture fails).
  bool cudaGraphs = true;
  /// Data-parallel training (packages compiled with --data-parallel), with
  /// `rank.size` > 1: emu averages the gradients over the ranks through
  /// `communicator` (MPI); cuda uses `communicator` if it works on device memory,
  /// else makes an NCCL communicator on its device, exchanging its id through
  /// `communicator` when set (mpirun), else at comm.rendezvous.
  RankInfo rank;
  std::shared_ptr<Communicator> communicator;
  CommOptions comm;
  /// Tactics (README: Tactics): which implementation runs each layer that has
  /// alternatives. Auto: on a GPU the fastest, timed when the session starts or read
  /// from the tactics cache; on emu our kernels. Dlc: our kernels. Vendor: cuDNN
  /// (cuBLASLt) where a layer has it. Default: $DLC_TACTICS (auto, dlc or vendor),
  /// else Auto.
  enum class Tactics { Default, Auto, Dlc, Vendor };
  Tactics tactics = Tactics::Default;
  /// The tactics cache's directory: empty for $DLC_CACHE_DIR/tactics,
  /// $XDG_CACHE_HOME/dlc/tactics or ~/.cache/dlc/tactics; "-" for none.
  std::string tacticsCacheDir;
  /// Use the choices embedded in the package for this GPU (dlc tune --embed); false:
  /// ignore them (dlc tune, so that tuning a tuned package measures the layers the
  /// tactics cache has no choice for).
  bool useEmbeddedTactics = true;
  /// The most wall time the session spends timing tactics, in milliseconds; the
  /// layers left then run our kernels.
  double tuneBudgetMs = 20000;
};

/// A tactics cache file (README: Tactics): the key it was written for (GPU, driver and
/// library versions), and per (schedule, tactic group) the chosen alternative and its
/// time in microseconds.
struct TacticsCache {
  std::string key;
  std::map<std::pair<size_t, uint32_t>, std::pair<uint8_t, double>> choices;
};
/// Reads one; an error that says what is wrong with it (IoError when there is none).
Result<TacticsCache> readTacticsCache(const std::string &path);
/// A package's cache file on one GPU with one set of libraries (Backend key `key`), in
/// the cache directory: <crc32>-<size>-<crc32 of key>.txt.
std::string tacticsCacheFileName(const pkg::PackageFile &p, const std::string &key);

/// One layer's tactics as the session chose them (Session::tactics()).
struct TacticChoice {
  size_t schedule = 0; // 0: the package's; i + 1: shape variant i
  uint32_t group = 0;  // the layer's tactic group (pkg::Step::alt_group)
  std::string node;
  struct Candidate {
    std::string kind;        // dlc, cudnn, cublaslt
    std::string description; // the kernels, or the library's call
    double micros = -1;      // measured (not timed: -1)
    std::string problem;     // why it could not run here, if it could not
    uint8_t alt = 0;         // its alternative (pkg::Step::alt)
  };
  std::vector<Candidate> candidates;
  size_t chosen = 0;
  /// "timed", "cache", "package" (dlc tune --embed), "forced" (DLC_TACTICS) or
  /// "default" (emu, or no time left)
  std::string how;
};

class Session;
/// A copy of `pf` (the package session `s` runs) carrying the tactics `s` measured or
/// read (timed, from the cache or from the package) for its GPU key: dlc tune --embed.
/// An error when `s` runs no GPU or measured nothing. The image refers to pf's bytes.
Result<pkg::PackageImage> embedChosenTactics(const Session &s, const pkg::PackageFile &pf);

/// Data parallelism, as this rank saw it: the all-reduces it ran, the seconds they
/// took and the seconds the step waited for them (what did not overlap). Measured by
/// the emu backend; zero on cuda (its all-reduces run on a stream).
struct CollectiveStats {
  uint64_t allReduces = 0;
  double reduceSeconds = 0, waitSeconds = 0;
};

struct StepTime {
  std::string node;
  std::string kind; // launch, gemm, copy, memset
  double microseconds;
};

class Backend;
class WeightStore;

/// A loaded package. Immutable and shareable between threads: sessions created from
/// one Model on the same backend share its weights (uploaded by the first of them).
class Model {
public:
  explicit Model(std::shared_ptr<const pkg::PackageFile> pkg);
  ~Model();
  const pkg::PackageFile &file() const { return *pkg_; }
  const pkg::Package &meta() const { return pkg_->meta(); }
  /// The weight store for a backend kind and device ordinal, created by `make` on first use.
  std::shared_ptr<WeightStore>
  weights(DeviceKind kind, int device,
          const std::function<std::shared_ptr<WeightStore>()> &make) const;

private:
  std::shared_ptr<const pkg::PackageFile> pkg_;
  struct Shared;
  std::unique_ptr<Shared> shared_;
};

class Session {
public:
  /// Picks the backend (cuda if libcuda.so.1 loads and a device exists, else emu,
  /// unless forced), allocates the arena and uploads the weights (once per model
  /// and backend).
  static Result<std::unique_ptr<Session>> create(std::shared_ptr<const Model> model,
                                                 const SessionOptions &opts = {});
  static Result<std::unique_ptr<Session>> create(std::shared_ptr<const pkg::PackageFile> pkg,
                                                 const SessionOptions &opts = {});
  ~Session();

  /// "cuda (NVIDIA A100, sm_80)" or "emu (...)".
  std::string backendDescription() const;
  DeviceKind deviceKind() const;
  const pkg::Package &package() const { return pkg_->meta(); }

  /// Copies a host tensor into the named input; checks name, dtype and shape.
  Status setInput(const std::string &name, const HostTensor &t);
  /// Copies raw bytes (size must match) into the named input.
  Status setInputBytes(const std::string &name, const void *data, size_t size);
  /// cuda only: the named input or output lives at a caller-owned device address.
  Status bindDevice(const std::string &name, bool isOutput, uint64_t devicePtr);
  /// cuda only: run on the caller's stream (nullptr: the session's own).
  Status setStream(void *stream);
  Status getOutputBytes(const std::string &name, void *data, size_t size) const;
  /// The shape of an input as last set (a shape-range package takes any shape in its
  /// ranges), or of an output after the last run; empty if there is no such tensor.
  std::vector<int64_t> inputShape(const std::string &name) const;
  std::vector<int64_t> outputShape(const std::string &name) const;
  /// Index of a named input/output, or -1.
  int inputIndex(const std::string &name) const;
  int outputIndex(const std::string &name) const;
  /// Runs the schedule (all inputs must have been set at least once).
  Status run();
  /// Training packages: runs the evaluation schedule, the model in inference mode
  /// (BatchNormalization on its running statistics, Dropout off) and its loss on
  /// the current variables; changes no variable. getOutput then returns its outputs
  /// (same names as the step's). A package without one (format 5 and older never
  /// had one) runs the training step without the steps that commit its updates.
  Status evaluate();
  Result<HostTensor> getOutput(const std::string &name) const;

  // Variables (training packages): the parameters, optimizer state and running
  // statistics a step updates. Each session has its own, initialized from the
  // package when it is created.
  /// Names in package order.
  std::vector<std::string> variableNames() const;
  /// Whether a variable is a trainable parameter (else optimizer or model state).
  bool variableTrainable(const std::string &name) const;
  /// Whether a variable is this rank's shard of ZeRO-1 optimizer state (each rank holds
  /// its own; `dlc train` gathers them into checkpoints).
  bool variableSharded(const std::string &name) const;
  Result<HostTensor> getVariable(const std::string &name) const;
  /// Checks name, dtype and shape.
  Status setVariable(const std::string &name, const HostTensor &t);
  /// Raw bytes (size must match) in the variable's dtype and shape.
  Status setVariableBytes(const std::string &name, const void *data, size_t size);
  /// Every variable back to its initial value from the package.
  Status resetVariables();
  /// Every variable to an .npz file (written atomically), and back: a checkpoint
  /// must hold a value of the right dtype and shape for every variable. On several
  /// ranks every rank calls both: rank 0 alone writes, and a ZeRO-1 shard is saved as
  /// every rank's shard in rank order (gathered through the communicator), of which
  /// loading takes this rank's.
  Status saveCheckpoint(const std::string &path) const;
  Status loadCheckpoint(const std::string &path);
  /// Data-parallel runs: every variable takes rank `root`'s value (the parameters
  /// start equal on every rank). Nothing to do with one rank.
  Status broadcastVariables(int root = 0);
  /// The ranks this session averages its gradients over (1: one process).
  int worldSize() const { return opts_.rank.size; }
  CollectiveStats collectiveStats() const;
  const std::vector<StepTime> &lastProfile() const { return profile_; }
  /// What the backend chose to do differently from its default (a CUDA graph that
  /// could not be captured, ...); empty when nothing.
  std::string backendNote() const;
  /// The alternatives the session chose when it started (a persistent recurrent
  /// kernel, or its per-step schedule where the device cannot hold its grid), one line
  /// each; empty when the package has none.
  const std::vector<std::string> &scheduleNotes() const { return scheduleNotes_; }
  /// The tactics chosen so far (a shape variant's when it first runs), in schedule
  /// order; empty when the package has no layer with alternatives.
  const std::vector<TacticChoice> &tactics() const { return tactics_; }
  /// What tactic choices are valid for (the GPU's name, architecture and SM count, the
  /// driver, cuDNN and cuBLASLt versions); empty on emu.
  std::string tacticsKey() const;

private:
  Session() = default;
  Status checkDataErrors() const;
  Status runSteps(bool evaluation);
  bool hasEvalSchedule() const;
  /// The outputs of the last run: the evaluation's after evaluate() on a package
  /// with an evaluation schedule, else the package's.
  const flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>> *outputList() const;
  std::shared_ptr<const Model> model_;
  std::shared_ptr<const pkg::PackageFile> pkg_;
  std::unique_ptr<Backend> backend_;
  SessionOptions opts_;
  std::vector<bool> inputSet_;
  /// Whether the last run (or evaluation) finished: only then are there outputs.
  bool outputsReady_ = false;
  Status checkOutputsReady() const;
  std::vector<StepTime> profile_;
  using Tensors = flatbuffers::Vector<flatbuffers::Offset<pkg::TensorInfo>>;
  /// A schedule: the package's own (index 0), or a shape variant's.
  struct Schedule {
    const flatbuffers::Vector<flatbuffers::Offset<pkg::Step>> *all = nullptr;
    /// The chosen alternative of each group (persistent kernels, tactics).
    std::map<uint32_t, uint8_t> chosen;
    bool tacticsChosen = false;
    const Tensors *inputs = nullptr, *outputs = nullptr;
    const flatbuffers::Vector<flatbuffers::Offset<pkg::Buffer>> *buffers = nullptr;
    /// Its steps that run on this backend (per-architecture steps filtered).
    std::vector<const pkg::Step *> steps;
    /// The evaluation schedule's steps (training packages; pkg::Step::schedules).
    std::vector<const pkg::Step *> evalSteps;
    const flatbuffers::Vector<flatbuffers::Offset<pkg::Check>> *checks = nullptr;
    uint32_t checkBuffer = 0;
  };
  std::vector<Schedule> schedules_;
  std::vector<std::string> scheduleNotes_;
  size_t current_ = 0;
  const Schedule &schedule() const { return schedules_[current_]; }
  /// Shape-range packages: inputs are kept on the host as set and uploaded by run()
  /// once it has chosen the schedule for their shapes.
  bool ranged_ = false;
  std::vector<HostTensor> staged_;
  Status checkRangedInput(int index, const HostTensor &t) const;
  Status selectSchedule();
  bool evalMode_ = false;
  int arch_ = 0;
  std::vector<TacticChoice> tactics_;
  std::string tacticsCachePath_; // this session's tactics cache file (once computed)
  /// Fills schedule k's steps from its alternatives' choices.
  void buildSteps(Schedule &sc) const;
  /// Chooses schedule k's tactics (its buffers in use) and builds its steps.
  Status chooseTactics(size_t k);
  /// Issues one step (`kind` says what it was, for profiles).
  Status issueStep(const pkg::Step &s, bool evaluation, const char *&kind);
};

/// The CUDA devices present (0 without a driver or a device).
int cudaDeviceCount();

/// The measurement of `dlc bench` and the Python package's bench(): `warmup` runs,
/// then `iterations` timed ones, each in three parts (milliseconds): setting
/// `upload` (inputs sent again every run; empty: the inputs stay as set), running,
/// and downloading every output.
struct BenchTimes {
  std::vector<double> h2d, compute, d2h, total;
};
Result<BenchTimes> benchmark(Session &s,
                             const std::vector<std::pair<std::string, HostTensor>> &upload,
                             int64_t warmup, int64_t iterations);
/// Order statistics of a series (nearest rank): min, median, p90, p99, max.
struct BenchStats {
  double min = 0, median = 0, p90 = 0, p99 = 0, max = 0;
};
BenchStats benchStats(std::vector<double> values);

/// .npy files (format 1.0/2.0, little-endian, C order).
Result<HostTensor> readNpy(const std::string &path);
Status writeNpy(const std::string &path, const HostTensor &t);
/// The bytes of an .npy file (format 1.0) holding `t`.
std::string encodeNpy(const HostTensor &t);

/// .npz archives (training data, checkpoints): arrays by name. Reading takes stored
/// members, and deflated ones (numpy.savez_compressed) when given an inflater
/// (raw deflate of `in` into exactly `outSize` bytes; the runtime links no
/// compression library). Writing stores members uncompressed, as numpy.savez does,
/// atomically (no partial file on failure).
using NpzArrays = std::map<std::string, HostTensor>;
using Inflater = std::function<bool(const uint8_t *in, size_t n, uint8_t *out, size_t outSize)>;
Result<NpzArrays> readNpz(const std::string &path, const Inflater &inflate = {});
Status writeNpz(const std::string &path, const NpzArrays &arrays);
/// "[2,3,4]", as messages write shapes.
std::string shapeString(const std::vector<int64_t> &shape);
/// Checks arrays of samples (along the first dimension) against a package's inputs:
/// every input present, with its dtype and per-sample shape, the same number of
/// samples in each, and no NaN or infinity. Returns that number; errors name `path`.
Result<size_t> checkSamples(const NpzArrays &arrays, const pkg::Package &m,
                            const std::string &path);
/// Parses .npy bytes (for tests and fuzzing).
Result<HostTensor> parseNpy(const uint8_t *data, size_t n, const std::string &name);

} // namespace dlc::rt

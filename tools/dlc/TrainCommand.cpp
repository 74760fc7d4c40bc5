//===- TrainCommand.cpp - `dlc train`: a training package over .npz data ---===//
//
// `dlc train` runs a training package's step over the batches of an .npz file:
// shuffled per epoch from --seed (or in order with --no-shuffle), a progress bar
// with the loss and samples/s, one JSON line per step with --log, the variables
// saved to a checkpoint (.npz, written atomically) after every epoch, and an
// evaluation pass over --eval-data that runs the step without committing it.
//===----------------------------------------------------------------------===//
#include "Args.h"
#include "Commands.h"
#include "Ranks.h"
#include "dlc/passes/Training.h"
#include "dlc/support/Files.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>
#include <unistd.h>

namespace dlc::tool {

namespace {

bool isTerminal() {
  return ::isatty(2);
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A float as JSON (null when not finite), with every digit a float has.
std::string jsonNumber(float v) {
  if (!std::isfinite(v))
    return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

/// The first element of an F32 tensor (a loss, the loss scale).
float firstFloat(const rt::HostTensor &t) {
  float f = 0;
  if (t.data.size() >= sizeof f)
    std::memcpy(&f, t.data.data(), sizeof f);
  return f;
}

int fail(const std::string &msg) {
  reportError(ir::makeError(msg));
  return 1;
}

/// The rows [first, first + count) of `order` gathered from an array's leading dim.
rt::HostTensor gatherRows(const rt::HostTensor &a, const std::vector<int64_t> &order, size_t first,
                          size_t count) {
  rt::HostTensor t;
  t.dtype = a.dtype;
  t.shape = a.shape;
  t.shape[0] = static_cast<int64_t>(count);
  size_t row = a.byteSize() / static_cast<size_t>(a.shape[0]);
  t.data.resize(row * count);
  for (size_t i = 0; i < count; ++i)
    std::memcpy(t.data.data() + i * row,
                a.data.data() + static_cast<size_t>(order[first + i]) * row, row);
  return t;
}

std::vector<int64_t> shapeOf(const pkg::TensorInfo *t) {
  return t->shape() ? std::vector<int64_t>(t->shape()->begin(), t->shape()->end())
                    : std::vector<int64_t>{};
}

/// A data set checked against the package's inputs: every input present, with the
/// input's dtype and per-sample shape, and the same number of samples.
struct DataSet {
  rt::NpzArrays arrays;
  size_t samples = 0;
};

Result<DataSet> loadData(const std::string &path, const pkg::Package &m) {
  auto arrays = readNpzFile(path);
  if (!arrays)
    return arrays.takeStatus();
  DataSet d;
  d.arrays = std::move(*arrays);
  auto n = rt::checkSamples(d.arrays, m, path);
  if (!n)
    return n.takeStatus();
  d.samples = *n;
  return d;
}

/// Argmax along dim 1 of [N, C, ...] scores against class indices [N, ...], over
/// the first `rows` samples.
size_t countCorrect(const rt::HostTensor &scores, const rt::HostTensor &labels, int64_t rows) {
  if (scores.dtype != pkg::DType::F32 || labels.dtype != pkg::DType::I64 || scores.shape.size() < 2)
    return 0;
  int64_t N = scores.shape[0], C = scores.shape[1],
          inner = scores.numElements() / std::max<int64_t>(N * C, 1);
  if (labels.numElements() != N * inner)
    return 0;
  const float *s = reinterpret_cast<const float *>(scores.data.data());
  const int64_t *l = reinterpret_cast<const int64_t *>(labels.data.data());
  size_t ok = 0;
  for (int64_t n = 0; n < std::min(N, rows); ++n)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t c = 1; c < C; ++c)
        if (s[(n * C + c) * inner + i] > s[(n * C + best) * inner + i])
          best = c;
      ok += best == l[n * inner + i];
    }
  return ok;
}

} // namespace

int runTrain(const std::vector<std::string> &argv) {
  ArgParser parser(
      "train", "PACKAGE.dlc --data TRAIN.npz --epochs N [options]",
      "Trains a package compiled with `dlc compile --train`: runs its training step over the\n"
      "batches of an .npz file (arrays named after the package's inputs, samples along the\n"
      "first dimension), with a progress bar, per-epoch evaluation and checkpoints.",
      {{"data", 0, true, false, "FILE.npz", "Training data"},
       {"eval-data", 0, true, false, "FILE.npz",
        "Evaluated after every epoch (loss, and accuracy for classes)"},
       {"epochs", 0, true, false, "N", "Passes over the data (default 1)"},
       {"batch", 0, true, false, "B",
        "Batch size; must be the compiled one (the inputs' first dimension)"},
       {"seed", 0, true, false, "S", "Seed of the per-epoch shuffle (default 0)"},
       {"no-shuffle", 0, false, false, "", "Batches in data order"},
       {"checkpoint", 0, true, false, "FILE.npz", "Save every variable here after each epoch"},
       {"resume", 0, true, false, "FILE.npz", "Start from a checkpoint"},
       {"log", 0, true, false, "FILE.jsonl", "One JSON line per step: epoch, step, loss"},
       {"device", 0, true, false, "D", "auto (default), cuda or emu"},
       {"threads", 0, true, false, "N", "emu: worker threads (default: all cores)"},
       {"allow-host-code", 0, false, false, "",
        "emu: run the package's host code even though another user or machine compiled it\n"
        "(it runs as you: only for packages you trust)"},
       {"quiet", 'q', false, false, "", "Only errors and the final summary"},
       {"nproc", 0, true, false, "N",
        "Data parallel: start N ranks on this machine (one per GPU, or N emu ranks through\n"
        "mpirun); `mpirun -np N dlc train ...` runs across machines. --batch is per rank"},
       {"rendezvous", 0, true, false, "SPEC",
        "cuda ranks without mpirun: where they exchange NCCL's id, file:PATH or tcp:HOST:PORT"},
       {"timeout", 0, true, false, "S",
        "Data parallel: how long a rank waits for the others before it fails (default 300)"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "package");
  if (!args)
    return exitCode;
  if (!args->has("data")) {
    reportError(ir::makeError("train: --data TRAIN.npz is required"));
    return 2;
  }
  auto num = [&](const char *name, long dflt, long lo) -> std::optional<long> {
    std::string v = args->getOr(name, std::to_string(dflt));
    char *end = nullptr;
    long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || x < lo)
      return std::nullopt;
    return x;
  };
  auto epochs = num("epochs", 1, 1), seed = num("seed", 0, 0), threads = num("threads", 0, 0);
  if (!epochs || !seed || !threads || *threads > rt::kMaxEmuThreads) {
    reportError(ir::makeError("train: --epochs must be >= 1, --seed >= 0 and --threads 0 to " +
                              std::to_string(rt::kMaxEmuThreads)));
    return 2;
  }
  bool quiet = args->has("quiet");
  const std::string pkgPath = args->positionals()[0];
  double timeout = 300;
  if (auto t = args->get("timeout")) {
    char *end = nullptr;
    timeout = std::strtod(t->c_str(), &end);
    if (t->empty() || *end || !std::isfinite(timeout) || timeout <= 0) {
      reportError(ir::errorf("train: --timeout must be a number of seconds > 0, got '{0}'", *t));
      return 2;
    }
  }
  if (args->has("nproc")) {
    auto n = num("nproc", 1, 1);
    if (!n || *n > 1024) {
      reportError(ir::makeError("train: --nproc must be a number of ranks in [1, 1024]"));
      return 2;
    }
    LaunchOptions lo;
    lo.nproc = static_cast<int>(*n);
    lo.device = args->getOr("device", "auto");
    lo.rendezvous = args->getOr("rendezvous", "");
    lo.timeoutSeconds = timeout;
    lo.quiet = quiet;
    return launchRanks(argv, lo);
  }
  auto joined = joinRanks(timeout, args->getOr("rendezvous", ""));
  if (!joined)
    return fail(joined.status().message());
  RankContext ranks = std::move(*joined);
  const int worldSize = ranks.info.size, rank = ranks.info.rank;
  // A rank's error: with its rank, and under MPI the end of every rank (they would
  // wait for this one until their timeout).
  auto failRank = [&](const std::string &msg) {
    if (!ranks.distributed())
      return fail(msg);
    // The communicator's own errors start with "rank R: " already.
    std::string prefix = "rank " + std::to_string(rank) + ": ";
    std::string text = msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size()) : msg;
    reportError(ir::makeError("rank " + std::to_string(rank) + " of " + std::to_string(worldSize) +
                              ": " + text));
    llvm::errs().flush();
    if (ranks.comm)
      ranks.comm->abort(1);
    return 1;
  };
  // Rank 0 alone reports progress, logs and writes checkpoints.
  if (!ranks.lead())
    quiet = true;

  // What train writes must not be what it reads (--log p.dlc truncated the package).
  for (const char *out : {"log", "checkpoint"})
    if (auto o = args->get(out))
      if (Status s = refuseOverwrite(*o, std::string("train: --") + out,
                                     {{pkgPath, "package"},
                                      {args->getOr("data", ""), "training data"},
                                      {args->getOr("eval-data", ""), "evaluation data"}}))
        return failRank(s.message());
  if (auto l = args->get("log");
      l && args->has("checkpoint") && *l == args->getOr("checkpoint", ""))
    return failRank("train: --log and --checkpoint are the same file");
  auto file = pkg::PackageFile::load(pkgPath);
  if (!file)
    return failRank(file.status().message());
  const pkg::Package &m = (*file)->meta();
  if (!m.variables() || m.variables()->size() == 0 || m.commit_steps() == 0)
    return failRank("'" + pkgPath +
                    "' is not a training package (compile it with `dlc compile --train`)");
  if (ranks.distributed() && !m.bucket_bytes())
    return failRank("'" + pkgPath +
                    "' averages no gradients over ranks: compile it with `dlc compile --train "
                    "--data-parallel` to train on " +
                    std::to_string(worldSize) + " ranks");
  if (!m.inputs() || m.inputs()->size() == 0 || !m.outputs() || m.outputs()->size() == 0)
    return failRank("'" + pkgPath + "' has no inputs or outputs");
  size_t batch = static_cast<size_t>(shapeOf(m.inputs()->Get(0))[0]);
  if (auto b = args->get("batch"); b && *b != std::to_string(batch))
    return failRank("--batch " + *b + " does not match the batch the package was compiled for (" +
                    std::to_string(batch) + "); recompile with --input-shape to change it");

  auto train = loadData(args->getOr("data", ""), m);
  if (!train)
    return failRank(train.status().message());
  std::optional<DataSet> eval;
  if (auto e = args->get("eval-data")) {
    auto d = loadData(*e, m);
    if (!d)
      return failRank(d.status().message());
    eval = std::move(*d);
  }

  const size_t globalBatch = batch * static_cast<size_t>(worldSize);
  if (train->samples < globalBatch)
    return failRank(
        "the training data holds " + std::to_string(train->samples) +
        " samples, fewer than one batch of " + std::to_string(batch) +
        (ranks.distributed() ? " on each of " + std::to_string(worldSize) + " ranks" : ""));

  rt::SessionOptions so;
  std::string dev = args->getOr("device", "auto");
  if (dev == "cuda")
    so.device = rt::DeviceKind::Cuda;
  else if (dev == "emu")
    so.device = rt::DeviceKind::Emu;
  else if (dev != "auto")
    return failRank("--device must be auto, cuda or emu, got '" + dev + "'");
  so.emuThreads = static_cast<int>(*threads);
  so.allowHostCode = args->has("allow-host-code");
  if (ranks.distributed()) {
    so.rank = ranks.info;
    so.communicator = ranks.comm;
    so.comm = ranks.options;
    so.cudaDevice = ranks.info.localRank;
    // The emu ranks of one machine share its cores.
    if (!args->has("threads")) {
      const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      int perMachine = local ? std::max(1, std::atoi(local)) : worldSize;
      so.emuThreads =
          std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / perMachine);
    }
  }
  auto session = rt::Session::create(*file, so);
  if (!session)
    return failRank(session.status().message());
  rt::Session &s = **session;

  if (auto r = args->get("resume"))
    if (Status st = s.loadCheckpoint(*r))
      return failRank(st.message());
  // Every rank starts from rank 0's parameters and optimizer state.
  if (Status st = s.broadcastVariables(0))
    return failRank(st.message());

  std::unique_ptr<std::ofstream> log;
  if (auto l = args->get("log"); l && ranks.lead()) {
    log = std::make_unique<std::ofstream>(*l);
    if (!*log)
      return failRank("cannot write the log '" + *l + "'");
  }
  std::string lossName = m.outputs()->Get(0)->name()->str();
  // FP16 training: the dynamic loss scale, read after every step; a step that
  // lowered it found an Inf/NaN gradient and was skipped.
  bool scaled = llvm::is_contained(s.variableNames(), passes::kLossScaleName);
  auto lossScale = [&]() -> Result<float> {
    auto v = s.getVariable(passes::kLossScaleName);
    if (!v)
      return v.takeStatus();
    return firstFloat(*v);
  };
  float scale = 0;
  size_t skippedSteps = 0;
  if (scaled) {
    auto f = lossScale();
    if (!f)
      return failRank(f.status().message());
    scale = *f;
  }
  // Classification accuracy when the package's second output is the class scores
  // and an input holds the class indices.
  std::string scoresName = m.outputs()->size() > 1 ? m.outputs()->Get(1)->name()->str() : "";
  std::string labelName;
  for (const pkg::TensorInfo *in : *m.inputs())
    if (in->dtype() == pkg::DType::I64)
      labelName = in->name()->str();

  auto runBatches = [&](DataSet &d, const std::vector<int64_t> &order, bool training, size_t epoch,
                        double &lossSum, size_t &correct, size_t &counted) -> Status {
    // Training skips a last partial batch; evaluation fills it up with the first
    // samples again and counts only the real ones. Data parallel: training step k
    // takes the samples [k B N, (k + 1) B N) of the order, rank r its r-th B of them.
    size_t global = training ? batch * static_cast<size_t>(worldSize) : batch;
    size_t steps = training ? d.samples / global : (d.samples + batch - 1) / batch;
    std::vector<int64_t> padded = order;
    for (size_t i = 0; padded.size() < steps * batch; ++i)
      padded.push_back(order[i % order.size()]);
    auto t0 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < steps; ++k) {
      size_t first = k * global + (training ? static_cast<size_t>(rank) * batch : 0);
      size_t real = std::min(batch, d.samples - first);
      rt::HostTensor labels;
      for (const pkg::TensorInfo *in : *m.inputs()) {
        std::string name = in->name()->str();
        rt::HostTensor rows = gatherRows(d.arrays.at(name), padded, first, batch);
        DLC_RETURN_IF_ERROR(s.setInput(name, rows));
        if (name == labelName)
          labels = std::move(rows);
      }
      DLC_RETURN_IF_ERROR(training ? s.run() : s.evaluate());
      auto loss = s.getOutput(lossName);
      if (!loss)
        return loss.takeStatus();
      float l = firstFloat(*loss);
      size_t stepCorrect = 0, stepCounted = 0;
      if (!scoresName.empty() && !labelName.empty()) {
        auto scores = s.getOutput(scoresName);
        if (scores) {
          stepCorrect = countCorrect(*scores, labels, static_cast<int64_t>(real));
          stepCounted = real;
        }
      }
      // Data parallel: the loss and accuracy of the global batch (MPI ranks; NCCL
      // ranks without MPI report rank 0's).
      if (training && ranks.comm) {
        double sums[3] = {l, static_cast<double>(stepCorrect), static_cast<double>(stepCounted)};
        DLC_RETURN_IF_ERROR(ranks.comm->allReduce(sums, 3, pkg::DType::F64, rt::ReduceOp::Sum));
        l = static_cast<float>(sums[0] / worldSize);
        stepCorrect = static_cast<size_t>(sums[1]);
        stepCounted = static_cast<size_t>(sums[2]);
      }
      lossSum += l;
      correct += stepCorrect;
      counted += stepCounted;
      bool skipped = false;
      float usedScale = scale;
      if (training && scaled) {
        auto f = lossScale();
        if (!f)
          return f.takeStatus();
        skipped = *f < scale;
        skippedSteps += skipped;
        scale = *f;
      }
      if (training && log) {
        *log << llvm::formatv("{{\"epoch\": {0}, \"step\": {1}, \"loss\": {2}", epoch + 1, k + 1,
                              jsonNumber(l))
                    .str();
        if (scaled)
          *log << ", \"loss_scale\": " << jsonNumber(usedScale)
               << ", \"skipped\": " << (skipped ? "true" : "false");
        *log << "}\n";
        log->flush();
      }
      if (training && !std::isfinite(l))
        return Status(StatusCode::InvalidArgument,
                      "the loss became " + std::string(std::isnan(l) ? "NaN" : "infinite") +
                          " at epoch " + std::to_string(epoch + 1) + ", step " +
                          std::to_string(k + 1) + " (lower --lr?)");
      if (training && !quiet && isTerminal()) {
        constexpr size_t width = 24;
        size_t filled = (k + 1) * width / steps;
        double secs = seconds(t0);
        llvm::errs() << "\r\x1b[Kepoch " << epoch + 1 << "/" << *epochs << " ["
                     << std::string(filled, '#') << std::string(width - filled, '.') << "] "
                     << k + 1 << "/" << steps << " loss "
                     << llvm::format("%.4f", lossSum / static_cast<double>(k + 1)) << "  "
                     << llvm::format("%.0f",
                                     secs > 0 ? static_cast<double>((k + 1) * global) / secs : 0.0)
                     << " samples/s";
      }
    }
    return Status::ok();
  };

  size_t stepsPerEpoch = train->samples / globalBatch;
  if (!quiet && train->samples % globalBatch)
    llvm::errs() << "dlc: note: the last " << train->samples % globalBatch
                 << " samples of each epoch do not fill a batch and are skipped\n";
  if (!quiet) {
    llvm::errs() << "dlc: training on " << s.backendDescription() << ": " << train->samples
                 << " samples, batch " << batch;
    if (ranks.distributed())
      llvm::errs() << " on each of " << worldSize << " ranks (global batch " << globalBatch << "; "
                   << (ranks.comm ? ranks.comm->describe() : std::string("NCCL")) << ")";
    llvm::errs() << ", " << stepsPerEpoch << " steps per epoch\n";
  }
  std::mt19937_64 rng(static_cast<uint64_t>(*seed));
  auto start = std::chrono::steady_clock::now();
  for (size_t e = 0; e < static_cast<size_t>(*epochs); ++e) {
    std::vector<int64_t> order(train->samples);
    std::iota(order.begin(), order.end(), 0);
    if (!args->has("no-shuffle"))
      std::shuffle(order.begin(), order.end(), rng);
    double lossSum = 0;
    size_t correct = 0, counted = 0;
    auto t0 = std::chrono::steady_clock::now();
    size_t skippedBefore = skippedSteps;
    if (Status st = runBatches(*train, order, true, e, lossSum, correct, counted))
      return failRank(st.message());
    double secs = seconds(t0);
    std::string line = llvm::formatv("epoch {0}/{1}: loss {2:f4}", e + 1, *epochs,
                                     lossSum / static_cast<double>(stepsPerEpoch))
                           .str();
    if (counted)
      line +=
          llvm::formatv(", train accuracy {0:f2}%", 100.0 * static_cast<double>(correct) / counted)
              .str();
    if (scaled)
      line += llvm::formatv(", loss scale {0} ({1} skipped)", scale, skippedSteps - skippedBefore)
                  .str();
    if (eval && ranks.lead()) {
      std::vector<int64_t> all(eval->samples);
      std::iota(all.begin(), all.end(), 0);
      double el = 0;
      size_t ec = 0, en = 0;
      if (Status st = runBatches(*eval, all, false, e, el, ec, en))
        return failRank(st.message());
      size_t evalSteps = (eval->samples + batch - 1) / batch;
      line +=
          llvm::formatv(", eval loss {0:f4}", evalSteps ? el / static_cast<double>(evalSteps) : NAN)
              .str();
      if (en)
        line += llvm::formatv(", eval accuracy {0:f2}% ({1}/{2})",
                              100.0 * static_cast<double>(ec) / static_cast<double>(en), ec, en)
                    .str();
    }
    line += llvm::formatv(", {0:f1} s, {1:f0} samples/s", secs,
                          secs > 0 ? static_cast<double>(stepsPerEpoch * globalBatch) / secs : 0.0)
                .str();
    if (!quiet && isTerminal())
      llvm::errs() << "\r\x1b[K";
    if (ranks.lead() && (!quiet || e + 1 == static_cast<size_t>(*epochs)))
      llvm::outs() << line << "\n";
    llvm::outs().flush();
    // Every rank has finished the epoch's steps (its last all-reduce needed them all);
    // every rank calls it (ZeRO-1 shards are gathered), rank 0 writes.
    if (auto ck = args->get("checkpoint"))
      if (Status st = s.saveCheckpoint(*ck))
        return failRank(st.message());
  }
  if (!quiet)
    llvm::errs() << "dlc: trained " << *epochs << " epochs in "
                 << llvm::format("%.1f", seconds(start)) << " s\n";
  // Data parallel on emu: how much of the all-reduce time the backward pass hid.
  if (!quiet && ranks.distributed()) {
    rt::CollectiveStats cs = s.collectiveStats();
    if (cs.allReduces)
      llvm::errs() << llvm::format(
          "dlc: rank 0 ran %llu all-reduces in %.3f s; the steps waited %.3f s for them (%.0f%% "
          "overlapped with the backward pass)\n",
          static_cast<unsigned long long>(cs.allReduces), cs.reduceSeconds, cs.waitSeconds,
          cs.reduceSeconds > 0 ? 100.0 * std::max(0.0, 1 - cs.waitSeconds / cs.reduceSeconds)
                               : 0.0);
  }
  return 0;
}

} // namespace dlc::tool

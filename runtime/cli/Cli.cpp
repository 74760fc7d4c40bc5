//===- Cli.cpp - `run` and `bench` front ends (runtime-only) ---------------===//
#include "dlc/runtime/Cli.h"

#include "dlc/runtime/Calibrate.h"
#include "dlc/support/Files.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sys/stat.h>

namespace dlc::cli {

namespace {

struct Parsed {
  std::map<std::string, std::vector<std::string>> opts;
  std::vector<std::string> positionals;
  std::string error;
  bool has(const std::string &k) const { return opts.count(k) != 0; }
  std::string get(const std::string &k, const std::string &d) const {
    auto it = opts.find(k);
    return it == opts.end() || it->second.empty() ? d : it->second.back();
  }
};

/// Options with values: listed in `valued`; flags otherwise. Short aliases in `alias`.
Parsed parse(const std::vector<std::string> &args, const std::vector<std::string> &valued,
             const std::vector<std::string> &flags,
             const std::map<std::string, std::string> &alias) {
  Parsed p;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a.size() < 2 || a[0] != '-') {
      p.positionals.push_back(a);
      continue;
    }
    auto al = alias.find(a);
    if (al != alias.end())
      a = al->second;
    std::string key = a.substr(a.rfind('-', 1) == 1 ? 2 : 1), value;
    size_t eq = key.find('=');
    bool hasValue = eq != std::string::npos;
    if (hasValue) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    if (std::find(valued.begin(), valued.end(), key) != valued.end()) {
      if (!hasValue) {
        if (i + 1 >= args.size()) {
          p.error = "option --" + key + " needs a value";
          return p;
        }
        value = args[++i];
      }
      p.opts[key].push_back(value);
    } else if (std::find(flags.begin(), flags.end(), key) != flags.end() && !hasValue) {
      p.opts[key];
    } else {
      p.error = "unknown option '" + args[i] + "'";
      return p;
    }
  }
  return p;
}

/// An integer option in [lo, hi], or an error naming the option.
Status intOption(const Parsed &p, const std::string &key, int64_t def, int64_t lo, int64_t hi,
                 int64_t &out) {
  std::string v = p.get(key, std::to_string(def));
  char *end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    return Status(StatusCode::InvalidArgument, "--" + key + " must be an integer from " +
                                                   std::to_string(lo) + " to " +
                                                   std::to_string(hi) + ", got '" + v + "'");
  out = x;
  return Status::ok();
}

int fail(const CliContext &ctx, const std::string &msg, int rc = 1) {
  std::fprintf(stderr, "%s: error: %s\n", ctx.program.c_str(), msg.c_str());
  return rc;
}

void summary(const std::string &name, const rt::HostTensor &t) {
  std::printf("%s: %s[", name.c_str(), pkg::dtypeName(t.dtype));
  for (size_t i = 0; i < t.shape.size(); ++i)
    std::printf("%s%" PRId64, i ? "," : "", t.shape[i]);
  std::printf("] [");
  int64_t n = t.numElements(), shown = std::min<int64_t>(n, 8);
  for (int64_t i = 0; i < shown; ++i)
    std::printf("%s%.6g", i ? ", " : "", t.element(i));
  std::printf(n > shown ? ", ...]" : "]");
  bool fp = t.dtype == pkg::DType::F32 || t.dtype == pkg::DType::F16 ||
            t.dtype == pkg::DType::F64 || t.dtype == pkg::DType::BF16;
  if (n > 1 && fp) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (t.element(i) > t.element(best))
        best = i;
    std::printf("  argmax=%" PRId64, best);
  }
  std::printf("\n");
}

/// "auto", "emu", "cuda" or "cuda:N" (device ordinal N).
Status device(const std::string &s, rt::SessionOptions &so) {
  if (s == "auto" || s == "emu" || s == "cuda") {
    so.device = s == "auto"  ? rt::DeviceKind::Auto
                : s == "emu" ? rt::DeviceKind::Emu
                             : rt::DeviceKind::Cuda;
    return Status::ok();
  }
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos) {
    so.device = rt::DeviceKind::Cuda;
    so.cudaDevice = std::atoi(s.c_str() + 5);
    return Status::ok();
  }
  return Status(StatusCode::InvalidArgument,
                "--device must be auto, cuda, cuda:N or emu, got '" + s + "'");
}

/// Loads the package (embedded, or the first positional) and opens a session.
struct Opened {
  std::shared_ptr<const pkg::PackageFile> pkg;
  std::unique_ptr<rt::Session> session;
  std::vector<std::string> inputSpecs;
};

Result<Opened> open(const Parsed &p, const CliContext &ctx) {
  Opened o;
  size_t firstInput = 0;
  if (ctx.package) {
    o.pkg = ctx.package;
  } else {
    if (p.positionals.empty())
      return Status(StatusCode::InvalidArgument, "expected a package file");
    auto pf = pkg::PackageFile::load(p.positionals[0]);
    if (!pf)
      return pf.takeStatus();
    o.pkg = *pf;
    firstInput = 1;
  }
  rt::SessionOptions so;
  DLC_RETURN_IF_ERROR(device(p.get("device", "auto"), so));
  // An executable's own package is part of the program the user runs.
  so.allowHostCode = p.has("allow-host-code") || ctx.package;
  int64_t threads = 0;
  DLC_RETURN_IF_ERROR(intOption(p, "threads", 0, 0, rt::kMaxEmuThreads, threads));
  so.emuThreads = static_cast<int>(threads);
  so.check = p.has("check");
  std::string order = p.get("thread-order", "forward");
  if (order != "forward" && order != "reverse" && order != "random")
    return Status(StatusCode::InvalidArgument,
                  "--thread-order must be forward, reverse or random, got '" + order + "'");
  so.emuThreadOrder = order == "reverse"  ? rt::SessionOptions::ThreadOrder::Reverse
                      : order == "random" ? rt::SessionOptions::ThreadOrder::Random
                                          : rt::SessionOptions::ThreadOrder::Forward;
  so.cudaGraphs = !p.has("no-cuda-graphs");
  so.profile = p.has("profile");
  auto s = rt::Session::create(o.pkg, so);
  if (!s)
    return s.takeStatus();
  o.session = std::move(*s);
  auto it = p.opts.find("input");
  if (it != p.opts.end())
    o.inputSpecs = it->second;
  o.inputSpecs.insert(o.inputSpecs.end(), p.positionals.begin() + firstInput, p.positionals.end());
  return o;
}

/// Sets every input from the specs; with `randomFill`, inputs without a file get random
/// data, at the shapes of `shapes` (NAME=D0,D1,...) where given.
Status setInputs(Opened &o, const CliContext &ctx, bool randomFill,
                 const std::vector<std::string> &shapes = {}) {
  const pkg::Package &m = o.pkg->meta();
  std::vector<bool> given(m.inputs() ? m.inputs()->size() : 0, false);
  for (const std::string &spec : o.inputSpecs) {
    std::string name, file;
    size_t eq = spec.find('=');
    if (eq == std::string::npos) {
      if (given.size() != 1)
        return Status(StatusCode::InvalidArgument, "input '" + spec +
                                                       "': give NAME=FILE (the model has " +
                                                       std::to_string(given.size()) + " inputs)");
      name = m.inputs()->Get(0)->name()->str();
      file = spec;
    } else {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    }
    auto t = ctx.readInput ? ctx.readInput(file) : rt::readNpy(file);
    if (!t)
      return t.takeStatus();
    // NumPy has no bfloat16: a bf16 input may come as uint16 bit patterns.
    int want = o.session->inputIndex(name);
    if (want >= 0 && t->dtype == pkg::DType::U16 &&
        m.inputs()->Get(want)->dtype() == pkg::DType::BF16)
      t->dtype = pkg::DType::BF16;
    if (Status s = o.session->setInput(name, *t))
      return Status(s.code(), file + ": " + s.message());
    int idx = o.session->inputIndex(name);
    if (idx >= 0)
      given[idx] = true;
  }
  if (randomFill)
    for (size_t i = 0; i < given.size(); ++i) {
      if (given[i])
        continue;
      const pkg::TensorInfo *in = m.inputs()->Get(i);
      std::string name = in->name()->str();
      // The input's shape (a shape-range package: its opt shape, or --shape NAME=...).
      std::vector<int64_t> shape = o.session->inputShape(name);
      for (const std::string &spec : shapes) {
        size_t eq = spec.find('=');
        if (spec.compare(0, eq, name) != 0 || eq == std::string::npos)
          continue;
        shape.clear();
        for (size_t a = eq + 1; a <= spec.size();) {
          size_t comma = std::min(spec.find(',', a), spec.size());
          std::string d = spec.substr(a, comma - a);
          if (d.empty() || d.size() > 12 || d.find_first_not_of("0123456789") != std::string::npos)
            return Status(StatusCode::InvalidArgument,
                          "--shape expects NAME=D0,D1,..., got '" + spec + "'");
          shape.push_back(std::stoll(d));
          a = comma + 1;
        }
      }
      rt::HostTensor t = rt::HostTensor::zeros(in->dtype(), shape);
      std::mt19937 rng(static_cast<unsigned>(i));
      if (in->dtype() == pkg::DType::F32)
        for (size_t k = 0; k < t.data.size() / 4; ++k) {
          float v = std::uniform_real_distribution<float>(-1, 1)(rng);
          std::memcpy(t.data.data() + 4 * k, &v, 4);
        }
      DLC_RETURN_IF_ERROR(o.session->setInput(name, t));
    }
  for (const std::string &spec : shapes)
    if (o.session->inputIndex(spec.substr(0, spec.find('='))) < 0)
      return Status(StatusCode::InvalidArgument,
                    "--shape " + spec + ": " +
                        pkg::unknownInputMessage(m, spec.substr(0, spec.find('='))));
  return Status::ok();
}

/// Compares an output with its reference (--expect): same shape, and every element
/// within atol + rtol * |reference| (NaN matches NaN). Prints the errors; an error
/// status names the worst element when they differ (`mismatch` set), or says why the
/// reference could not be read.
Status compareWithReference(const std::string &name, const rt::HostTensor &got,
                            const std::string &refPath, double rtol, double atol, bool quiet,
                            bool &mismatch) {
  mismatch = true;
  auto ref = rt::readNpy(refPath);
  if (!ref)
    mismatch = false;
  if (!ref)
    return ref.takeStatus();
  auto dims = [](const std::vector<int64_t> &s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i)
      r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
  };
  if (got.shape != ref->shape)
    return Status(StatusCode::InvalidArgument, "output '" + name + "' has shape " +
                                                   dims(got.shape) + ", " + refPath + " has " +
                                                   dims(ref->shape));
  int64_t n = 1, bad = 0, worst = -1;
  for (int64_t d : got.shape)
    n *= d;
  double maxAbs = 0, maxRel = 0, worstExcess = 0;
  for (int64_t i = 0; i < n; ++i) {
    double a = got.element(i), b = ref->element(i);
    if (std::isnan(a) && std::isnan(b))
      continue;
    double err, excess;
    if (!std::isfinite(a) || !std::isfinite(b)) {
      // A NaN or an infinity matches only itself (a tolerance cannot reach it).
      err = excess = a == b ? 0 : INFINITY;
    } else {
      err = std::fabs(a - b);
      excess = err - (atol + rtol * std::fabs(b));
      maxRel = std::max(maxRel, err / (std::fabs(b) + atol / rtol));
    }
    maxAbs = std::max(maxAbs, err);
    if (err == INFINITY)
      maxRel = INFINITY;
    if (excess > 0) {
      ++bad;
      if (worst < 0 || excess > worstExcess) {
        worst = i;
        worstExcess = excess;
      }
    }
  }
  if (bad) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%" PRId64 " of %" PRId64
                  " elements differ beyond rtol %g, atol %g (worst: element %" PRId64
                  ", got %.9g, expected %.9g)",
                  bad, n, rtol, atol, worst, got.element(worst), ref->element(worst));
    return Status(StatusCode::InvalidArgument,
                  "output '" + name + "' does not match " + refPath + ": " + buf);
  }
  if (!quiet)
    std::printf("  %s matches %s: max abs error %.3g, max rel error %.3g\n", name.c_str(),
                refPath.c_str(), maxAbs, maxRel);
  return Status::ok();
}

/// A non-negative floating-point option.
Status realOption(const Parsed &p, const std::string &key, double dflt, double &out) {
  std::string v = p.get(key, "");
  if (v.empty()) {
    out = dflt;
    return Status::ok();
  }
  char *end = nullptr;
  errno = 0;
  out = std::strtod(v.c_str(), &end);
  if (errno || end == v.c_str() || *end || !(out >= 0) || std::isinf(out))
    return Status(StatusCode::InvalidArgument,
                  "--" + key + " must be a non-negative number, got '" + v + "'");
  return Status::ok();
}

} // namespace

int runMain(const std::vector<std::string> &args, const CliContext &ctx) {
  Parsed p = parse(
      args, {"input", "device", "threads", "output-dir", "thread-order", "expect", "rtol", "atol"},
      {"quiet", "help", "check", "no-cuda-graphs", "allow-host-code"},
      {{"-i", "--input"}, {"-q", "--quiet"}, {"-h", "--help"}});
  if (p.has("help")) {
    std::printf(
        "usage: %s %s[--input] NAME=FILE(.npy) ... [--output-dir DIR] [--device "
        "auto|cuda[:N]|emu]\n"
        "       [--threads N] [--check] [--thread-order forward|reverse|random] "
        "[--no-cuda-graphs]\n"
        "       [--expect DIR [--rtol R] [--atol A]] [--allow-host-code] [--quiet]\n\n"
        "Runs the model and writes one NAME.npy per output.\n\n"
        "  --expect DIR       compare each output with DIR/NAME.npy: exit status 3 when an\n"
        "                     element is off by more than atol + rtol * |expected| (defaults\n"
        "                     1e-3 and 1e-4) or a shape differs\n"
        "  --check            emu: the checks compute-sanitizer makes on a GPU that cost time\n"
        "                     (memory starts as NaN bytes, ...); barriers, warp masks and\n"
        "                     alignment are always checked\n"
        "  --thread-order     emu: the order of a block's threads between barriers\n"
        "  --no-cuda-graphs   cuda: launch step by step instead of replaying a CUDA graph\n"
        "  --allow-host-code  emu: run the package's host code (its emu module) even though\n"
        "                     another user or machine compiled it: only for packages you\n"
        "                     trust, as it runs as you\n",
        ctx.program.c_str(), ctx.package ? "" : "PACKAGE.dlc ");
    return 0;
  }
  if (!p.error.empty())
    return fail(ctx, p.error, 2);
  double rtol = 0, atol = 0;
  for (Status s : {realOption(p, "rtol", 1e-3, rtol), realOption(p, "atol", 1e-4, atol)})
    if (s)
      return fail(ctx, s.message(), 2);
  if (rtol == 0)
    rtol = 1e-300; // (the relative error divides by atol / rtol)
  auto o = open(p, ctx);
  if (!o)
    return fail(ctx, o.status().message());
  bool quiet = p.has("quiet");
  if (!quiet) {
    std::fprintf(stderr, "%s: running on %s\n", ctx.program.c_str(),
                 o->session->backendDescription().c_str());
    for (const std::string &n : o->session->scheduleNotes())
      std::fprintf(stderr, "%s: %s\n", ctx.program.c_str(), n.c_str());
  }
  if (Status s = setInputs(*o, ctx, false))
    return fail(ctx, s.message());
  if (Status s = o->session->run())
    return fail(ctx, s.message());
  if (!quiet && !o->session->backendNote().empty())
    std::fprintf(stderr, "%s: note: %s\n", ctx.program.c_str(), o->session->backendNote().c_str());
  std::string dir = p.get("output-dir", ".");
  ::mkdir(dir.c_str(), 0777);
  const pkg::Package &m = o->pkg->meta();
  // Every output goes to a temporary file first; they are renamed into place only when
  // all are written (a full disk left some outputs new and others missing).
  std::vector<AtomicFile> files;
  if (m.outputs())
    for (const pkg::TensorInfo *out : *m.outputs()) {
      auto t = o->session->getOutput(out->name()->str());
      if (!t)
        return fail(ctx, t.status().message());
      std::string path = dir + "/" + outputFileName(out->name()->str());
      for (const std::string &spec : o->inputSpecs)
        if (Status s =
                refuseOverwrite(path, "output", {{spec.substr(spec.find('=') + 1), "input"}}))
          return fail(ctx, s.message());
      if (p.has("expect"))
        if (Status s =
                refuseOverwrite(path, "output",
                                {{p.get("expect", ".") + "/" + outputFileName(out->name()->str()),
                                  "reference of --expect"}}))
          return fail(ctx, s.message());
      auto f = AtomicFile::open(path);
      if (!f)
        return fail(ctx, f.status().message());
      std::string bytes = rt::encodeNpy(*t);
      if (Status s = f->write(bytes.data(), bytes.size()))
        return fail(ctx, s.message());
      files.push_back(std::move(*f));
      if (!quiet)
        summary(out->name()->str(), *t);
    }
  if (Status s = commitAll(files))
    return fail(ctx, s.message());
  if (p.has("expect") && m.outputs())
    for (const pkg::TensorInfo *out : *m.outputs()) {
      auto t = o->session->getOutput(out->name()->str());
      if (!t)
        return fail(ctx, t.status().message());
      std::string ref = p.get("expect", ".") + "/" + outputFileName(out->name()->str());
      bool mismatch = false;
      if (Status s = compareWithReference(out->name()->str(), *t, ref, rtol, atol, quiet, mismatch))
        return fail(ctx, s.message(), mismatch ? 3 : 1);
    }
  return 0;
}

/// The session's tactics, one line per candidate: the layer, who implements it, its
/// time where measured, and which one runs.
void printTactics(const rt::Session &s) {
  if (s.tactics().empty()) {
    std::printf("tactics: none (no layer of this package has alternatives)\n");
    return;
  }
  std::printf("tactics (%zu layers; * runs):\n", s.tactics().size());
  for (const rt::TacticChoice &c : s.tactics()) {
    std::printf("  %s%s [%s]\n", c.node.c_str(),
                c.schedule ? (" (shape variant " + std::to_string(c.schedule - 1) + ")").c_str()
                           : "",
                c.how.c_str());
    for (size_t i = 0; i < c.candidates.size(); ++i) {
      const rt::TacticChoice::Candidate &k = c.candidates[i];
      char t[32] = "not timed";
      if (k.micros >= 0)
        std::snprintf(t, sizeof t, "%.2f us", k.micros);
      std::printf("    %c %-8s %12s  %s%s%s\n", i == c.chosen ? '*' : ' ', k.kind.c_str(), t,
                  k.description.c_str(), k.problem.empty() ? "" : " -- ", k.problem.c_str());
    }
  }
}

int benchMain(const std::vector<std::string> &args, const CliContext &ctx) {
  Parsed p = parse(
      args,
      {"input", "device", "threads", "warmup", "iterations", "batch", "thread-order", "shape"},
      {"help", "check", "no-cuda-graphs", "allow-host-code", "profile", "tactics"},
      {{"-i", "--input"}, {"-h", "--help"}});
  if (p.has("help")) {
    std::printf(
        "usage: %s %s[--warmup N] [--iterations N] [--batch N] [--device auto|cuda[:N]|emu]\n"
        "       [--threads N] [--check] [--thread-order O] [--no-cuda-graphs] [--input NAME=FILE "
        "...]\n"
        "       [--shape NAME=D0,D1,... ...] [--allow-host-code] [--profile] [--tactics]\n\n"
        "Measures latency (min/median/p90/p99/max) and throughput, with host-to-device and\n"
        "device-to-host copies timed apart from compute. Inputs without a file are random.\n"
        "--shape: the shape of a random input (a package compiled with --input-shape ranges\n"
        "takes any shape in them; default: its opt shape).\n"
        "--batch: samples per inference for throughput (default: the first input's leading\n"
        "dimension as run).\n"
        "--profile: the median time of each step instead (host-timed: the device is\n"
        "synchronized after every step, without a CUDA graph; about 10 us of that is\n"
        "synchronization, so it is a per-step upper bound).\n"
        "--tactics: first each layer's candidates (ours, cuDNN, cuBLASLt), their times as the\n"
        "session measured them when it started, which one runs, and the session's creation\n"
        "time (DLC_TACTICS=dlc|vendor|auto forces a family; README: Tactics).\n",
        ctx.program.c_str(), ctx.package ? "" : "PACKAGE.dlc ");
    return 0;
  }
  if (!p.error.empty())
    return fail(ctx, p.error, 2);
  int64_t warmup = 0, iters = 0, batch = 0;
  for (Status s : {intOption(p, "warmup", 10, 0, 1000000, warmup),
                   intOption(p, "iterations", 100, 1, 10000000, iters),
                   intOption(p, "batch", 0, 0, int64_t(1) << 40, batch)})
    if (s)
      return fail(ctx, s.message(), 2);
  const auto created = std::chrono::steady_clock::now();
  auto o = open(p, ctx);
  if (!o)
    return fail(ctx, o.status().message());
  const double createMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - created).count();
  const pkg::Package &m = o->pkg->meta();
  auto shapes = p.opts.find("shape");
  if (Status s = setInputs(*o, ctx, true,
                           shapes == p.opts.end() ? std::vector<std::string>{} : shapes->second))
    return fail(ctx, s.message());
  if (batch == 0) {
    std::vector<int64_t> first = m.inputs() && m.inputs()->size()
                                     ? o->session->inputShape(m.inputs()->Get(0)->name()->str())
                                     : std::vector<int64_t>{};
    batch = first.empty() ? 1 : first[0];
  }
  // Random inputs are uploaded again every run (timing h2d); given ones stay as set.
  std::vector<std::pair<std::string, rt::HostTensor>> upload;
  if (m.inputs() && !p.opts.count("input"))
    for (const pkg::TensorInfo *in : *m.inputs())
      upload.emplace_back(
          in->name()->str(),
          rt::HostTensor::zeros(in->dtype(), o->session->inputShape(in->name()->str())));
  if (p.has("profile")) {
    std::vector<std::vector<double>> perStep;
    std::vector<rt::StepTime> names;
    for (int64_t i = 0; i < warmup + iters; ++i) {
      for (const auto &[name, tensor] : upload)
        if (Status s = o->session->setInput(name, tensor))
          return fail(ctx, s.message());
      if (Status s = o->session->run())
        return fail(ctx, s.message());
      const std::vector<rt::StepTime> &prof = o->session->lastProfile();
      if (i < warmup)
        continue;
      if (perStep.empty()) {
        perStep.resize(prof.size());
        names = prof;
      }
      for (size_t k = 0; k < prof.size() && k < perStep.size(); ++k)
        perStep[k].push_back(prof[k].microseconds);
    }
    std::printf("device: %s\n", o->session->backendDescription().c_str());
    std::printf("per-step median over %" PRId64 " runs (host-timed, synchronized per step):\n",
                iters);
    double total = 0;
    for (size_t k = 0; k < perStep.size(); ++k) {
      double med = rt::benchStats(perStep[k]).median;
      total += med;
      std::printf("step %4zu %-8s %10.2f us  %s\n", k, names[k].kind.c_str(), med,
                  names[k].node.c_str());
    }
    std::printf("sum of step medians: %.2f us\n", total);
    return 0;
  }
  if (p.has("tactics")) {
    printTactics(*o->session);
    std::printf("session created in %.1f ms (loading, weights%s)\n", createMs,
                o->session->tactics().empty() ? "" : ", choosing the tactics");
    for (const std::string &n : o->session->scheduleNotes())
      std::printf("note: %s\n", n.c_str());
  }
  auto times = rt::benchmark(*o->session, upload, warmup, iters);
  if (!times)
    return fail(ctx, times.status().message());
  auto line = [&](const char *what, const std::vector<double> &v) {
    rt::BenchStats st = rt::benchStats(v);
    std::printf("%-10s min %9.4f  median %9.4f  p90 %9.4f  p99 %9.4f  max %9.4f ms\n", what, st.min,
                st.median, st.p90, st.p99, st.max);
  };
  std::printf("device: %s\n", o->session->backendDescription().c_str());
  if (o->session->deviceKind() == rt::DeviceKind::Emu)
    std::printf(
        "note: emu backend: these are CPU timings of the emulated kernels, not GPU timings\n");
  if (!o->session->backendNote().empty())
    std::printf("note: %s\n", o->session->backendNote().c_str());
  std::printf("iterations: %" PRId64 " (after %" PRId64 " warm-up), batch %" PRId64 "\n", iters,
              warmup, batch);
  line("h2d", times->h2d);
  line("compute", times->compute);
  line("d2h", times->d2h);
  line("total", times->total);
  double med = rt::benchStats(times->compute).median;
  std::printf("throughput: %.2f inferences/s, %.2f samples/s (compute median)\n", 1000.0 / med,
              1000.0 * static_cast<double>(batch) / med);
  return 0;
}

int tuneMain(const std::vector<std::string> &args, const CliContext &ctx) {
  Parsed p =
      parse(args, {"device", "budget-ms", "cache-dir"}, {"help", "embed"}, {{"-h", "--help"}});
  if (p.has("help")) {
    std::printf(
        "usage: %s PACKAGE [--device N] [--budget-ms N] [--cache-dir DIR] [--embed]\n\n"
        "Chooses each layer's tactic on this machine's GPU ahead of time: times our kernels\n"
        "and the vendor libraries' on every layer that has several, prints the table, and\n"
        "writes the choices to the tactics cache (default ~/.cache/dlc/tactics), where every\n"
        "later session of PACKAGE on this GPU, driver and library versions finds them.\n"
        "--embed: also write them into PACKAGE (replaced atomically), for this GPU and\n"
        "library versions: the package still runs everywhere, and sessions on a matching\n"
        "machine time nothing, even with no cache. Without --embed the package is not\n"
        "changed.\n",
        ctx.program.c_str());
    return 0;
  }
  if (!p.error.empty())
    return fail(ctx, p.error, 2);
  if (p.positionals.size() != 1)
    return fail(ctx, "expected one package file", 2);
  const std::string &path = p.positionals[0];
  int64_t device = 0;
  if (Status s = intOption(p, "device", 0, 0, 1024, device))
    return fail(ctx, s.message(), 2);
  double budget = 0;
  if (Status s = realOption(p, "budget-ms", 60000, budget))
    return fail(ctx, s.message(), 2);
  if (!(budget > 0))
    return fail(ctx, "--budget-ms must be positive", 2);
  auto pf = pkg::PackageFile::load(path);
  if (!pf)
    return fail(ctx, pf.status().message());
  if (auto cc = rt::cudaComputeCapability(static_cast<int>(device)); !cc)
    return fail(ctx,
                "tuning needs a GPU (" + cc.status().message() + "); " + path + " is unchanged");
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaDevice = static_cast<int>(device);
  so.tactics = rt::SessionOptions::Tactics::Auto;
  so.tuneBudgetMs = budget;
  so.tacticsCacheDir = p.get("cache-dir", "");
  so.useEmbeddedTactics = false; // a tuned package is measured again (or read from the cache)
  auto t0 = std::chrono::steady_clock::now();
  auto s = rt::Session::create(*pf, so);
  if (!s)
    return fail(ctx, s.status().message());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("device: %s\n", (*s)->backendDescription().c_str());
  printTactics(**s);
  for (const std::string &n : (*s)->scheduleNotes())
    std::printf("note: %s\n", n.c_str());
  std::printf("session created in %.2f s\n", secs);
  if (!p.has("embed"))
    return 0;
  auto img = rt::embedChosenTactics(**s, **pf);
  if (!img)
    return fail(ctx, "not embedded: " + img.status().message() + "; " + path + " is unchanged");
  struct stat st;
  auto out = AtomicFile::open(path, ::stat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0644);
  Status w = out ? Status::ok() : out.status();
  if (w.isOk())
    img->forEachPiece([&](const uint8_t *d, size_t n) {
      if (w.isOk())
        w = out->write(d, n);
    });
  if (w.isOk())
    w = out->commit();
  if (!w.isOk())
    return fail(ctx, "not embedded: " + w.message() + "; " + path + " is unchanged");
  std::printf("embedded the choices for this GPU into %s\n", path.c_str());
  return 0;
}

int calibrateMain(const std::vector<std::string> &args, const CliContext &ctx) {
  Parsed p = parse(args, {"calibrate", "device", "name", "output"}, {"help"},
                   {{"-o", "--output"}, {"-h", "--help"}});
  if (p.has("help")) {
    std::printf("usage: %s --calibrate DIR [--device N] [--name NAME] [-o FILE]\n\n"
                "Measures this GPU for dlc's cost model with the microbenchmarks in DIR\n"
                "(`dlc calibrate --emit-kernels DIR`) and prints a profile for `dlc inspect\n"
                "--gpu-profile` (or writes it to FILE).\n",
                ctx.program.c_str());
    return 0;
  }
  if (!p.error.empty())
    return fail(ctx, p.error, 2);
  if (!p.positionals.empty())
    return fail(ctx, "--calibrate takes no package", 2);
  int64_t device = 0;
  if (Status s = intOption(p, "device", 0, 0, 1024, device))
    return fail(ctx, s.message(), 2);
  auto cc = rt::cudaComputeCapability(static_cast<int>(device));
  if (!cc)
    return fail(ctx, "--calibrate needs a GPU: " + cc.status().message());
  std::string arch = "sm_" + std::to_string(cc->first * 10 + cc->second);
  std::string path = p.get("calibrate", ".") + "/calibrate_" + arch + ".cubin";
  std::vector<uint8_t> cubin;
  if (FILE *f = std::fopen(path.c_str(), "rb")) {
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && cubin.size() < (64u << 20))
      cubin.insert(cubin.end(), buf, buf + n);
    std::fclose(f);
  }
  if (cubin.empty())
    return fail(ctx, "cannot read " + path + " (dlc calibrate --emit-kernels writes it)");
  auto c = rt::calibrate(static_cast<int>(device), cubin, [](const std::string &what) {
    std::fprintf(stderr, "calibrate: %s\n", what.c_str());
  });
  if (!c)
    return fail(ctx, c.status().message());
  std::printf("device: %s (%s, %d SMs)\n", c->device.c_str(), arch.c_str(), c->sms);
  std::string name = p.get("name", rt::profileNameFor(c->device));
  if (name.empty())
    name = c->device;
  if (cc->first * 10 + cc->second != 80 && cc->first * 10 + cc->second != 86 &&
      cc->first * 10 + cc->second != 89 && cc->first * 10 + cc->second != 90)
    std::fprintf(stderr,
                 "note: dlc has no built-in profile for %s; dlc inspect loads profiles "
                 "of sm_80, sm_86, sm_89 and sm_90 only\n",
                 arch.c_str());
  std::string json = rt::calibrationProfileJson(*c, name);
  if (!p.has("output")) {
    std::fputs(json.c_str(), stdout);
    return 0;
  }
  auto out = AtomicFile::open(p.get("output", ""));
  if (!out)
    return fail(ctx, out.status().message());
  Status s = out->write(json.data(), json.size());
  if (!s)
    s = out->commit();
  if (s)
    return fail(ctx, s.message());
  std::printf("wrote %s\n", p.get("output", "").c_str());
  return 0;
}

std::string outputFileName(const std::string &name) {
  std::string s;
  for (char c : name)
    s +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '_';
  if (s.empty() || s == "." || s == "..")
    s = "output";
  return s + ".npy";
}

} // namespace dlc::cli

//===- Calibrate.cpp - Timing the microbenchmarks of `dlc calibrate` -------===//
#include "dlc/runtime/Calibrate.h"

#include "Driver.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace dlc::rt {

namespace cuda {

namespace {

/// The device, its primary context pushed, a stream, two events and the module; all
/// released by the destructor.
class Bench {
public:
  explicit Bench(const Driver &d) : d_(d) {}
  ~Bench() {
    for (CUdeviceptr p : allocations_)
      d_.cuMemFree_(p);
    if (start_)
      d_.cuEventDestroy_(start_);
    if (end_)
      d_.cuEventDestroy_(end_);
    if (stream_)
      d_.cuStreamDestroy_(stream_);
    if (module_)
      d_.cuModuleUnload_(module_);
    if (pushed_) {
      CUcontext c;
      d_.cuCtxPopCurrent_(&c);
    }
    if (retained_)
      d_.cuDevicePrimaryCtxRelease_(device_);
  }

  Status check(CUresult r, const char *what) const {
    return r == CUDA_SUCCESS ? Status::ok()
                             : Status(StatusCode::Unavailable,
                                      std::string("calibrate: ") + what + ": " + d_.error(r));
  }

  Status open(int ordinal, const std::vector<uint8_t> &cubin, Calibration &c) {
    DLC_RETURN_IF_ERROR(check(d_.cuInit_(0), "cuInit"));
    int count = 0;
    DLC_RETURN_IF_ERROR(check(d_.cuDeviceGetCount_(&count), "cuDeviceGetCount"));
    if (ordinal < 0 || ordinal >= count)
      return Status(StatusCode::InvalidArgument, "calibrate: no CUDA device " +
                                                     std::to_string(ordinal) + " (" +
                                                     std::to_string(count) + " present)");
    DLC_RETURN_IF_ERROR(check(d_.cuDeviceGet_(&device_, ordinal), "cuDeviceGet"));
    char name[256] = {};
    DLC_RETURN_IF_ERROR(check(d_.cuDeviceGetName_(name, sizeof name - 1, device_), "name"));
    c.device = name;
    DLC_RETURN_IF_ERROR(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c.ccMajor));
    DLC_RETURN_IF_ERROR(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c.ccMinor));
    DLC_RETURN_IF_ERROR(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c.sms));
    DLC_RETURN_IF_ERROR(attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, l2Bytes_));
    if (!attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, clockKhz_).isOk())
      clockKhz_ = 0;
    if (c.sms < 1 || l2Bytes_ < 1)
      return Status(StatusCode::Unavailable, "calibrate: the device reports no SMs or no L2");
    DLC_RETURN_IF_ERROR(check(d_.cuDevicePrimaryCtxRetain_(&ctx_, device_), "context"));
    retained_ = true;
    DLC_RETURN_IF_ERROR(check(d_.cuCtxPushCurrent_(ctx_), "cuCtxPushCurrent"));
    pushed_ = true;
    DLC_RETURN_IF_ERROR(check(d_.cuModuleLoadData_(&module_, cubin.data()),
                              "loading the microbenchmarks (compiled for another GPU?)"));
    DLC_RETURN_IF_ERROR(check(d_.cuStreamCreate_(&stream_, CU_STREAM_NON_BLOCKING), "stream"));
    DLC_RETURN_IF_ERROR(check(d_.cuEventCreate_(&start_, CU_EVENT_DEFAULT), "event"));
    DLC_RETURN_IF_ERROR(check(d_.cuEventCreate_(&end_, CU_EVENT_DEFAULT), "event"));
    DLC_RETURN_IF_ERROR(alloc(2 * sizeof(uint64_t), out_));
    return Status::ok();
  }

  Status attribute(CUdevice_attribute a, int &v) {
    return check(d_.cuDeviceGetAttribute_(&v, a, device_), "cuDeviceGetAttribute");
  }

  Status alloc(size_t bytes, CUdeviceptr &p) {
    DLC_RETURN_IF_ERROR(check(d_.cuMemAlloc_(&p, bytes), "cuMemAlloc"));
    allocations_.push_back(p);
    return Status::ok();
  }

  Status function(const char *name, CUfunction &f) {
    return check(d_.cuModuleGetFunction_(&f, module_, name), name);
  }

  /// Blocks of `threads` for one wave of `f`: up to 4 per SM, as many as fit.
  Status wave(CUfunction f, int sms, unsigned threads, unsigned &blocks) {
    int perSm = 0;
    DLC_RETURN_IF_ERROR(check(
        d_.cuOccupancyMaxActiveBlocksPerMultiprocessor_(&perSm, f, static_cast<int>(threads), 0),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
    blocks = static_cast<unsigned>(sms * std::clamp(perSm, 1, 4));
    return Status::ok();
  }

  Status launch(CUfunction f, unsigned grid, unsigned block, void **params) {
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = block;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = stream_;
    return check(d_.cuLaunchKernelEx_(&cfg, f, params, nullptr), "cuLaunchKernelEx");
  }

  /// Milliseconds between the events around `issue`, the least of `reps` runs.
  Status time(const std::function<Status()> &issue, int reps, double &ms) {
    ms = INFINITY;
    for (int r = 0; r < reps; ++r) {
      DLC_RETURN_IF_ERROR(check(d_.cuEventRecord_(start_, stream_), "cuEventRecord"));
      DLC_RETURN_IF_ERROR(issue());
      DLC_RETURN_IF_ERROR(check(d_.cuEventRecord_(end_, stream_), "cuEventRecord"));
      DLC_RETURN_IF_ERROR(check(d_.cuEventSynchronize_(end_), "cuEventSynchronize"));
      float t = 0;
      DLC_RETURN_IF_ERROR(check(d_.cuEventElapsedTime_(&t, start_, end_), "cuEventElapsedTime"));
      ms = std::min(ms, static_cast<double>(t));
    }
    if (!(ms > 0) || !std::isfinite(ms))
      return Status(StatusCode::Unavailable, "calibrate: the GPU timer measured no time");
    return Status::ok();
  }

  /// out[0] after the last kernel.
  Status result(uint64_t &v) {
    DLC_RETURN_IF_ERROR(
        check(d_.cuMemcpyDtoHAsync_(&v, out_, sizeof v, stream_), "cuMemcpyDtoHAsync"));
    return check(d_.cuStreamSynchronize_(stream_), "cuStreamSynchronize");
  }

  Status graphOf(CUfunction f, int nodes, CUgraphExec &exec) {
    DLC_RETURN_IF_ERROR(
        check(d_.cuStreamBeginCapture_(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture"));
    void *params[] = {&out_};
    Status launched = Status::ok();
    for (int i = 0; i < nodes && !launched; ++i)
      launched = launch(f, 1, 32, params);
    CUgraph graph = nullptr;
    Status ended = check(d_.cuStreamEndCapture_(stream_, &graph), "cuStreamEndCapture");
    Status made = launched ? launched
                  : ended  ? ended
                           : check(d_.cuGraphInstantiateWithFlags_(&exec, graph, 0), "graph");
    if (graph)
      d_.cuGraphDestroy_(graph);
    return made;
  }

  const Driver &d_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr, end_ = nullptr;
  CUdeviceptr out_ = 0;
  int l2Bytes_ = 0, clockKhz_ = 0;
  bool retained_ = false, pushed_ = false;
  std::vector<CUdeviceptr> allocations_;
};

} // namespace

Result<Calibration> calibrateWith(const Driver &d, int ordinal, const std::vector<uint8_t> &cubin,
                                  const std::function<void(const std::string &)> &progress) {
  Calibration c;
  Bench b(d);
  DLC_RETURN_IF_ERROR(b.open(ordinal, cubin, c));
  auto say = [&](const std::string &what) {
    if (progress)
      progress(what);
  };
  CUfunction ffma, hfma2, mma, copy, l2, ring, chase, empty;
  const std::pair<const char *, CUfunction *> functions[] = {
      {"dlc_cal_ffma", &ffma},   {"dlc_cal_hfma2", &hfma2}, {"dlc_cal_mma", &mma},
      {"dlc_cal_copy", &copy},   {"dlc_cal_l2", &l2},       {"dlc_cal_ring", &ring},
      {"dlc_cal_chase", &chase}, {"dlc_cal_empty", &empty}};
  for (const auto &[name, f] : functions)
    DLC_RETURN_IF_ERROR(b.function(name, *f));
  const double sms = c.sms;
  // Each throughput kernel runs one wave of 256-thread blocks (up to 4 per SM).
  const unsigned threads = 256;
  const unsigned copyBlocks = static_cast<unsigned>(8 * c.sms);
  double ms = 0;
  double tickHz = 0; // clock64's rate

  say("FFMA throughput and the SM clock");
  {
    // One block of 32 warps per SM: block 0's span is then the SM's.
    const unsigned blocks = static_cast<unsigned>(c.sms), wide = 1024;
    float seed = 1.0f;
    int iters = 1 << 14;
    void *p[] = {&b.out_, &seed, &iters};
    // The clock of the fastest of 5 runs, from that run's own cycles.
    double best = INFINITY;
    for (int r = 0; r < 5; ++r) {
      double t = 0;
      DLC_RETURN_IF_ERROR(b.time([&] { return b.launch(ffma, blocks, wide, p); }, 1, t));
      uint64_t cycles = 0;
      DLC_RETURN_IF_ERROR(b.result(cycles));
      if (t < best) {
        best = t;
        tickHz = static_cast<double>(cycles) / (t * 1e-3);
      }
    }
    if (!(tickHz > 0))
      return Status(StatusCode::Unavailable, "calibrate: the SM clock measured 0 cycles");
    // The device's clock attribute is the clock; clock64's measured rate only converts
    // the latencies below (it agrees within 10% on an H100, where the clock once read
    // 0.83 GHz for 1.98: thread 0's own warp, favoured by its scheduler, finished
    // early, and FFMA came to 8.9 per "cycle" per SM of 4 issue slots; block 0's span
    // over 32 warps, one block per SM, now spans the kernel).
    c.clockHz = b.clockKhz_ > 0 ? b.clockKhz_ * 1e3 : tickHz;
    if (std::abs(c.clockHz / tickHz - 1) > 0.1)
      say("clock64 counts at " + std::to_string(std::lround(tickHz / 1e6)) +
          " MHz, the SM clock is " + std::to_string(std::lround(c.clockHz / 1e6)) +
          " MHz (the device's attribute): latencies are converted to SM cycles");
    double warps = blocks * (wide / 32.0);
    c.ffmaPerClock = warps * iters * 64.0 / (best * 1e-3 * c.clockHz * sms);
  }
  // One wave of `f` (iters iterations of `perIteration` warp instructions per warp),
  // the least of 5 runs: warp instructions per clock per SM.
  auto rate = [&](CUfunction f, void *seed, int iters, double perIteration, double &out) {
    unsigned blocks = 0;
    DLC_RETURN_IF_ERROR(b.wave(f, c.sms, threads, blocks));
    void *p[] = {&b.out_, seed, &iters};
    DLC_RETURN_IF_ERROR(b.time([&] { return b.launch(f, blocks, threads, p); }, 5, ms));
    out = blocks * (threads / 32.0) * iters * perIteration / (ms * 1e-3 * c.clockHz * sms);
    return Status::ok();
  };
  say("HFMA2 throughput");
  float halfSeed = 1.0f;
  DLC_RETURN_IF_ERROR(rate(hfma2, &halfSeed, 1 << 14, 64, c.hfma2PerClock));
  say("mma.sync m16n8k16 throughput");
  unsigned mmaSeed = 7;
  DLC_RETURN_IF_ERROR(rate(mma, &mmaSeed, 1 << 13, 8, c.hmmaPerClock));
  say("DRAM bandwidth (a 2 x 256 MiB copy)");
  {
    uint64_t n = (256ull << 20) / 16;
    CUdeviceptr src = 0, dst = 0;
    DLC_RETURN_IF_ERROR(b.alloc(n * 16, src));
    DLC_RETURN_IF_ERROR(b.alloc(n * 16, dst));
    void *p[] = {&b.out_, &src, &dst, &n};
    DLC_RETURN_IF_ERROR(b.time([&] { return b.launch(copy, copyBlocks, threads, p); }, 5, ms));
    c.dramBytesPerSecond = 2.0 * static_cast<double>(n) * 16 / (ms * 1e-3);
  }
  say("L2 bandwidth and L2-hit latency");
  {
    uint64_t n = static_cast<uint64_t>(b.l2Bytes_) / 4 / 16;
    int reps = 64;
    CUdeviceptr buf = 0;
    DLC_RETURN_IF_ERROR(b.alloc(n * 16, buf));
    void *p[] = {&b.out_, &buf, &n, &reps};
    DLC_RETURN_IF_ERROR(b.time([&] { return b.launch(l2, copyBlocks, threads, p); }, 3, ms));
    c.l2BytesPerSecond = static_cast<double>(n) * 16 * reps / (ms * 1e-3);
    // A ring of 128-byte steps over the same buffer: warm, then timed L2 hits.
    unsigned entries = static_cast<unsigned>(n * 4), stride = 32;
    int steps = 4096;
    void *r[] = {&b.out_, &buf, &entries, &stride};
    DLC_RETURN_IF_ERROR(b.launch(ring, copyBlocks, threads, r));
    void *q[] = {&b.out_, &buf, &steps};
    DLC_RETURN_IF_ERROR(b.launch(chase, 1, 1, q));
    uint64_t cycles = 0;
    DLC_RETURN_IF_ERROR(b.result(cycles));
    c.l2LatencyCycles = std::round(static_cast<double>(cycles) * c.clockHz / tickHz);
  }
  say("DRAM latency");
  {
    // 256 MiB with a stride of 4099 elements (16 KiB and a little): every step a new
    // line, far from the last, after a warm-up that touches 4096 others.
    unsigned entries = 64u << 20, stride = 4099;
    int steps = 4096;
    CUdeviceptr buf = 0;
    DLC_RETURN_IF_ERROR(b.alloc(static_cast<size_t>(entries) * 4, buf));
    void *r[] = {&b.out_, &buf, &entries, &stride};
    DLC_RETURN_IF_ERROR(b.launch(ring, copyBlocks, threads, r));
    void *q[] = {&b.out_, &buf, &steps};
    DLC_RETURN_IF_ERROR(b.launch(chase, 1, 1, q));
    uint64_t cycles = 0;
    DLC_RETURN_IF_ERROR(b.result(cycles));
    c.dramLatencyCycles = std::round(static_cast<double>(cycles) * c.clockHz / tickHz);
  }
  say("launch and CUDA-graph node overhead");
  {
    const int launches = 2000, nodes = 200, graphs = 10;
    void *p[] = {&b.out_};
    DLC_RETURN_IF_ERROR(b.time(
        [&] {
          for (int i = 0; i < launches; ++i)
            DLC_RETURN_IF_ERROR(b.launch(empty, 1, 32, p));
          return Status::ok();
        },
        3, ms));
    c.launchMicros = ms * 1e3 / launches;
    CUgraphExec exec = nullptr;
    DLC_RETURN_IF_ERROR(b.graphOf(empty, nodes, exec));
    Status timed = b.time(
        [&] {
          for (int i = 0; i < graphs; ++i)
            DLC_RETURN_IF_ERROR(b.check(d.cuGraphLaunch_(exec, b.stream_), "cuGraphLaunch"));
          return Status::ok();
        },
        3, ms);
    d.cuGraphExecDestroy_(exec);
    DLC_RETURN_IF_ERROR(timed);
    c.graphNodeMicros = ms * 1e3 / (graphs * nodes);
    // What a run costs the host beyond its kernels: a one-node graph launched and
    // waited for (the least of 50).
    DLC_RETURN_IF_ERROR(b.graphOf(empty, 1, exec));
    double best = INFINITY;
    Status waited = Status::ok();
    for (int i = 0; i < 50 && !waited; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      waited = b.check(d.cuGraphLaunch_(exec, b.stream_), "cuGraphLaunch");
      if (!waited)
        waited = b.check(d.cuStreamSynchronize_(b.stream_), "cuStreamSynchronize");
      best = std::min(
          best,
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    d.cuGraphExecDestroy_(exec);
    DLC_RETURN_IF_ERROR(waited);
    c.runOverheadMicros = best;
  }
  return c;
}

} // namespace cuda

Result<std::pair<int, int>> cudaComputeCapability(int ordinal) {
  cuda::Driver d;
  DLC_RETURN_IF_ERROR(d.load());
  auto fail = [&](CUresult r) {
    return Status(StatusCode::Unavailable,
                  "CUDA device " + std::to_string(ordinal) + ": " + d.error(r));
  };
  if (CUresult r = d.cuInit_(0))
    return fail(r);
  int count = 0;
  if (CUresult r = d.cuDeviceGetCount_(&count))
    return fail(r);
  if (ordinal < 0 || ordinal >= count)
    return Status(StatusCode::InvalidArgument, "no CUDA device " + std::to_string(ordinal) + " (" +
                                                   std::to_string(count) + " present)");
  CUdevice dev = 0;
  int major = 0, minor = 0;
  if (CUresult r = d.cuDeviceGet_(&dev, ordinal))
    return fail(r);
  if (CUresult r =
          d.cuDeviceGetAttribute_(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    return fail(r);
  if (CUresult r =
          d.cuDeviceGetAttribute_(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    return fail(r);
  return std::make_pair(major, minor);
}

Result<Calibration> calibrate(int device, const std::vector<uint8_t> &cubin,
                              const std::function<void(const std::string &)> &progress) {
  cuda::Driver d;
  DLC_RETURN_IF_ERROR(d.load());
  return cuda::calibrateWith(d, device, cubin, progress);
}

std::string calibrationProfileJson(const Calibration &c, const std::string &name) {
  auto esc = [](const std::string &s) {
    std::string o;
    for (char ch : s)
      if (ch == '"' || ch == '\\')
        o += std::string("\\") + ch;
      else if (static_cast<unsigned char>(ch) >= 0x20)
        o += ch;
    return o;
  };
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  std::string j = "{\n  \"name\": \"" + esc(name) + "\",\n  \"arch\": \"" + c.arch() +
                  "\",\n  \"source\": \"dlc calibrate on " + esc(c.device) + "\"";
  const std::pair<const char *, double> fields[] = {
      {"sms", c.sms},
      {"clock_hz", c.clockHz},
      // The FP32 peak this GPU reaches (its SKU's SMs and clock may differ from the
      // data sheet's).
      {"fp32_flops", c.ffmaPerClock * 64 * c.sms * c.clockHz},
      {"fp32_per_clock", c.ffmaPerClock},
      {"fp16x2_per_clock", c.hfma2PerClock},
      {"hmma_per_clock", c.hmmaPerClock},
      {"dram_measured_bytes_per_second", c.dramBytesPerSecond},
      {"l2_bytes_per_second", c.l2BytesPerSecond},
      {"l2_latency_cycles", c.l2LatencyCycles},
      {"dram_latency_cycles", c.dramLatencyCycles},
      {"launch_us", c.launchMicros},
      {"graph_node_us", c.graphNodeMicros},
      {"run_overhead_us", c.runOverheadMicros}};
  for (const auto &[key, value] : fields)
    j += std::string(",\n  \"") + key + "\": " + num(value);
  return j + "\n}\n";
}

std::string profileNameFor(const std::string &device) {
  for (const char *name : {"H200", "H100", "A100", "A10", "L4"})
    for (size_t at = device.find(name); at != std::string::npos; at = device.find(name, at + 1)) {
      size_t end = at + std::strlen(name);
      // A whole word: "A10" is not "A100" or "A10G", "L4" is not "L40S".
      bool startOk = at == 0 || !std::isalnum(static_cast<unsigned char>(device[at - 1]));
      bool endOk = end == device.size() || !std::isalnum(static_cast<unsigned char>(device[end]));
      if (startOk && endOk)
        return name;
    }
  return "";
}

} // namespace dlc::rt

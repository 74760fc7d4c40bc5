// The cuda backend against a fake driver and a fake cuBLASLt (runtime/cuda/Driver.h):
// device memory is host memory, a stream is a queue of copies that runs at
// synchronization, and kernels are recorded, not run. What a GPU adds (numerics) is
// covered by the `gpu` tests; these check the backend's own behaviour:
//  - the primary context is pushed for every call and the caller's restored, so a
//    session made on one thread runs on another;
//  - a driver older than the package's CUDA is refused with a clear message, and a
//    GPU without a module gets a target that dlc can compile;
//  - set_input is synchronous, and the weights are complete before any kernel runs;
//  - GEMM plans are built once per step, with the epilogue kernel as the fallback;
//  - the schedule is captured as a CUDA graph once and replayed, recaptured after a
//    device pointer is bound, and run step by step (with a note) where capture fails;
//  - bound device pointers must be aligned to their elements;
//  - data parallelism: a bucket is packed on the main stream and averaged on a second
//    one that waits for the pack, and the optimizer waits for the average.
#include "CudaMockTestUtil.h"

#include <algorithm>

using namespace cudamock;

namespace {

TEST_F(CudaMock, APersistentRecurrentKernelIsACooperativeLaunch) {
  // A small LSTM runs as one persistent kernel with a grid barrier: a cooperative
  // launch, whose argument struct must travel as kernelParams (the driver refuses
  // `extra` there; the first GPU run of the kit failed so).
  auto pkg = compileForSm90(R"(graph @lstm(%x: f32[3,2,4]) -> ("y": f32[3,1,2,8]) {
  %w = const f32[1,32,4] dense<[-0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20]>
  %r = const f32[1,32,8] dense<[-0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15]>
  %y, %h, %c = LSTM(%x, %w, %r) {hidden_size = 8} : f32[3,1,2,8], f32[1,2,8], f32[1,2,8]
  return %y
})",
                            "lstm");
  ASSERT_TRUE(pkg);
  bool persistent = false;
  for (const pkg::Kernel *k : *pkg->meta().kernels())
    persistent |= k->cooperative();
  ASSERT_TRUE(persistent) << "the test needs the persistent kernel";
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaGraphs = false;
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x(24, 0.5f);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
  Status st = (*s)->run();
  EXPECT_FALSE(bool(st)) << st.message();
  EXPECT_EQ(S.cooperativeLaunches, 1);
}

TEST_F(CudaMock, APersistentRecurrentKernelRunsOnlyWhereItsGridFits) {
  // 256 hidden units over a batch of 64: 4 units per block, 64 blocks of 80 KB of
  // shared memory, one per multiprocessor. The package carries the persistent kernel
  // and the per-step schedule; a 40-SM GPU (an A30, a MIG slice) cannot hold the grid
  // and runs the steps (a GEMM and a cell launch per time step), a 132-SM one runs the
  // persistent kernel alone. The session says which.
  auto pkg = compileForSm90(
      R"(graph @lstm(%x: f32[2,64,4], %w: f32[1,1024,4], %r: f32[1,1024,256]) -> ("y": f32[2,1,64,256]) {
  %y, %h, %c = LSTM(%x, %w, %r) {hidden_size = 256} : f32[2,1,64,256], f32[1,64,256], f32[1,64,256]
  return %y
})",
      "lstm");
  ASSERT_TRUE(pkg);
  for (int sms : {40, 132}) {
    SCOPED_TRACE(std::to_string(sms) + " SMs");
    S.reset();
    S.sms = sms;
    S.blocksPerSm = 1;
    rt::SessionOptions so;
    so.device = rt::DeviceKind::Cuda;
    so.cudaGraphs = false;
    auto s = rt::Session::create(pkg, so);
    ASSERT_TRUE(s.ok()) << s.status().message();
    std::vector<float> x(2 * 64 * 4, 0.5f), w(1024 * 4, 0.1f), r(1024 * 256, 0.01f);
    ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
    ASSERT_FALSE(bool((*s)->setInputBytes("w", w.data(), w.size() * 4)));
    ASSERT_FALSE(bool((*s)->setInputBytes("r", r.data(), r.size() * 4)));
    Status st = (*s)->run();
    ASSERT_FALSE(bool(st)) << st.message();
    const bool fits = sms == 132;
    EXPECT_EQ(S.cooperativeLaunches, fits ? 1 : 0);
    const auto cells =
        std::count_if(S.launched.begin(), S.launched.end(), [](const std::string &k) {
          return k.find("lstm_cell") != std::string::npos;
        });
    EXPECT_EQ(cells, fits ? 0 : 2); // one per time step
    ASSERT_EQ((*s)->scheduleNotes().size(), 1u);
    const std::string &note = (*s)->scheduleNotes()[0];
    EXPECT_NE(note.find(fits ? "runs its persistent kernel" : "runs step by step"),
              std::string::npos)
        << note;
    EXPECT_NE(note.find("64 blocks; the GPU holds 1 per multiprocessor x " + std::to_string(sms)),
              std::string::npos)
        << note;
  }
}

TEST_F(CudaMock, TheCallersContextIsRestoredAndAnyThreadMayRun) {
  ctxStack.push_back(kUserCtx); // the application's own context is current
  auto s = session();
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(ctxStack, std::vector<CUcontext>{kUserCtx});
  Status st;
  std::thread other([&] { // a thread on which no context was ever made current
    st = runWith(**s, 1.0f);
    EXPECT_TRUE(ctxStack.empty());
  });
  other.join();
  EXPECT_FALSE(bool(st)) << st.message();
  EXPECT_EQ(S.callsWithoutContext, 0);
  EXPECT_EQ(ctxStack, std::vector<CUcontext>{kUserCtx});
  s->reset();
  EXPECT_EQ(ctxStack, std::vector<CUcontext>{kUserCtx});
}

TEST_F(CudaMock, ADriverOlderThanThePackagesCudaIsRefused) {
  S.driverVersion = 12040;
  auto s = session();
  ASSERT_FALSE(s.ok());
  const std::string &m = s.status().message();
  EXPECT_NE(m.find("built with CUDA 13.0"), std::string::npos) << m;
  EXPECT_NE(m.find("supports CUDA 12.4"), std::string::npos) << m;
  EXPECT_NE(m.find("Update the driver"), std::string::npos) << m;
  EXPECT_EQ(count("cuModuleLoadData"), 0u); // refused before any opaque load failure
}

TEST_F(CudaMock, AGpuWithoutAModuleGetsATargetDlcCompiles) {
  S.major = 12; // sm_120: no cubin; the package has none of its PTX either
  auto s = session();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--target compute_80"), std::string::npos)
      << s.status().message();
  S.major = 7, S.minor = 5;
  auto t = session();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("older than dlc supports"), std::string::npos)
      << t.status().message();
}

TEST_F(CudaMock, SetInputIsSynchronousAndWeightsAreCompleteBeforeKernels) {
  rt::SessionOptions so;
  so.cudaGraphs = false;
  auto s = session(so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x(8, 3.0f);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
  EXPECT_TRUE(S.pending.empty()); // the copy finished before set_input returned
  ASSERT_FALSE(bool((*s)->run()));
  auto lastWeight = std::find(S.calls.rbegin(), S.calls.rend(), "cuMemcpyHtoD");
  ASSERT_NE(lastWeight, S.calls.rend());
  auto sync = std::find(lastWeight.base(), S.calls.end(), "cuCtxSynchronize");
  auto firstWork = std::find_if(S.calls.begin(), S.calls.end(), [](const std::string &c) {
    return c == "cuLaunchKernelEx" || c == "cublasLtMatmul" || c == "cuMemcpyHtoDAsync";
  });
  ASSERT_NE(sync, S.calls.end());
  EXPECT_LT(sync - S.calls.begin(), firstWork - S.calls.begin());
}

TEST_F(CudaMock, GemmPlansAreBuiltOnceAndFallBackToTheEpilogueKernel) {
  S.rejectEpilogue = true; // no algorithm applies bias + ReLU
  rt::SessionOptions so;
  so.cudaGraphs = false;
  auto s = session(so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(runWith(**s, 1.0f + i)));
  EXPECT_EQ(S.matmuls, 3);
  EXPECT_EQ(S.heuristicCalls, 2); // with the epilogue (refused), then without: once
  size_t epilogues = std::count_if(S.launched.begin(), S.launched.end(), [](const std::string &k) {
    return k.find("gemm_epilogue") != std::string::npos;
  });
  EXPECT_EQ(epilogues, 3u);
  // The arena is 256-byte aligned and so are its buffers: cuBLASLt may assume it.
  EXPECT_EQ(S.alignments[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], 256u);
  EXPECT_EQ(S.alignments[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES], 256u);

  S.reset();
  auto t = session(so); // an algorithm with the epilogue: no extra kernel
  ASSERT_TRUE(t.ok());
  ASSERT_FALSE(bool(runWith(**t, 1.0f)));
  EXPECT_EQ(S.heuristicCalls, 1);
  for (const std::string &k : S.launched)
    EXPECT_EQ(k.find("gemm_epilogue"), std::string::npos) << k;
}

TEST_F(CudaMock, TheScheduleIsCapturedOnceThenReplayed) {
  auto s = session();
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(runWith(**s, 1.0f)));
  EXPECT_EQ(S.captures, 1);
  EXPECT_EQ(S.graphLaunches, 3);
  EXPECT_EQ(count("cuLaunchKernelEx"), 1u); // softmax, issued once, during capture
  EXPECT_EQ(S.matmuls, 1);
  EXPECT_EQ((*s)->backendNote(), "");
  // A bound device pointer changes the addresses baked into the graph.
  std::vector<float> deviceInput(8, 0.0f);
  ASSERT_FALSE(bool((*s)->bindDevice("x", false, reinterpret_cast<uint64_t>(deviceInput.data()))));
  ASSERT_FALSE(bool((*s)->run()));
  EXPECT_EQ(S.captures, 2);
  EXPECT_EQ(S.graphLaunches, 4);
}

TEST_F(CudaMock, AShapeRangePackageCapturesAGraphPerShapeOnFirstUse) {
  auto textAt = [](int64_t n) {
    std::string N = std::to_string(n);
    return "graph @r(%x: f32[" + N + ",4]) -> (\"y\": f32[" + N +
           ",4]) {\n  %y = Softmax(%x) {axis = 1} : f32[" + N + ",4]\n  return %y\n}\n";
  };
  std::vector<uint8_t> bytes = test::compileShapeRangeIR(textAt, "x", 0, 1, 12, {"sm_90"});
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "range.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto runAt = [&](int64_t n) {
    rt::HostTensor t = rt::HostTensor::zeros(pkg::DType::F32, {n, 4});
    DLC_RETURN_IF_ERROR((*s)->setInput("x", t));
    return (*s)->run();
  };
  for (int64_t n : {2, 3, 2, 3, 2})
    ASSERT_FALSE(bool(runAt(n)));
  EXPECT_EQ(S.captures, 2); // one per shape, replayed after
  EXPECT_EQ(S.graphLaunches, 5);
  // The cache keeps the 8 most recently used shapes: 10 shapes evict 2 and 3.
  for (int64_t n = 3; n <= 12; ++n)
    ASSERT_FALSE(bool(runAt(n)));
  EXPECT_EQ(S.captures, 2 + 9);
  ASSERT_FALSE(bool(runAt(12))); // still cached
  EXPECT_EQ(S.captures, 11);
  ASSERT_FALSE(bool(runAt(2))); // evicted: captured again
  EXPECT_EQ(S.captures, 12);
  EXPECT_EQ(S.graphLaunches, 5 + 10 + 2);
}

TEST_F(CudaMock, AFailedCaptureRunsStepByStepWithANote) {
  S.endCaptureResult = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto s = session();
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_FALSE(bool(runWith(**s, 1.0f)));
  ASSERT_FALSE(bool(runWith(**s, 2.0f)));
  EXPECT_EQ(S.captures, 1); // not tried again
  EXPECT_EQ(S.graphLaunches, 0);
  EXPECT_EQ(S.matmuls, 3); // once captured (discarded), then once per run
  EXPECT_NE((*s)->backendNote().find("CUDA graph capture failed"), std::string::npos)
      << (*s)->backendNote();
}

// A schedule with steps on one side of an If reads the condition back (a stream-
// ordered copy and a synchronize) and is issued step by step, never captured.
TEST_F(CudaMock, ARunTimeIfReadsItsConditionAndRunsOneSide) {
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  auto s = rt::Session::create(ifPackage(), so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x(8, 1.0f);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
  for (bool c : {true, false, true}) {
    uint8_t cv = c;
    ASSERT_FALSE(bool((*s)->setInputBytes("c", &cv, 1)));
    size_t launches = count("cuLaunchKernelEx"), reads = count("cuMemcpyDtoHAsync");
    int matmuls = S.matmuls;
    ASSERT_FALSE(bool((*s)->run()));
    EXPECT_EQ(S.matmuls - matmuls, c ? 1 : 0) << "c=" << c;
    // The Where kernel, plus the softmax on the false side (cuBLASLt applies the ReLU).
    EXPECT_EQ(count("cuLaunchKernelEx") - launches, c ? 1u : 2u) << "c=" << c;
    EXPECT_GE(count("cuMemcpyDtoHAsync") - reads,
              1u); // the condition (and the check words, if any)
  }
  EXPECT_EQ(S.captures, 0);
  EXPECT_EQ(S.graphLaunches, 0);
}

TEST_F(CudaMock, BoundPointersMustBeAlignedToTheirElements) {
  auto s = session();
  ASSERT_TRUE(s.ok());
  Status st = (*s)->bindDevice("x", false, 0x10002);
  ASSERT_TRUE(bool(st));
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("not aligned to its 4-byte elements"), std::string::npos)
      << st.message();
  EXPECT_FALSE(bool((*s)->bindDevice("probs", true, 0x10004))); // 4-byte aligned is enough
}

/// A device communicator of two ranks that records what it is asked (NCCL's place).
class FakeDeviceComm : public rt::Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int localRank() const override { return 0; }
  std::string describe() const override { return "fake device communicator"; }
  Status allReduce(void *, size_t, pkg::DType, rt::ReduceOp) override { return unsupported(); }
  Status broadcast(void *, size_t, int) override { return unsupported(); }
  Status barrier() override { return unsupported(); }
  Status reduceScatter(const void *, void *, size_t, pkg::DType, rt::ReduceOp) override {
    return unsupported();
  }
  Status allGather(const void *, void *, size_t) override { return unsupported(); }
  bool onDevice() const override { return true; }
  Status reduceScatterDevice(uint64_t, uint64_t, size_t count, pkg::DType, rt::ReduceOp op,
                             void *stream) override {
    log("reduceScatterDevice", true);
    EXPECT_EQ(op, rt::ReduceOp::Avg);
    S.reduceStreams.push_back(static_cast<CUstream>(stream));
    S.reduceCounts.push_back(count);
    return Status::ok();
  }
  Status allGatherDevice(uint64_t, uint64_t, size_t bytes, void *stream) override {
    log("allGatherDevice", true);
    S.reduceStreams.push_back(static_cast<CUstream>(stream));
    S.reduceCounts.push_back(bytes);
    return Status::ok();
  }
  Status allReduceDevice(uint64_t, size_t count, pkg::DType dt, rt::ReduceOp op,
                         void *stream) override {
    log("allReduceDevice", true);
    EXPECT_EQ(dt, pkg::DType::F32);
    EXPECT_EQ(op, rt::ReduceOp::Avg);
    S.reduceStreams.push_back(static_cast<CUstream>(stream));
    S.reduceCounts.push_back(count);
    return Status::ok();
  }
  Status broadcastDevice(uint64_t, size_t, int root, void *) override {
    log("broadcastDevice", true);
    EXPECT_EQ(root, 0);
    return Status::ok();
  }
  double timeoutSeconds() const override { return 5; }
  [[noreturn]] void abort(int) override { std::abort(); }

private:
  static Status unsupported() {
    return Status(StatusCode::Unavailable, "host collectives: not in this test");
  }
};

TEST_F(CudaMock, ADataParallelStepAveragesEachBucketOnASecondStream) {
  // Two gradients in one bucket, read by the optimizer's update.
  std::ifstream in(std::string(DLC_SOURCE_DIR) + "/tests/lit/tools/Inputs/data_parallel.ir");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  auto pkg = compileForSm90(text.c_str(), "dp");
  ASSERT_EQ(pkg->meta().bucket_bytes(), 1024u);
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.rank = {0, 2, 0};
  so.communicator = std::make_shared<FakeDeviceComm>();
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_FALSE(bool((*s)->broadcastVariables(0)));
  EXPECT_EQ(count("broadcastDevice"), 2u); // w and v
  std::vector<float> x{1, 2, 3}, y{4, 5};
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), 12)));
  ASSERT_FALSE(bool((*s)->setInputBytes("y", y.data(), 8)));
  S.calls.clear();
  ASSERT_FALSE(bool((*s)->run()));
  // Step by step (NCCL's calls are not captured), one all-reduce of the bucket: each
  // gradient at an arena-aligned offset, so 2 x 256 bytes of f32.
  EXPECT_EQ(S.captures, 0);
  ASSERT_EQ(S.reduceCounts, std::vector<size_t>{128});
  // On the second stream (the session's is the first one created).
  EXPECT_EQ(S.reduceStreams, std::vector<CUstream>{reinterpret_cast<CUstream>(0x3010)});
  // Packed (two copies) before the "packed" event; the second stream waits for it,
  // reduces, records "averaged"; the main stream waits for that before the update.
  auto at = [&](const std::string &what, size_t from) {
    return static_cast<size_t>(
        std::find(S.calls.begin() + static_cast<std::ptrdiff_t>(from), S.calls.end(), what) -
        S.calls.begin());
  };
  size_t reduce = at("allReduceDevice", 0);
  ASSERT_LT(reduce, S.calls.size());
  ASSERT_GE(reduce, 4u);
  EXPECT_EQ(S.calls[reduce - 1], "cuStreamWaitEvent");
  EXPECT_EQ(S.calls[reduce - 2], "cuEventRecord");
  EXPECT_EQ(S.calls[reduce - 3], "cuMemcpyDtoDAsync");
  EXPECT_EQ(S.calls[reduce - 4], "cuMemcpyDtoDAsync");
  EXPECT_EQ(S.calls[reduce + 1], "cuEventRecord");
  size_t wait = at("cuStreamWaitEvent", reduce + 1);
  size_t update = at("cuLaunchKernelEx", reduce + 1);
  ASSERT_LT(update, S.calls.size());
  EXPECT_LT(wait, update) << "the optimizer's update must wait for the average";
}

TEST_F(CudaMock, ZeroShardsReduceScatterAndAllGatherOnTheSecondStream) {
  // ZeRO-1 over 2 ranks, by hand: this rank's share of the mean gradient and of the
  // parameters, its step, and every rank's new share gathered into the parameter.
  const char *text = R"(graph @zero(%x: f32[4]) -> ("loss": f32[]) {
  %w = param f32[4] dense<[1.0, 2.0, 3.0, 4.0]>
  %p = Mul(%x, %w) : f32[4]
  %loss = ReduceSum(%p) {keepdims = 0} : f32[]
  %gs = ReduceScatter(%x) {ranks = 2} : f32[2]
  %ps = RankShard(%w) {ranks = 2} : f32[2]
  %n = Sub(%ps, %gs) : f32[2]
  %all = AllGather(%n) {ranks = 2} : f32[4]
  update %w = %all
  return %loss
})";
  auto pkg = compileForSm90(text, "zero");
  ASSERT_EQ(pkg->meta().zero_ranks(), 2u);
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.communicator = std::make_shared<FakeDeviceComm>();
  so.rank = {1, 2, 1};
  {
    rt::SessionOptions one = so;
    one.rank = {0, 1, 0};
    auto s = rt::Session::create(pkg, one);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("run it on 2 ranks, not 1"), std::string::npos)
        << s.status().message();
  }
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x{1, 2, 3, 4};
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), 16)));
  S.calls.clear();
  ASSERT_FALSE(bool((*s)->run()));
  // A reduce-scatter of 2 floats per rank and an all-gather of 8 bytes per rank, both
  // on the second stream.
  EXPECT_EQ(S.reduceCounts, (std::vector<size_t>{2, 8}));
  EXPECT_EQ(S.reduceStreams, (std::vector<CUstream>(2, reinterpret_cast<CUstream>(0x3010))));
  auto at = [&](const std::string &what, size_t from) {
    return static_cast<size_t>(
        std::find(S.calls.begin() + static_cast<std::ptrdiff_t>(from), S.calls.end(), what) -
        S.calls.begin());
  };
  size_t scatter = at("reduceScatterDevice", 0), gather = at("allGatherDevice", 0);
  ASSERT_LT(scatter, gather);
  ASSERT_LT(gather, S.calls.size());
  // The step reads the gradient share only after waiting for it, and the update
  // copies the gathered parameters only after waiting for them.
  size_t waitScatter = at("cuStreamWaitEvent", scatter + 1);
  EXPECT_LT(waitScatter, at("cuLaunchKernelEx", scatter + 1));
  size_t waitGather = at("cuStreamWaitEvent", gather + 1);
  ASSERT_LT(waitGather, S.calls.size());
  EXPECT_EQ(at("cuLaunchKernelEx", gather + 1), S.calls.size())
      << "nothing computes after the gather";
}

// `dlc calibrate` against a fake GPU whose rates are known: each microbenchmark's
// launch advances the fake GPU's clock by its work (from the kernel's source: FFMA per
// thread and iteration, bytes copied, ...) at those rates, and calibrate must recover
// them from the event times and the cycles the kernels report.
} // namespace

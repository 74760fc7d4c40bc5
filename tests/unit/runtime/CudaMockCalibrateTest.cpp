// dlc calibrate's measurements (runtime/cuda/Calibrate.cpp) on a fake GPU whose rates
// are known: the fake driver of CudaMockTestUtil.h with timed events, a clock64 that
// counts at a chosen rate, and a module load that can fail.
#include "CudaMockTestUtil.h"

using namespace cudamock;

namespace {

namespace calib {

constexpr double kClock = 1.5e9, kSms = 100, kFfma = 4, kHfma2 = 2, kHmma = 1, kDram = 3e12,
                 kL2 = 6e12, kL2Lat = 250, kDramLat = 700, kLaunchUs = 3, kNodeUs = 1;
constexpr int kL2Bytes = 40 << 20;

double gpuSeconds = 0;
std::map<CUevent, double> recorded;
uint64_t lastRingBytes = 0;
int capturedNodes = 0, liveAllocations = 0, moduleLoads = 0;
bool failModule = false;
double tickRate = 1; // clock64's rate as a fraction of the SM clock

template <typename T> T param(void **p, int i) {
  return *static_cast<T *>(p[i]);
}

cuda::Driver fakeGpu() {
  cuda::Driver d = makeDriver();
  d.cuDeviceGetAttribute_ = [](int *v, CUdevice_attribute a, CUdevice) {
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
         : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
         : a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE            ? kL2Bytes
         : a == CU_DEVICE_ATTRIBUTE_CLOCK_RATE               ? static_cast<int>(kClock / 1e3)
                                                             : static_cast<int>(kSms);
    return CUDA_SUCCESS;
  };
  d.cuModuleLoadData_ = [](CUmodule *m, const void *) {
    ++moduleLoads;
    *m = reinterpret_cast<CUmodule>(0x4000);
    return failModule ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_SUCCESS;
  };
  // Large buffers are never touched by the fake: only their addresses exist.
  d.cuMemAlloc_ = [](CUdeviceptr *p, size_t n) {
    static uintptr_t fake = 0x7f0000000000;
    ++liveAllocations;
    *p = n <= 4096 ? reinterpret_cast<CUdeviceptr>(std::calloc(1, 4096))
                   : static_cast<CUdeviceptr>(fake += (n + 4095) / 4096 * 4096);
    return CUDA_SUCCESS;
  };
  d.cuMemFree_ = [](CUdeviceptr p) {
    --liveAllocations;
    if (p < 0x7f0000000000)
      std::free(reinterpret_cast<void *>(p));
    return CUDA_SUCCESS;
  };
  d.cuEventRecord_ = [](CUevent e, CUstream) {
    recorded[e] = gpuSeconds;
    return CUDA_SUCCESS;
  };
  d.cuEventSynchronize_ = [](CUevent) { return CUDA_SUCCESS; };
  d.cuEventElapsedTime_ = [](float *ms, CUevent a, CUevent b) {
    *ms = static_cast<float>((recorded[b] - recorded[a]) * 1e3);
    return CUDA_SUCCESS;
  };
  d.cuStreamBeginCapture_ = [](CUstream, CUstreamCaptureMode) {
    S.capturing = true;
    capturedNodes = 0;
    return CUDA_SUCCESS;
  };
  d.cuGraphLaunch_ = [](CUgraphExec, CUstream) {
    ++S.graphLaunches;
    gpuSeconds += capturedNodes * kNodeUs * 1e-6;
    return CUDA_SUCCESS;
  };
  d.cuLaunchKernelEx_ = [](const CUlaunchConfig *cfg, CUfunction f, void **p, void **) {
    std::string k = S.functions[f];
    S.launched.push_back(k);
    double warps = cfg->gridDimX * cfg->blockDimX / 32.0, t = 0;
    auto *out = reinterpret_cast<uint64_t *>(param<CUdeviceptr>(p, 0));
    if (k == "dlc_cal_ffma" || k == "dlc_cal_hfma2") {
      t = warps * param<int>(p, 2) * 64 / ((k == "dlc_cal_ffma" ? kFfma : kHfma2) * kClock * kSms);
      out[0] = static_cast<uint64_t>(t * kClock * tickRate + 0.5);
    } else if (k == "dlc_cal_mma") {
      t = warps * param<int>(p, 2) * 8 / (kHmma * kClock * kSms);
    } else if (k == "dlc_cal_copy") {
      t = 2.0 * param<uint64_t>(p, 3) * 16 / kDram;
    } else if (k == "dlc_cal_l2") {
      t = double(param<uint64_t>(p, 2)) * 16 * param<int>(p, 3) / kL2;
    } else if (k == "dlc_cal_ring") {
      lastRingBytes = uint64_t(param<unsigned>(p, 2)) * 4;
    } else if (k == "dlc_cal_chase") {
      out[0] = static_cast<uint64_t>((lastRingBytes <= uint64_t(kL2Bytes) ? kL2Lat : kDramLat) *
                                     tickRate);
    } else if (k == "dlc_cal_empty") {
      if (S.capturing)
        ++capturedNodes;
      else
        t = kLaunchUs * 1e-6;
    }
    gpuSeconds += t;
    return CUDA_SUCCESS;
  };
  return d;
}

} // namespace calib

TEST_F(CudaMock, CalibrateRecoversTheRatesOfAFakeGpu) {
  cuda::Driver d = calib::fakeGpu();
  std::vector<std::string> steps;
  auto c = cuda::calibrateWith(d, 0, std::vector<uint8_t>(16, 1),
                               [&](const std::string &s) { steps.push_back(s); });
  ASSERT_TRUE(c.ok()) << c.status().message() << " after " << steps.back();
  EXPECT_EQ(c->device, "Fake GPU");
  EXPECT_EQ(c->arch(), "sm_90");
  EXPECT_EQ(c->sms, 100);
  // Event times are float milliseconds: 1e-6 relative.
  auto near = [](double got, double want) { return std::abs(got / want - 1) < 1e-5; };
  EXPECT_PRED2(near, c->clockHz, calib::kClock);
  EXPECT_PRED2(near, c->ffmaPerClock, calib::kFfma);
  EXPECT_PRED2(near, c->hfma2PerClock, calib::kHfma2);
  EXPECT_PRED2(near, c->hmmaPerClock, calib::kHmma);
  EXPECT_PRED2(near, c->dramBytesPerSecond, calib::kDram);
  EXPECT_PRED2(near, c->l2BytesPerSecond, calib::kL2);
  EXPECT_EQ(c->l2LatencyCycles, calib::kL2Lat);
  EXPECT_EQ(c->dramLatencyCycles, calib::kDramLat);
  EXPECT_PRED2(near, c->launchMicros, calib::kLaunchUs);
  EXPECT_PRED2(near, c->graphNodeMicros, calib::kNodeUs);
  EXPECT_GT(c->runOverheadMicros, 0); // host time: whatever the fake takes
  EXPECT_LT(c->runOverheadMicros, 1e6);
  EXPECT_EQ(steps.size(), 7u);
  // Everything it took is given back: context, memory.
  EXPECT_TRUE(ctxStack.empty());
  EXPECT_EQ(calib::liveAllocations, 0);
  EXPECT_EQ(calib::moduleLoads, 1);
  // The profile names the measured fields as the loader reads them.
  std::string json = rt::calibrationProfileJson(*c, "H100");
  for (const char *field : {"\"name\": \"H100\"", "\"arch\": \"sm_90\"", "\"hmma_per_clock\": 1",
                            "\"dram_measured_bytes_per_second\": 3e+12", "\"graph_node_us\": 1"})
    EXPECT_NE(json.find(field), std::string::npos) << field << "\n" << json;
}

// A clock64 that advances at 0.42 of the SM clock (what one warp's span read on an H100). The clock
// is the device's attribute, the per-clock rates follow from it, and the latencies are SM cycles.
TEST_F(CudaMock, CalibrateTakesTheSmClockWhereClock64CountsSlower) {
  cuda::Driver d = calib::fakeGpu();
  calib::tickRate = 0.42;
  std::vector<std::string> steps;
  auto c = cuda::calibrateWith(d, 0, std::vector<uint8_t>(16, 1),
                               [&](const std::string &s) { steps.push_back(s); });
  calib::tickRate = 1;
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto near = [](double got, double want) { return std::abs(got / want - 1) < 1e-5; };
  EXPECT_PRED2(near, c->clockHz, calib::kClock);
  EXPECT_PRED2(near, c->ffmaPerClock, calib::kFfma);
  EXPECT_PRED2(near, c->hmmaPerClock, calib::kHmma);
  EXPECT_EQ(c->l2LatencyCycles, calib::kL2Lat);
  EXPECT_EQ(c->dramLatencyCycles, calib::kDramLat);
  bool said = false;
  for (const std::string &s : steps)
    said |= s.find("clock64 counts at 63") != std::string::npos &&
            s.find("MHz, the SM clock is 1500 MHz") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Calibrate, ADeviceNameNamesAProfileAsAWholeWord) {
  EXPECT_EQ(rt::profileNameFor("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(rt::profileNameFor("NVIDIA H200"), "H200");
  EXPECT_EQ(rt::profileNameFor("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(rt::profileNameFor("NVIDIA A10"), "A10");
  EXPECT_EQ(rt::profileNameFor("NVIDIA A10G"), "");
  EXPECT_EQ(rt::profileNameFor("NVIDIA L4"), "L4");
  EXPECT_EQ(rt::profileNameFor("NVIDIA L40S"), "");
  EXPECT_EQ(rt::profileNameFor("Tesla V100"), "");
}

TEST_F(CudaMock, CalibrateWithAModuleForAnotherGpuFailsCleanly) {
  cuda::Driver d = calib::fakeGpu();
  calib::failModule = true;
  calib::liveAllocations = 0;
  auto c = cuda::calibrateWith(d, 0, std::vector<uint8_t>(16, 1), {});
  calib::failModule = false;
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("compiled for another GPU?"), std::string::npos)
      << c.status().message();
  EXPECT_TRUE(ctxStack.empty());
  EXPECT_EQ(calib::liveAllocations, 0);
  auto none = cuda::calibrateWith(d, 3, std::vector<uint8_t>(16, 1), {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no CUDA device 3 (1 present)"), std::string::npos);
}

} // namespace

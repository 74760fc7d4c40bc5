// The C API (include/dlc/runtime.h) and its C++ wrapper: normal use, concurrent
// sessions sharing one model, and misuse (null handles, wrong names, sizes, dtypes,
// shapes, run before inputs are set, cuda-only calls on emu), which must return an
// error with a message and never crash.
#include "RuntimeTestUtil.h"
#include "dlc/runtime.h"
#include "dlc/runtime.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <thread>

namespace {

// y = relu(x * w + b) with x f32[2,3]; also an i64 input to check dtypes.
const char *kModel = R"(graph @capi(%x: f32[2,3], %k: i64[2]) -> ("y": f32[2,3], "kk": i64[2]) {
  %w = const f32[3] dense<[1.0, -2.0, 0.5]>
  %b = const f32[3] dense<[0.5, 0.25, -1.0]>
  %m = Mul(%x, %w) : f32[2,3]
  %s = Add(%m, %b) : f32[2,3]
  %y = Relu(%s) : f32[2,3]
  %kk = Add(%k, %k) : i64[2]
  return %y, %kk
}
)";

std::vector<float> reference(const std::vector<float> &x) {
  const float w[3] = {1.0f, -2.0f, 0.5f}, b[3] = {0.5f, 0.25f, -1.0f};
  std::vector<float> y(6);
  for (int i = 0; i < 6; ++i)
    y[i] = std::max(0.0f, x[i] * w[i % 3] + b[i % 3]);
  return y;
}

const std::vector<uint8_t> &package() {
  static const std::vector<uint8_t> bytes = dlc::test::compileIRForEmu(kModel, "capi.ir");
  return bytes;
}

struct Handles {
  dlc_model *model = nullptr;
  dlc_session *session = nullptr;
  Handles() {
    EXPECT_EQ(dlc_model_load_memory(package().data(), package().size(), &model), DLC_OK)
        << dlc_last_error();
    dlc_session_options o;
    std::memset(&o, 0, sizeof o);
    o.device = DLC_DEVICE_EMU;
    o.emu_threads = 1;
    EXPECT_EQ(dlc_session_create(model, &o, &session), DLC_OK) << dlc_last_error();
  }
  ~Handles() {
    dlc_session_free(session);
    dlc_model_free(model);
  }
};

const std::vector<float> kX = {1, 2, 3, -4, -0.5f, 6};
const int64_t kK[2] = {7, -9};

} // namespace

TEST(CApi, LoadsInspectsAndRuns) {
  Handles h;
  ASSERT_TRUE(h.session);
  EXPECT_EQ(dlc_runtime_api_version(), DLC_RUNTIME_API_VERSION);
  int ni = 0, no = 0;
  ASSERT_EQ(dlc_model_num_inputs(h.model, &ni), DLC_OK);
  ASSERT_EQ(dlc_model_num_outputs(h.model, &no), DLC_OK);
  EXPECT_EQ(ni, 2);
  EXPECT_EQ(no, 2);
  dlc_tensor_info info;
  ASSERT_EQ(dlc_model_input_info(h.model, 0, &info), DLC_OK);
  EXPECT_STREQ(info.name, "x");
  EXPECT_EQ(info.dtype, DLC_F32);
  ASSERT_EQ(info.rank, 2);
  EXPECT_EQ(info.shape[0], 2);
  EXPECT_EQ(info.shape[1], 3);
  EXPECT_EQ(info.bytes, 24u);
  EXPECT_EQ(std::string(dlc_session_device(h.session)).rfind("emu", 0), 0u);

  ASSERT_EQ(dlc_session_set_input(h.session, "x", kX.data(), 24), DLC_OK) << dlc_last_error();
  long kshape[1] = {2};
  ASSERT_EQ(dlc_session_set_input_tensor(h.session, "k", DLC_I64, kshape, 1, kK), DLC_OK)
      << dlc_last_error();
  ASSERT_EQ(dlc_session_run(h.session), DLC_OK) << dlc_last_error();
  std::vector<float> y(6);
  int64_t kk[2];
  ASSERT_EQ(dlc_session_get_output(h.session, "y", y.data(), 24), DLC_OK) << dlc_last_error();
  ASSERT_EQ(dlc_session_get_output(h.session, "kk", kk, 16), DLC_OK) << dlc_last_error();
  EXPECT_EQ(y, reference(kX));
  EXPECT_EQ(kk[0], 14);
  EXPECT_EQ(kk[1], -18);
  EXPECT_STREQ(dlc_last_error(), "");
}

TEST(CApi, NullHandlesAreErrors) {
  dlc_model *m = nullptr;
  dlc_session *s = nullptr;
  int n = 0;
  float buf[6];
  dlc_tensor_info info;
  EXPECT_EQ(dlc_model_load_file(nullptr, &m), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()), "");
  EXPECT_EQ(dlc_model_load_file("x.dlc", nullptr), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_load_memory(nullptr, 10, &m), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_load_static(nullptr, 10, &m), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_num_inputs(nullptr, &n), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_num_outputs(nullptr, &n), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_input_info(nullptr, 0, &info), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_output_info(nullptr, 0, &info), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_create(nullptr, nullptr, &s), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input(nullptr, "x", buf, 24), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input_tensor(nullptr, "x", DLC_F32, nullptr, 0, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_bind_device_input(nullptr, "x", 0), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_bind_device_output(nullptr, "y", 0), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_stream(nullptr, nullptr), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_run(nullptr), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_get_output(nullptr, "y", buf, 24), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(dlc_session_device(nullptr), "");
  dlc_model_free(nullptr);
  dlc_session_free(nullptr);

  Handles h;
  ASSERT_TRUE(h.session);
  EXPECT_EQ(dlc_session_create(h.model, nullptr, nullptr), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_num_inputs(h.model, nullptr), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_input_info(h.model, 0, nullptr), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_input_info(h.model, 2, &info), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_output_info(h.model, -1, &info), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input(h.session, nullptr, buf, 24), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input(h.session, "x", nullptr, 24), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_get_output(h.session, "y", nullptr, 24), DLC_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, WrongNamesSizesDtypesAndShapes) {
  Handles h;
  ASSERT_TRUE(h.session);
  float buf[8] = {0};
  long shape[2] = {2, 3}, bad[2] = {3, 2};
  EXPECT_EQ(dlc_session_set_input(h.session, "nope", buf, 24), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("nope"), std::string::npos) << dlc_last_error();
  EXPECT_EQ(dlc_session_set_input(h.session, "x", buf, 20), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("24"), std::string::npos) << dlc_last_error();
  EXPECT_EQ(dlc_session_set_input(h.session, "x", buf, 32), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", DLC_I64, shape, 2, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("i64"), std::string::npos) << dlc_last_error();
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", static_cast<dlc_dtype>(99), shape, 2, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", DLC_F32, bad, 2, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("[2,3]"), std::string::npos) << dlc_last_error();
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", DLC_F32, shape, 1, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", DLC_F32, nullptr, 2, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", DLC_F32, shape, -1, buf),
            DLC_ERROR_INVALID_ARGUMENT);
  // Outputs: wrong name and size.
  ASSERT_EQ(dlc_session_set_input(h.session, "x", kX.data(), 24), DLC_OK);
  ASSERT_EQ(dlc_session_set_input(h.session, "k", kK, 16), DLC_OK);
  ASSERT_EQ(dlc_session_run(h.session), DLC_OK) << dlc_last_error();
  EXPECT_EQ(dlc_session_get_output(h.session, "x", buf, 24), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_get_output(h.session, "y", buf, 28), DLC_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, RunBeforeInputsAreSetIsAnError) {
  Handles h;
  ASSERT_TRUE(h.session);
  EXPECT_EQ(dlc_session_run(h.session), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("'x'"), std::string::npos) << dlc_last_error();
  ASSERT_EQ(dlc_session_set_input(h.session, "x", kX.data(), 24), DLC_OK);
  EXPECT_EQ(dlc_session_run(h.session), DLC_ERROR_INVALID_ARGUMENT); // k still missing
  EXPECT_NE(std::string(dlc_last_error()).find("'k'"), std::string::npos) << dlc_last_error();
}

// Reading outputs before any run gave zeros with DLC_OK; a huge rank read far past the
// caller's shape array while building the error; emu_threads had no bound.
TEST(CApi, OutputsBeforeARunHugeRanksAndThreadCounts) {
  Handles h;
  ASSERT_TRUE(h.session);
  float y[6];
  EXPECT_EQ(dlc_session_get_output(h.session, "y", y, sizeof y), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("has not run yet"), std::string::npos)
      << dlc_last_error();
  long shape[2] = {2, 3};
  EXPECT_EQ(dlc_session_set_input_tensor(h.session, "x", DLC_F32, shape, 1 << 30, kX.data()),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("a rank outside 0..64"), std::string::npos)
      << dlc_last_error();
  dlc_session_options o;
  std::memset(&o, 0, sizeof o);
  o.device = DLC_DEVICE_EMU;
  o.emu_threads = 100000;
  dlc_session *s = nullptr;
  EXPECT_EQ(dlc_session_create(h.model, &o, &s), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(dlc_last_error()).find("emu threads must be 0 (one per core) to 1024"),
            std::string::npos)
      << dlc_last_error();
}

TEST(CApi, CudaOnlyCallsAndDevicesOnEmu) {
  Handles h;
  ASSERT_TRUE(h.session);
  EXPECT_EQ(dlc_session_bind_device_input(h.session, "x", 0x1000), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("cuda"), std::string::npos) << dlc_last_error();
  EXPECT_EQ(dlc_session_set_stream(h.session, reinterpret_cast<void *>(0x10)),
            DLC_ERROR_INVALID_ARGUMENT);
  dlc_session_options o;
  std::memset(&o, 0, sizeof o);
  o.device = static_cast<dlc_device>(7);
  dlc_session *s = nullptr;
  EXPECT_EQ(dlc_session_create(h.model, &o, &s), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
}

TEST(CApi, CorruptedPackagesAndMissingFiles) {
  std::vector<uint8_t> bytes = package();
  bytes[bytes.size() / 2] ^= 0x5a;
  dlc_model *m = reinterpret_cast<dlc_model *>(0x1);
  EXPECT_EQ(dlc_model_load_memory(bytes.data(), bytes.size(), &m), DLC_ERROR_INVALID_PACKAGE);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(dlc_last_error()).find("corrupted"), std::string::npos) << dlc_last_error();
  EXPECT_EQ(dlc_model_load_memory(bytes.data(), 10, &m), DLC_ERROR_INVALID_PACKAGE);
  EXPECT_EQ(dlc_model_load_file("/nonexistent/model.dlc", &m), DLC_ERROR_IO);
  EXPECT_NE(std::string(dlc_last_error()).find("/nonexistent/model.dlc"), std::string::npos);
}

TEST(CApi, ConcurrentSessionsShareOneModel) {
  dlc_model *model = nullptr;
  ASSERT_EQ(dlc_model_load_memory(package().data(), package().size(), &model), DLC_OK);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      dlc_session_options o;
      std::memset(&o, 0, sizeof o);
      o.device = DLC_DEVICE_EMU;
      o.emu_threads = 1;
      dlc_session *s = nullptr;
      if (dlc_session_create(model, &o, &s) != DLC_OK) {
        failures[t] = 1000;
        return;
      }
      for (int i = 0; i < 25; ++i) {
        std::vector<float> x(6);
        for (int k = 0; k < 6; ++k)
          x[k] = static_cast<float>(t * 100 + i * 7 + k) * 0.25f - 10;
        std::vector<float> y(6);
        if (dlc_session_set_input(s, "x", x.data(), 24) || dlc_session_set_input(s, "k", kK, 16) ||
            dlc_session_run(s) || dlc_session_get_output(s, "y", y.data(), 24) || y != reference(x))
          ++failures[t];
      }
      dlc_session_free(s);
    });
  for (auto &th : threads)
    th.join();
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(failures[t], 0) << "thread " << t;
  dlc_model_free(model);
}

TEST(CApi, CppWrapperChecksTypesAndThrows) {
  dlc::Model model = dlc::Model::fromMemory(package().data(), package().size());
  ASSERT_EQ(model.inputs().size(), 2u);
  dlc::Session s(model, DLC_DEVICE_EMU);
  s.setInput("x", kX);
  s.setInput("k", dlc_dtype(DLC_I64), {2}, kK);
  s.run();
  EXPECT_EQ(s.output<float>("y"), reference(kX));
  EXPECT_EQ(s.output<int64_t>("kk"), (std::vector<int64_t>{14, -18}));
  EXPECT_THROW(s.setInput("x", std::vector<int64_t>(6)), dlc::Error);
  EXPECT_THROW(s.setInput("x", std::vector<float>(5)), dlc::Error);
  EXPECT_THROW(s.output<int64_t>("y"), dlc::Error);
  EXPECT_THROW(s.output<float>("missing"), dlc::Error);
  try {
    s.setInput("x", dlc_dtype(DLC_F32), {3, 2}, kX.data());
    ADD_FAILURE() << "no exception";
  } catch (const dlc::Error &e) {
    EXPECT_EQ(e.status(), DLC_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dlc::Model::load("/nonexistent.dlc"), dlc::Error);
}

// Two different models in one process, alive at the same time (each emu module is
// loaded from its own memory file).
TEST(CApi, TwoModelsInOneProcess) {
  std::vector<uint8_t> other =
      dlc::test::compileIRForEmu(R"(graph @other(%x: f32[2,3]) -> ("y": f32[2,3]) {
  %y = Neg(%x) : f32[2,3]
  return %y
}
)",
                                 "other.ir");
  ASSERT_FALSE(other.empty());
  dlc::Model a = dlc::Model::fromMemory(package().data(), package().size());
  dlc::Model b = dlc::Model::fromMemory(other.data(), other.size());
  dlc::Session sa(a, DLC_DEVICE_EMU), sb(b, DLC_DEVICE_EMU);
  sa.setInput("x", kX);
  sa.setInput("k", dlc_dtype(DLC_I64), {2}, kK);
  sb.setInput("x", kX);
  sa.run();
  sb.run();
  EXPECT_EQ(sa.output<float>("y"), reference(kX));
  std::vector<float> neg(kX.size());
  for (size_t i = 0; i < kX.size(); ++i)
    neg[i] = -kX[i];
  EXPECT_EQ(sb.output<float>("y"), neg);
}

// A package this user did not compile (here: checked against another key) is refused by
// dlc_session_create on emu; dlc_session_create_allowing_host_code is the consent.
TEST(CApi, HostCodeNeedsItsOwnCall) {
  const std::vector<uint8_t> &bytes = package(); // compiled and signed with this user's key
  std::string other = ::testing::TempDir() + "capi-other.key";
  {
    std::ofstream f(other, std::ios::binary);
    f << std::string(32, '\x5a');
  }
  ::chmod(other.c_str(), 0600);
  ASSERT_EQ(::setenv("DLC_HOST_KEY_FILE", other.c_str(), 1), 0);
  dlc_model *model = nullptr;
  ASSERT_EQ(dlc_model_load_memory(bytes.data(), bytes.size(), &model), DLC_OK);
  dlc_session_options o;
  std::memset(&o, 0, sizeof o);
  o.device = DLC_DEVICE_EMU;
  o.emu_threads = 1;
  dlc_session *s = nullptr;
  EXPECT_NE(dlc_session_create(model, &o, &s), DLC_OK);
  EXPECT_NE(std::string(dlc_last_error()).find("carries host code"), std::string::npos)
      << dlc_last_error();
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(dlc_session_create_allowing_host_code(model, &o, &s), DLC_OK) << dlc_last_error();
  dlc_session_free(s);
  dlc_model_free(model);
  ::unsetenv("DLC_HOST_KEY_FILE");
}

// dlc_session_create_with_tactics: a family the enum names, else one clear error and
// no session.
TEST(CApi, TacticsAreAnArgumentOfTheirOwnCall) {
  const std::vector<uint8_t> &bytes = package();
  dlc_model *model = nullptr;
  ASSERT_EQ(dlc_model_load_memory(bytes.data(), bytes.size(), &model), DLC_OK);
  dlc_session_options o;
  std::memset(&o, 0, sizeof o);
  o.device = DLC_DEVICE_EMU;
  o.emu_threads = 1;
  dlc_session *s = nullptr;
  EXPECT_EQ(dlc_session_create_with_tactics(model, &o, static_cast<dlc_tactics>(7), &s),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("unknown tactics family 7"), std::string::npos)
      << dlc_last_error();
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(dlc_session_create_with_tactics(model, &o, DLC_TACTICS_VENDOR, &s), DLC_OK)
      << dlc_last_error();
  ASSERT_NE(s, nullptr);
  dlc_session_free(s);
  dlc_model_free(model);
}

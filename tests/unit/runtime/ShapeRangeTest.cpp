// Shape-range packages (dlc compile --input-shape x=1..5,4): one package whose
// schedules cover every batch in the range over shared kernels and weights. The
// session picks the schedule from the shapes the inputs were set with; outputs follow;
// a shape outside the range is a clear error naming the input, dimension and range;
// the C API and its C++ wrapper take and report the actual shapes.
#include "RuntimeTestUtil.h"
#include "dlc/runtime.h"
#include "dlc/runtime.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

namespace {

using namespace dlc;

constexpr int64_t kMin = 1, kMax = 5;
const float kW[4][3] = {
    {1.0f, 0.5f, -1.0f}, {2.0f, 0.25f, 0.75f}, {-0.5f, 1.0f, 0.0f}, {0.125f, -2.0f, 3.0f}};
const float kB[3] = {0.1f, -0.2f, 0.3f};

/// probs = softmax(relu(x W + b)) with x f32[n,4].
std::string mlpAt(int64_t n) {
  std::string N = std::to_string(n);
  return "graph @mlp(%x: f32[" + N + ",4]) -> (\"probs\": f32[" + N + R"(,3]) {
  %w = const f32[4,3] dense<[1.0, 0.5, -1.0, 2.0, 0.25, 0.75, -0.5, 1.0, 0.0, 0.125, -2.0, 3.0]>
  %b = const f32[3] dense<[0.1, -0.2, 0.3]>
  %h = MatMul(%x, %w) : f32[)" +
         N + R"(,3]
  %hb = Add(%h, %b) : f32[)" +
         N + R"(,3]
  %a = Relu(%hb) : f32[)" +
         N + R"(,3]
  %p = Softmax(%a) {axis = 1} : f32[)" +
         N + R"(,3]
  return %p
})";
}

std::vector<float> reference(const std::vector<float> &x) {
  size_t n = x.size() / 4;
  std::vector<float> y(n * 3);
  for (size_t r = 0; r < n; ++r) {
    float a[3], sum = 0, mx = -INFINITY;
    for (int c = 0; c < 3; ++c) {
      a[c] = kB[c];
      for (int k = 0; k < 4; ++k)
        a[c] += x[r * 4 + k] * kW[k][c];
      a[c] = std::max(a[c], 0.0f);
      mx = std::max(mx, a[c]);
    }
    for (int c = 0; c < 3; ++c)
      sum += std::exp(a[c] - mx);
    for (int c = 0; c < 3; ++c)
      y[r * 3 + c] = std::exp(a[c] - mx) / sum;
  }
  return y;
}

std::vector<float> inputOf(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n) * 4);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(n)) * 2.0f;
  return x;
}

const std::vector<uint8_t> &rangePackage() {
  static const std::vector<uint8_t> bytes = test::compileShapeRangeIR(mlpAt, "x", 0, kMin, kMax);
  return bytes;
}

std::shared_ptr<const pkg::PackageFile> load() {
  auto pf = pkg::PackageFile::fromBytes(rangePackage().data(), rangePackage().size(), "range.dlc");
  EXPECT_TRUE(pf.ok()) << pf.status().message();
  return pf.ok() ? *pf : nullptr;
}

std::unique_ptr<rt::Session> emuSession() {
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  so.emuThreads = 1;
  auto s = rt::Session::create(load(), so);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(*s) : nullptr;
}

rt::HostTensor tensor(const std::vector<int64_t> &shape, const std::vector<float> &v) {
  rt::HostTensor t = rt::HostTensor::zeros(pkg::DType::F32, shape);
  std::memcpy(t.data.data(), v.data(), std::min(t.data.size(), v.size() * 4));
  return t;
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5f) << "element " << i;
}

} // namespace

TEST(ShapeRange, OnePackageHoldsASchedulePerShapeOverSharedKernels) {
  auto pf = load();
  ASSERT_TRUE(pf);
  const pkg::Package &m = pf->meta();
  ASSERT_TRUE(m.shape_ranges());
  ASSERT_EQ(m.shape_ranges()->size(), 1u);
  const pkg::ShapeRange *r = m.shape_ranges()->Get(0);
  EXPECT_EQ(r->input()->str(), "x");
  EXPECT_EQ(r->axis(), 0u);
  EXPECT_EQ(r->min(), kMin);
  EXPECT_EQ(r->max(), kMax);
  EXPECT_EQ(r->opt(), kMax);
  ASSERT_TRUE(m.variants());
  EXPECT_EQ(m.variants()->size(),
            static_cast<size_t>(kMax - kMin)); // the opt shape is the package's own
  EXPECT_EQ(m.inputs()->Get(0)->shape()->Get(0), kMax);
  // Kernels take their extents at run time: every batch uses the opt shape's kernels.
  std::vector<uint8_t> single = test::compileShapeRangeIR(mlpAt, "x", 0, kMax, kMax); // one shape
  auto one = pkg::PackageFile::fromBytes(single.data(), single.size(), "single.dlc");
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(m.kernels());
  EXPECT_EQ(m.kernels()->size(), (*one)->meta().kernels()->size());
  for (const pkg::ShapeVariant *v : *m.variants()) {
    EXPECT_LE(v->arena_bytes(), m.arena_bytes());
    int64_t n = v->inputs()->Get(0)->shape()->Get(0);
    EXPECT_TRUE(n >= kMin && n < kMax) << n;
    EXPECT_EQ(v->outputs()->Get(0)->shape()->Get(0), n);
  }
}

TEST(ShapeRange, TheSessionRunsEveryShapeOfTheRange) {
  auto s = emuSession();
  ASSERT_TRUE(s);
  // Up, down and back: each run picks its schedule from the shapes set.
  for (int64_t n : {1, 3, 5, 2, 4, 1, 5}) {
    std::vector<float> x = inputOf(n);
    ASSERT_FALSE(bool(s->setInput("x", tensor({n, 4}, x))));
    EXPECT_EQ(s->inputShape("x"), (std::vector<int64_t>{n, 4}));
    Status st = s->run();
    ASSERT_FALSE(bool(st)) << st.message();
    EXPECT_EQ(s->outputShape("probs"), (std::vector<int64_t>{n, 3}));
    auto y = s->getOutput("probs");
    ASSERT_TRUE(y.ok()) << y.status().message();
    ASSERT_EQ(y->shape, (std::vector<int64_t>{n, 3}));
    std::vector<float> got(y->data.size() / 4);
    std::memcpy(got.data(), y->data.data(), y->data.size());
    SCOPED_TRACE("batch " + std::to_string(n));
    expectNear(got, reference(x));
  }
}

TEST(ShapeRange, AShapeOutsideTheRangeIsAClearError) {
  auto s = emuSession();
  ASSERT_TRUE(s);
  Status st = s->setInput("x", tensor({6, 4}, inputOf(6)));
  ASSERT_TRUE(bool(st));
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("input 'x' dimension 0 is 6, outside the range 1..5"),
            std::string::npos)
      << st.message();
  st = s->setInput("x", tensor({0, 4}, {}));
  ASSERT_TRUE(bool(st));
  EXPECT_NE(st.message().find("outside the range 1..5"), std::string::npos) << st.message();
  st = s->setInput("x", tensor({2, 5}, inputOf(3)));
  ASSERT_TRUE(bool(st));
  EXPECT_NE(st.message().find("the model expects [1..5,4]"), std::string::npos) << st.message();
  st = s->setInput("x", tensor({8}, inputOf(2)));
  ASSERT_TRUE(bool(st));
  EXPECT_NE(st.message().find("the model expects [1..5,4]"), std::string::npos) << st.message();
  rt::HostTensor wrongType = tensor({2, 4}, inputOf(2));
  wrongType.dtype = pkg::DType::I32;
  st = s->setInput("x", wrongType);
  ASSERT_TRUE(bool(st));
  EXPECT_NE(st.message().find("dtype"), std::string::npos) << st.message();
  // Raw bytes take the input's last shape (at first the opt shape).
  std::vector<float> x3 = inputOf(3);
  st = s->setInputBytes("x", x3.data(), x3.size() * 4);
  ASSERT_TRUE(bool(st));
  EXPECT_NE(st.message().find("give the shape with the data"), std::string::npos) << st.message();
  ASSERT_FALSE(bool(s->setInput("x", tensor({3, 4}, x3))));
  std::vector<float> other = inputOf(4);
  ASSERT_FALSE(bool(s->setInputBytes("x", other.data(), x3.size() * 4))); // 3 rows, new data
  ASSERT_FALSE(bool(s->run()));
  auto y = s->getOutput("probs");
  ASSERT_TRUE(y.ok());
  std::vector<float> got(y->data.size() / 4);
  std::memcpy(got.data(), y->data.data(), y->data.size());
  expectNear(got, reference(std::vector<float>(other.begin(), other.begin() + 12)));
  // Each shape has its own buffers: a device pointer cannot stand for an input.
  st = s->bindDevice("x", false, 0x1000);
  ASSERT_TRUE(bool(st));
  EXPECT_NE(st.message().find("range of shapes"), std::string::npos) << st.message();
}

TEST(ShapeRange, TheCApiTakesAndReportsActualShapes) {
  dlc_model *model = nullptr;
  ASSERT_EQ(dlc_model_load_memory(rangePackage().data(), rangePackage().size(), &model), DLC_OK)
      << dlc_last_error();
  long lo[2] = {-1, -1}, hi[2] = {-1, -1};
  ASSERT_EQ(dlc_model_input_shape_range(model, 0, lo, hi), DLC_OK) << dlc_last_error();
  EXPECT_EQ(lo[0], kMin);
  EXPECT_EQ(lo[1], 4);
  EXPECT_EQ(hi[0], kMax);
  EXPECT_EQ(hi[1], 4);
  EXPECT_EQ(dlc_model_input_shape_range(model, 1, lo, hi), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_model_input_shape_range(model, 0, nullptr, hi), DLC_ERROR_INVALID_ARGUMENT);
  dlc_session_options o;
  std::memset(&o, 0, sizeof o);
  o.device = DLC_DEVICE_EMU;
  o.emu_threads = 1;
  dlc_session *s = nullptr;
  ASSERT_EQ(dlc_session_create(model, &o, &s), DLC_OK) << dlc_last_error();
  std::vector<float> x = inputOf(3);
  long shape[2] = {3, 4};
  ASSERT_EQ(dlc_session_set_input_tensor(s, "x", DLC_F32, shape, 2, x.data()), DLC_OK)
      << dlc_last_error();
  ASSERT_EQ(dlc_session_run(s), DLC_OK) << dlc_last_error();
  long out[2] = {0, 0};
  ASSERT_EQ(dlc_session_output_shape(s, "probs", out, 2), DLC_OK) << dlc_last_error();
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 3);
  std::vector<float> y(9);
  ASSERT_EQ(dlc_session_get_output(s, "probs", y.data(), y.size() * 4), DLC_OK) << dlc_last_error();
  expectNear(y, reference(x));
  EXPECT_EQ(dlc_session_output_shape(s, "probs", out, 3), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(dlc_session_output_shape(s, "nope", out, 2), DLC_ERROR_INVALID_ARGUMENT);
  long big[2] = {9, 4};
  std::vector<float> x9(36, 0.0f);
  EXPECT_EQ(dlc_session_set_input_tensor(s, "x", DLC_F32, big, 2, x9.data()),
            DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("outside the range 1..5"), std::string::npos)
      << dlc_last_error();
  long negative[2] = {-2, 4};
  EXPECT_EQ(dlc_session_set_input_tensor(s, "x", DLC_F32, negative, 2, x9.data()),
            DLC_ERROR_INVALID_ARGUMENT);
  dlc_session_free(s);
  dlc_model_free(model);

  // The C++ wrapper sizes outputs by the shape of the last run.
  dlc::Model cm = dlc::Model::fromMemory(rangePackage().data(), rangePackage().size());
  auto [min, max] = cm.inputShapeRange(0);
  EXPECT_EQ(min, (std::vector<long>{kMin, 4}));
  EXPECT_EQ(max, (std::vector<long>{kMax, 4}));
  dlc::Session cs(cm, DLC_DEVICE_EMU);
  std::vector<float> x2 = inputOf(2);
  cs.setInput("x", DLC_F32, {2, 4}, x2.data());
  cs.run();
  EXPECT_EQ(cs.outputShape("probs"), (std::vector<long>{2, 3}));
  expectNear(cs.output<float>("probs"), reference(x2));
}

// The training part of the C API and the C++ wrapper on a hand-written training
// step (plain SGD on loss = sum(x * w), so dloss/dw = x): steps change the
// variables, evaluate does not, variables can be read and written, and checkpoints
// restore them all or nothing. Expected values are worked out by hand.
#include "RuntimeTestUtil.h"
#include "dlc/runtime.h"
#include "dlc/runtime.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <gtest/gtest.h>
#include <unistd.h>

namespace {

const char *kStep = R"(graph @sgd(%x: f32[3]) -> ("loss": f32[]) {
  %w = param f32[3] dense<[1.0, 2.0, 3.0]>
  %lr = const f32[] dense<[0.5]>
  %p = Mul(%x, %w) : f32[3]
  %loss = ReduceSum(%p) {keepdims = 0} : f32[]
  %g = Mul(%x, %lr) : f32[3]
  %w1 = Sub(%w, %g) : f32[3]
  update %w = %w1
  return %loss
}
)";

const std::vector<uint8_t> &package() {
  static const std::vector<uint8_t> bytes = dlc::test::compileIRForEmu(kStep, "sgd.ir");
  return bytes;
}

// The same step with an evaluation schedule (ir::kEvalOutputPrefix) that computes
// something else from the same variable: the largest x * w instead of the sum.
const char *kStepWithEval =
    R"(graph @sgd_eval(%x: f32[3]) -> ("loss": f32[], "dlc.eval.loss": f32[]) {
  %w = param f32[3] dense<[1.0, 2.0, 3.0]>
  %lr = const f32[] dense<[0.5]>
  %p = Mul(%x, %w) : f32[3]
  %loss = ReduceSum(%p) {keepdims = 0} : f32[]
  %e = ReduceMax(%p) {keepdims = 0} : f32[]
  %g = Mul(%x, %lr) : f32[3]
  %w1 = Sub(%w, %g) : f32[3]
  update %w = %w1
  return %loss, %e
}
)";

std::string tempPath(const char *name) {
  return (testing::TempDir() + "/dlc_training_" + std::to_string(::getpid()) + "_" + name);
}

} // namespace

TEST(TrainingApi, StepsUpdateVariablesEvaluateDoesNot) {
  dlc_model *model = nullptr;
  ASSERT_EQ(dlc_model_load_memory(package().data(), package().size(), &model), DLC_OK)
      << dlc_last_error();
  int n = 0;
  ASSERT_EQ(dlc_model_num_variables(model, &n), DLC_OK);
  ASSERT_EQ(n, 1);
  dlc_tensor_info info;
  int trainable = -1;
  ASSERT_EQ(dlc_model_variable_info(model, 0, &info, &trainable), DLC_OK);
  EXPECT_STREQ(info.name, "w");
  EXPECT_EQ(info.bytes, 12u);
  EXPECT_EQ(trainable, 1);
  EXPECT_EQ(dlc_model_variable_info(model, 1, &info, nullptr), DLC_ERROR_INVALID_ARGUMENT);

  dlc_session_options o;
  std::memset(&o, 0, sizeof o);
  o.device = DLC_DEVICE_EMU;
  o.emu_threads = 1;
  dlc_session *s = nullptr;
  ASSERT_EQ(dlc_session_create(model, &o, &s), DLC_OK) << dlc_last_error();
  const float x[3] = {1, -1, 2};
  ASSERT_EQ(dlc_session_set_input(s, "x", x, sizeof x), DLC_OK);
  float loss = 0, w[3];
  // w = [1, 2, 3]: loss 1 - 2 + 6 = 5, then w -= 0.5 x -> [0.5, 2.5, 2].
  ASSERT_EQ(dlc_session_run(s), DLC_OK) << dlc_last_error();
  ASSERT_EQ(dlc_session_get_output(s, "loss", &loss, sizeof loss), DLC_OK);
  EXPECT_FLOAT_EQ(loss, 5.0f);
  ASSERT_EQ(dlc_session_get_variable(s, "w", w, sizeof w), DLC_OK);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 2.5f);
  EXPECT_FLOAT_EQ(w[2], 2.0f);
  // Evaluating: loss 0.5 - 2.5 + 4 = 2, w unchanged.
  ASSERT_EQ(dlc_session_evaluate(s), DLC_OK) << dlc_last_error();
  ASSERT_EQ(dlc_session_get_output(s, "loss", &loss, sizeof loss), DLC_OK);
  EXPECT_FLOAT_EQ(loss, 2.0f);
  ASSERT_EQ(dlc_session_get_variable(s, "w", w, sizeof w), DLC_OK);
  EXPECT_FLOAT_EQ(w[1], 2.5f);

  // Checkpoint, change, restore.
  std::string ck = tempPath("ck.npz");
  ASSERT_EQ(dlc_session_save_checkpoint(s, ck.c_str()), DLC_OK) << dlc_last_error();
  const float other[3] = {9, 9, 9};
  ASSERT_EQ(dlc_session_set_variable(s, "w", other, sizeof other), DLC_OK);
  ASSERT_EQ(dlc_session_run(s), DLC_OK);
  ASSERT_EQ(dlc_session_get_output(s, "loss", &loss, sizeof loss), DLC_OK);
  EXPECT_FLOAT_EQ(loss, 18.0f); // 9 - 9 + 18
  ASSERT_EQ(dlc_session_load_checkpoint(s, ck.c_str()), DLC_OK) << dlc_last_error();
  ASSERT_EQ(dlc_session_get_variable(s, "w", w, sizeof w), DLC_OK);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[2], 2.0f);
  // A new session starts from the package's values.
  ASSERT_EQ(dlc_session_reset_variables(s), DLC_OK);
  ASSERT_EQ(dlc_session_get_variable(s, "w", w, sizeof w), DLC_OK);
  EXPECT_FLOAT_EQ(w[2], 3.0f);

  // Misuse: unknown names, wrong sizes, a missing checkpoint.
  EXPECT_EQ(dlc_session_get_variable(s, "nope", w, sizeof w), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(dlc_last_error()).find("no variable 'nope'"), std::string::npos);
  EXPECT_EQ(dlc_session_set_variable(s, "w", other, 8), DLC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(dlc_session_load_checkpoint(s, (ck + ".missing").c_str()), DLC_OK);
  std::remove(ck.c_str());
  dlc_session_free(s);
  dlc_model_free(model);
}

TEST(TrainingApi, EvaluateRunsTheEvaluationSchedule) {
  std::vector<uint8_t> bytes = dlc::test::compileIRForEmu(kStepWithEval, "sgd_eval.ir");
  ASSERT_FALSE(bytes.empty());
  dlc::Model m = dlc::Model::fromMemory(bytes.data(), bytes.size());
  dlc::Session s(m, DLC_DEVICE_EMU);
  s.setInput<float>("x", {1, -1, 2});
  EXPECT_FLOAT_EQ(s.step(), 5.0f);     // sum of [1, -2, 6]; w = [0.5, 2.5, 2]
  EXPECT_FLOAT_EQ(s.evaluate(), 4.0f); // max of [0.5, -2.5, 4], w unchanged
  EXPECT_FLOAT_EQ(s.evaluate(), 4.0f);
  EXPECT_FLOAT_EQ(s.step(), 2.0f); // the step's loss again: 0.5 - 2.5 + 4
  EXPECT_EQ(s.variable<float>("w"), (std::vector<float>{0.0f, 3.0f, 1.0f}));
}

TEST(TrainingApi, CppWrapperStepsAndCheckpoints) {
  dlc::Model m = dlc::Model::fromMemory(package().data(), package().size());
  ASSERT_EQ(m.variables().size(), 1u);
  dlc::Session s(m, DLC_DEVICE_EMU);
  s.setInput<float>("x", {1, -1, 2});
  EXPECT_FLOAT_EQ(s.step(), 5.0f);
  EXPECT_FLOAT_EQ(s.step(), 2.0f); // w = [0.5, 2.5, 2]
  EXPECT_EQ(s.variable<float>("w"), (std::vector<float>{0.0f, 3.0f, 1.0f}));
  EXPECT_FLOAT_EQ(s.evaluate(), -1.0f); // 0 - 3 + 2
  s.setVariable<float>("w", {1, 1, 1});
  EXPECT_FLOAT_EQ(s.evaluate(), 2.0f);
  EXPECT_THROW(s.variable<int64_t>("w"), dlc::Error);
}

// Update lanes (ir::updateLanes) run as multi-tensor kernels that write the variables
// in place: 130 momentum-SGD lanes of many sizes (some spanning several blocks of a
// lane's chunk), one shared structure, so the package has one functor and as many
// launches as the lanes' parameters need (two), and no commit copies. Expected values
// are the update rule evaluated here in float.
TEST(TrainingApi, MultiTensorUpdatesWriteEveryLaneInPlace) {
  constexpr int kLanes = 130;
  std::vector<int> sizes;
  std::vector<std::vector<float>> w0;
  std::string ir = "graph @many(%s: f32[]) -> (\"loss\": f32[]) {\n"
                   "  %half = const f32[] dense<[0.5]>\n  %mom = const f32[] dense<[0.9]>\n";
  for (int k = 0; k < kLanes; ++k) {
    int n = k % 7 == 0 ? 2500 + k : 1 + (k * 13) % 200;
    sizes.push_back(n);
    std::string w, v;
    w0.emplace_back();
    for (int i = 0; i < n; ++i) {
      w0.back().push_back(static_cast<float>(k) + 0.001f * static_cast<float>(i));
      w += (i ? ", " : "") + std::to_string(w0.back().back());
      v += i ? ", 0.0" : "0.0";
    }
    std::string K = std::to_string(k), T = "f32[" + std::to_string(n) + "]";
    ir += "  %w" + K + " = param " + T + " dense<[" + w + "]>\n  %v" + K + " = state " + T +
          " dense<[" + v + "]>\n";
    ir += "  %vs" + K + " = Mul(%v" + K + ", %mom) : " + T + "\n  %g" + K + " = Mul(%w" + K +
          ", %s) : " + T + "\n";
    ir += "  %nv" + K + " = Add(%vs" + K + ", %g" + K + ") : " + T + "\n  %d" + K + " = Mul(%nv" +
          K + ", %half) : " + T + "\n  %nw" + K + " = Sub(%w" + K + ", %d" + K + ") : " + T + "\n";
  }
  ir += "  %loss = Mul(%s, %half) : f32[]\n";
  for (int k = 0; k < kLanes; ++k)
    ir += "  update %w" + std::to_string(k) + " = %nw" + std::to_string(k) + "\n  update %v" +
          std::to_string(k) + " = %nv" + std::to_string(k) + "\n";
  ir += "  return %loss\n}\n";
  std::vector<uint8_t> bytes = dlc::test::compileIRForEmu(ir.c_str(), "many.ir", "fuse");
  ASSERT_FALSE(bytes.empty());

  auto pf = dlc::pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "many.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  const dlc::pkg::Package &meta = (*pf)->meta();
  int multi = 0, copies = 0;
  for (const dlc::pkg::Step *st : *meta.steps()) {
    if (st->op_type() == dlc::pkg::StepKind::Launch)
      multi += meta.kernels()->Get(st->op_as_Launch()->kernel())->template_name()->str() ==
               "dlc::multi_tensor";
    copies += st->op_type() == dlc::pkg::StepKind::Copy;
  }
  EXPECT_EQ(multi, 2);
  EXPECT_EQ(copies, 0);
  EXPECT_EQ(meta.commit_steps(), 2u);

  dlc::Model m = dlc::Model::fromMemory(bytes.data(), bytes.size());
  dlc::Session s(m, DLC_DEVICE_EMU);
  std::vector<std::vector<float>> w = w0, v;
  for (int n : sizes)
    v.emplace_back(n, 0.0f);
  for (float sv : {1.0f, 2.0f}) {
    s.setInput<float>("s", {sv});
    EXPECT_FLOAT_EQ(s.step(), 0.5f * sv);
    for (int k = 0; k < kLanes; ++k)
      for (int i = 0; i < sizes[k]; ++i) {
        v[k][i] = v[k][i] * 0.9f + w[k][i] * sv;
        w[k][i] = w[k][i] - v[k][i] * 0.5f;
      }
  }
  for (int k = 0; k < kLanes; ++k) {
    std::vector<float> gw = s.variable<float>("w" + std::to_string(k)),
                       gv = s.variable<float>("v" + std::to_string(k));
    ASSERT_EQ(gw.size(), w[k].size());
    for (int i = 0; i < sizes[k]; ++i) {
      ASSERT_NEAR(gw[i], w[k][i], 1e-5f * (1 + std::fabs(w[k][i]))) << "w" << k << "[" << i << "]";
      ASSERT_NEAR(gv[i], v[k][i], 1e-5f * (1 + std::fabs(v[k][i]))) << "v" << k << "[" << i << "]";
    }
  }
}

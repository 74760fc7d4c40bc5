// TensorProto -> ir::Tensor for every storage field ONNX uses.
#include "dlc/ir/Graph.h"
#include "onnx/OnnxUtil.h"

#include <gtest/gtest.h>

using namespace dlc;
using namespace dlc::frontend;

namespace {
std::string errorOf(llvm::Expected<ir::Tensor> &t) {
  return t ? std::string() : llvm::toString(t.takeError());
}
} // namespace

TEST(TensorProto, TypedFieldsForEveryDType) {
  onnx::TensorProto f16;
  f16.set_data_type(onnx::TensorProto::FLOAT16);
  f16.add_dims(2);
  f16.add_int32_data(0x3C00); // 1.0
  f16.add_int32_data(0xC000); // -2.0
  auto t = tensorFromOnnx(f16, nullptr);
  ASSERT_TRUE(bool(t)) << errorOf(t);
  EXPECT_EQ(t->dtype(), ir::DType::F16);
  EXPECT_EQ(t->getDouble(0), 1.0);
  EXPECT_EQ(t->getDouble(1), -2.0);

  onnx::TensorProto b;
  b.set_data_type(onnx::TensorProto::BOOL);
  b.add_dims(3);
  for (int v : {1, 0, 1})
    b.add_int32_data(v);
  auto tb = tensorFromOnnx(b, nullptr);
  ASSERT_TRUE(bool(tb));
  EXPECT_EQ(tb->toVector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));

  onnx::TensorProto u;
  u.set_data_type(onnx::TensorProto::UINT64);
  u.add_dims(1);
  u.add_uint64_data(~uint64_t{0});
  auto tu = tensorFromOnnx(u, nullptr);
  ASSERT_TRUE(bool(tu));
  EXPECT_EQ(tu->toVector<uint64_t>()[0], ~uint64_t{0});

  onnx::TensorProto i8;
  i8.set_data_type(onnx::TensorProto::INT8);
  i8.add_dims(2);
  i8.add_int32_data(-128);
  i8.add_int32_data(127);
  auto ti = tensorFromOnnx(i8, nullptr);
  ASSERT_TRUE(bool(ti));
  EXPECT_EQ(ti->toVector<int64_t>(), (std::vector<int64_t>{-128, 127}));
}

TEST(TensorProto, RawDataMustMatchTheType) {
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(2);
  t.set_raw_data(std::string(7, '\0'));
  auto r = tensorFromOnnx(t, nullptr);
  EXPECT_NE(errorOf(r).find("tensor 'w' of type f32[2] has 7 bytes of raw data, expected 8"),
            std::string::npos);
}

TEST(TensorProto, CountMismatchAndBadTypesAreErrors) {
  onnx::TensorProto t;
  t.set_name("x");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(3);
  t.add_float_data(1);
  auto r = tensorFromOnnx(t, nullptr);
  EXPECT_NE(errorOf(r).find("has 1 values, expected 3"), std::string::npos);

  onnx::TensorProto s;
  s.set_name("s");
  s.set_data_type(onnx::TensorProto::STRING);
  auto rs = tensorFromOnnx(s, nullptr);
  EXPECT_NE(errorOf(rs).find("unsupported element type STRING"), std::string::npos);

  onnx::TensorProto neg;
  neg.set_name("n");
  neg.set_data_type(onnx::TensorProto::FLOAT);
  neg.add_dims(-4);
  auto rn = tensorFromOnnx(neg, nullptr);
  EXPECT_NE(errorOf(rn).find("invalid dimensions"), std::string::npos);
}

TEST(TensorProto, ExternalDataNeedsALoader) {
  onnx::TensorProto t;
  t.set_name("e");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(1);
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto r = tensorFromOnnx(t, nullptr);
  EXPECT_NE(errorOf(r).find("external data"), std::string::npos);
}

TEST(OnnxTypes, DTypeMappingRoundTrips) {
  for (ir::DType d : ir::kAllDTypes) {
    int32_t e = dtypeToOnnx(d);
    ASSERT_NE(e, 0) << ir::dtypeName(d);
    EXPECT_EQ(dtypeFromOnnx(e), d);
  }
  EXPECT_FALSE(dtypeFromOnnx(onnx::TensorProto::STRING).has_value());
  EXPECT_FALSE(dtypeFromOnnx(onnx::TensorProto::COMPLEX64).has_value());
}

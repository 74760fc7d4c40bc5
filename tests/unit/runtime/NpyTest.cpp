#include "dlc/runtime/Runtime.h"

#include <cstdio>
#include <cstring>
#include <gtest/gtest.h>

using namespace dlc;

namespace {
std::vector<uint8_t> npy(const std::string &header, size_t dataBytes) {
  std::string h = header;
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string prefix = std::string("\x93NUMPY\x01\x00", 8);
  prefix += static_cast<char>(h.size() & 0xFF);
  prefix += static_cast<char>(h.size() >> 8);
  std::string all = prefix + h + std::string(dataBytes, '\0');
  return std::vector<uint8_t>(all.begin(), all.end());
}
} // namespace

TEST(Npy, WriteReadRoundTrip) {
  rt::HostTensor t = rt::HostTensor::zeros(pkg::DType::I32, {2, 3});
  for (int i = 0; i < 6; ++i)
    std::memcpy(t.data.data() + 4 * i, &i, 4);
  std::string path = ::testing::TempDir() + "/rt.npy";
  ASSERT_FALSE(rt::writeNpy(path, t));
  auto r = rt::readNpy(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->dtype, pkg::DType::I32);
  EXPECT_EQ(r->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->data, t.data);
  rt::HostTensor s = rt::HostTensor::zeros(pkg::DType::F32, {});
  ASSERT_FALSE(rt::writeNpy(path, s));
  auto rs = rt::readNpy(path);
  ASSERT_TRUE(rs.ok());
  EXPECT_TRUE(rs->shape.empty());
  std::remove(path.c_str());
}

TEST(Npy, MalformedFilesAreClearErrors) {
  struct Case {
    std::vector<uint8_t> bytes;
    const char *expect;
  };
  std::vector<Case> cases = {
      {{'n', 'o', 't', ' ', 'n', 'p', 'y', '!', '!', '!', '!'}, "missing the \\x93NUMPY magic"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20),
       "the data has 20 bytes, shape and dtype need 24"},
      {npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8),
       "unsupported dtype '>f4'"},
      {npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8), "Fortran-ordered"},
      {npy("{'descr': '<f4', 'shape': (2,), }", 8), "lacks descr, fortran_order or shape"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8),
       "invalid dimension '-2'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 8),
       "too many elements"},
      {npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8),
       "unsupported dtype '|O'"},
  };
  for (const Case &c : cases) {
    auto r = rt::parseNpy(c.bytes.data(), c.bytes.size(), "x.npy");
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("x.npy: invalid .npy file"), std::string::npos);
  }
  auto truncated = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8);
  truncated.resize(20);
  EXPECT_FALSE(rt::parseNpy(truncated.data(), truncated.size(), "t.npy").ok());
}

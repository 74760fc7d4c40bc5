#include "../Testing.h"

#include <filesystem>

using namespace dlc;
using namespace dlc::ir;
using dlc::test::errorOf;

namespace {

/// print(parse(print(g))) == print(g), and the reparsed graph verifies.
void expectRoundTrip(const std::string &text, const std::string &what) {
  auto g = parseGraph(text, what);
  ASSERT_TRUE(bool(g)) << what << ": " << errorOf(g);
  ASSERT_EQ(errorOf(verifyGraph(**g)), "") << what;
  std::string p1 = printGraph(**g);
  auto g2 = parseGraph(p1, what + " (printed)");
  ASSERT_TRUE(bool(g2)) << what << ": " << errorOf(g2) << "\n" << p1;
  ASSERT_EQ(errorOf(verifyGraph(**g2)), "") << what;
  EXPECT_EQ(printGraph(**g2), p1) << what;
}

std::vector<std::filesystem::path> corpusFiles() {
  std::vector<std::filesystem::path> files;
  for (const char *dir : {"tests/unit/ir/corpus"})
    for (auto &e :
         std::filesystem::recursive_directory_iterator(std::string(DLC_SOURCE_DIR) + "/" + dir))
      if (e.path().extension() == ".ir")
        files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

TEST(TextIR, CorpusRoundTrips) {
  auto files = corpusFiles();
  ASSERT_GE(files.size(), 5u);
  for (const auto &f : files) {
    std::string rel = std::filesystem::relative(f, DLC_SOURCE_DIR).string();
    expectRoundTrip(test::readSourceFile(rel), rel);
  }
}

// The lit inputs of the pass tests are a second corpus (split on "// -----").
TEST(TextIR, LitPassInputsRoundTrip) {
  int count = 0;
  for (auto &e :
       std::filesystem::directory_iterator(std::string(DLC_SOURCE_DIR) + "/tests/lit/passes")) {
    if (e.path().extension() != ".ir")
      continue;
    std::string text = test::readSourceFile(std::filesystem::relative(e.path(), DLC_SOURCE_DIR));
    size_t pos = 0;
    while (pos < text.size()) {
      size_t sep = text.find("\n// -----\n", pos);
      std::string chunk =
          text.substr(pos, sep == std::string::npos ? std::string::npos : sep - pos);
      expectRoundTrip(chunk, e.path().filename().string() + " #" + std::to_string(count++));
      pos = sep == std::string::npos ? text.size() : sep + 10;
    }
  }
  EXPECT_GE(count, 8);
}

TEST(TextIR, ElidedConstantsPrintButDoNotParse) {
  auto g = test::parseIR(test::readSourceFile("tests/unit/ir/corpus/cnn.ir"));
  ASSERT_TRUE(g);
  PrintOptions opts;
  opts.elideConstantsAbove = 16;
  std::string s = printGraph(*g, opts);
  EXPECT_NE(s.find("dense<elided>"), std::string::npos);
  EXPECT_NE(s.find("dense<[0.1, 0.2, 0.3, 0.4]>"), std::string::npos) << "small constants stay";
  auto re = parseGraph(s, "elided.ir");
  EXPECT_NE(errorOf(re).find("elided"), std::string::npos);
}

TEST(TextIR, FloatFormattingIsShortestAndExact) {
  for (float f : {0.1f, 1.0f, -0.0f, 1e-45f, 3.4028235e38f, 16777217.0f, 0.3f})
    EXPECT_EQ(std::strtof(formatFloat(f).c_str(), nullptr), f) << formatFloat(f);
  EXPECT_EQ(formatFloat(1.0f), "1.0");
  EXPECT_EQ(formatFloat(0.1f), "0.1");
  EXPECT_EQ(formatFloat(-0.0f), "-0.0");
}

struct BadIR {
  const char *name;
  const char *text;
  const char *expect; // substring of the error, including line:col
};

class ParserErrors : public ::testing::TestWithParam<BadIR> {};

TEST_P(ParserErrors, OneLineErrorWithLocation) {
  const BadIR &c = GetParam();
  auto g = parseGraph(c.text, "bad.ir");
  std::string err = g ? errorOf(verifyGraph(**g, "bad.ir")) : errorOf(g);
  EXPECT_NE(err.find(c.expect), std::string::npos) << "got: " << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << "error must be one line: " << err;
}

INSTANTIATE_TEST_SUITE_P(
    TextIR, ParserErrors,
    ::testing::Values(
        BadIR{
            "syntax",
            "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %0 = Relu(%x : f32[2]\n  return %0\n}\n",
            "bad.ir:2:16: expected ',' between operands, found ':'"},
        BadIR{"unknown_op",
              "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %0 = Frobnicate(%x) : f32[2]\n  return "
              "%0\n}\n",
              "bad.ir:2:8: unknown op 'Frobnicate'"},
        BadIR{
            "undefined",
            "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %0 = Relu(%z) : f32[2]\n  return %0\n}\n",
            "bad.ir:2:13: use of undefined value '%z'"},
        BadIR{"use_before_def",
              "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %0 = Relu(%1) : f32[2]\n  %1 = Neg(%x) "
              ": f32[2]\n  return %0\n}\n",
              "bad.ir:2:13: value '%1' is used before its definition at line 3"},
        BadIR{"cycle",
              "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %a = Add(%x, %b) : f32[2]\n  %b = "
              "Relu(%a) : f32[2]\n  return %b\n}\n",
              "bad.ir:2:16: value '%b' is used before its definition at line 3 (a cycle"},
        BadIR{
            "type_mismatch",
            "graph @g(%x: f32[2], %i: i64[2]) -> (\"y\": f32[2]) {\n  %0 = Add(%x, %i) : f32[2]\n  "
            "return %0\n}\n",
            "bad.ir:2:3: (Add): operands 0 and 1 must have the same element type, got f32 and i64"},
        BadIR{
            "shape_mismatch",
            "graph @g(%x: f32[2]) -> (\"y\": f32[3]) {\n  %0 = Relu(%x) : f32[3]\n  return %0\n}\n",
            "bad.ir:2:3: (Relu): result 0 has type f32[3], but the op infers f32[2]"},
        BadIR{
            "redefinition",
            "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %x = Relu(%x) : f32[2]\n  return %x\n}\n",
            "bad.ir:2:3: redefinition of value '%x'"},
        BadIR{"bad_dtype", "graph @g(%x: f31[2]) -> (\"y\": f32[2]) {\n  return %x\n}\n",
              "bad.ir:1:14: unknown element type 'f31'"},
        BadIR{"constant_size",
              "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %c = const f32[2] dense<[1.0]>\n  "
              "return %x\n}\n",
              "bad.ir:2:27: constant of type f32[2] needs 2 elements, got 1"},
        BadIR{"bad_char",
              "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  # comment\n  return %x\n}\n",
              "bad.ir:2:3: unexpected character '#'"},
        BadIR{"missing_attr",
              "graph @g(%x: f32[2]) -> (\"y\": f32[2]) {\n  %0 = Reshape(%x) : f32[2]\n  return "
              "%0\n}\n",
              "bad.ir:2:3: (Reshape): missing required attribute 'shape'"},
        BadIR{"output_type", "graph @g(%x: f32[2]) -> (\"y\": f32[3]) {\n  return %x\n}\n",
              "bad.ir:1:26: output \"y\" is declared f32[3] but the returned value '%x' is f32[2]"},
        BadIR{"unterminated", "graph @g(%x: f32[2]) -> (\"y: f32[2]) {\n  return %x\n}\n",
              "bad.ir:1:26: unterminated string"},
        BadIR{"huge_dims",
              "graph @g(%x: f32[4294967296,4294967296]) -> (\"y\": f32[2]) {\n  return %x\n}\n",
              "bad.ir:1:14: type f32[4294967296,4294967296] has too many elements"}),
    [](const ::testing::TestParamInfo<BadIR> &i) { return std::string(i.param.name); });

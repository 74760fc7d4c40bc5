#include "KernelLibraryTestUtil.h"

#include "dlc/codegen/Compiler.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Runtime.h"

#include <cstring>
#include <gtest/gtest.h>
#include <random>
#include <regex>

namespace dlc::test {

namespace {
rt::HostTensor hostTensor(const ir::Tensor &t) {
  rt::HostTensor h;
  h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t.dtype()));
  h.shape = t.shape();
  const uint8_t *p = static_cast<const uint8_t *>(t.raw());
  h.data.assign(p, p + t.byteSize());
  return h;
}

} // namespace

void run(const KernelCase &c, bool wide) {
  SCOPED_TRACE(std::string(c.name) + (wide ? " (64-bit indices)" : " (32-bit indices)"));
  auto parsed = ir::parseGraph(c.ir, c.name);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  std::unique_ptr<ir::Graph> g = std::move(*parsed);
  ir::TensorMap inputs = ir::randomInputs(*g, 11);
  for (const auto &[name, t] : c.inputs)
    inputs[name] = t;
  auto expected = ir::interpret(*g, inputs);
  ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());

  passes::PassManager pm;
  passes::PassContext ctx;
  ctx.gemmEpilogue = passes::GemmEpilogueMode::Fused;
  ASSERT_FALSE(bool(pm.run(*g, passes::defaultPipeline(c.opt, false, c.layout), ctx)));
  codegen::CompileOptions co;
  co.targets = {"emu-check"};
  co.wideIndices = wide;
  co.persistentRnn = c.persistentRnn;
  co.tf32 = co.tf32Everywhere = c.tf32;
  co.int8TensorCoresEverywhere = !c.int8Choice;
  co.convTile = c.convTile;
  co.attentionKernel = c.attentionKernel;
  co.deterministic = c.deterministic;
  codegen::CompileReport rep;
  auto bytes = codegen::compileGraph(*g, co, &rep);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), c.name);
  ASSERT_TRUE(pf.ok()) << pf.status().message();

  std::set<std::string> used;
  for (const pkg::Kernel *k : *(*pf)->meta().kernels())
    used.insert(k->template_name()->str());
  for (const std::string &t : c.templates)
    EXPECT_TRUE(used.count(t)) << "the package does not instantiate " << t;
  for (const std::string &t : c.absent)
    EXPECT_FALSE(used.count(t)) << "the package instantiates " << t;
  if (c.launches >= 0) {
    int launches = 0;
    for (const pkg::Step *st : *(*pf)->meta().steps())
      launches += st->op_type() == pkg::StepKind::Launch;
    EXPECT_EQ(launches, c.launches);
  }
  // Every instantiation names its index type; these shapes get 32-bit indices unless
  // 64-bit ones are forced.
  std::regex inst(R"(template __global__ void ([\w:]+)<(.*)>\()");
  size_t count = 0;
  for (std::sregex_iterator it(rep.cudaSource.begin(), rep.cudaSource.end(), inst), end; it != end;
       ++it, ++count) {
    std::string args = (*it)[2];
    bool has64 = args.find("dlc::idx64") != std::string::npos,
         has32 = args.find("dlc::idx32") != std::string::npos;
    EXPECT_TRUE(wide ? has64 && !has32 : has32 && !has64) << (*it)[0];
  }
  EXPECT_EQ(count, (*pf)->meta().kernels()->size());
  EXPECT_NE(rep.cudaSource.find(c.sourceHas), std::string::npos) << c.sourceHas;
  if (!c.sourceLacks.empty()) {
    EXPECT_EQ(rep.cudaSource.find(c.sourceLacks), std::string::npos) << c.sourceLacks;
  }

  // Runs the package once with `so`; the outputs' bytes by name.
  auto runWith = [&](const rt::SessionOptions &so,
                     std::map<std::string, std::vector<uint8_t>> &out) {
    auto s = rt::Session::create(*pf, so);
    ASSERT_TRUE(s.ok()) << s.status().message();
    for (const auto &[name, t] : inputs)
      ASSERT_FALSE((*s)->setInput(name, hostTensor(t))) << name;
    Status st = (*s)->run();
    ASSERT_FALSE(st) << st.message();
    for (const auto &[name, want] : *expected) {
      auto got = (*s)->getOutput(name);
      ASSERT_TRUE(got.ok()) << got.status().message();
      out[name] = got->data;
    }
  };
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  std::map<std::string, std::vector<uint8_t>> first;
  runWith(so, first);
  for (const auto &[name, want] : *expected) {
    ir::Tensor t(want.type());
    ASSERT_EQ(first[name].size(), t.byteSize()) << name;
    std::memcpy(t.mutableRaw(), first[name].data(), first[name].size());
    ir::Comparison cmp = ir::compareTensors(t, want, c.tol, c.tol);
    EXPECT_TRUE(cmp.ok) << name << ": " << cmp.message;
  }
  if (!c.deterministic)
    return;
  using Order = rt::SessionOptions::ThreadOrder;
  for (auto [threads, order] :
       {std::pair{1, Order::Reverse}, std::pair{3, Order::Random}, std::pair{3, Order::Reverse}}) {
    rt::SessionOptions o = so;
    o.emuThreads = threads;
    o.emuThreadOrder = order;
    std::map<std::string, std::vector<uint8_t>> again;
    runWith(o, again);
    for (const auto &[name, bytes] : first)
      EXPECT_TRUE(again[name] == bytes) << name << " differs with " << threads << " emu threads";
  }
}

void check(const KernelCase &c) {
  run(c, false);
  run(c, true);
}

std::string randomConst(ir::DType dt, const ir::Shape &shape, unsigned seed) {
  ir::Tensor t(ir::TensorType(dt, shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.numElements(); ++i)
    ir::storeElement<double>(dt, t.mutableRaw(), i, u(rng));
  return constText(t);
}

std::string constText(const ir::Tensor &t) {
  std::string s = "const " + t.type().str() + " dense<0x";
  const uint8_t *p = static_cast<const uint8_t *>(t.raw());
  static const char *digits = "0123456789ABCDEF";
  for (size_t i = 0; i < t.byteSize(); ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s + ">";
}

ir::Tensor ints(ir::DType dt, ir::Shape shape, std::vector<int64_t> values) {
  ir::Tensor t(ir::TensorType(dt, std::move(shape)));
  for (size_t i = 0; i < values.size(); ++i)
    ir::storeElement<int64_t>(dt, t.mutableRaw(), static_cast<int64_t>(i), values[i]);
  return t;
}

} // namespace dlc::test

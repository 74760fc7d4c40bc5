//===- Bench.cpp - Timing a session's runs ---------------------------------===//
#include "dlc/runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace dlc::rt {

Result<BenchTimes> benchmark(Session &s,
                             const std::vector<std::pair<std::string, HostTensor>> &upload,
                             int64_t warmup, int64_t iterations) {
  if (warmup < 0 || iterations < 1)
    return Status(StatusCode::InvalidArgument, "warmup must be >= 0 and iterations >= 1");
  const pkg::Package &m = s.package();
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  BenchTimes t;
  // The outputs' shapes are known after the first run.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> outs;
  for (int64_t i = 0; i < warmup + iterations; ++i) {
    auto t0 = clock::now();
    for (const auto &[name, tensor] : upload)
      DLC_RETURN_IF_ERROR(s.setInput(name, tensor));
    auto t1 = clock::now();
    DLC_RETURN_IF_ERROR(s.run());
    if (outs.empty() && m.outputs())
      for (const pkg::TensorInfo *o : *m.outputs()) {
        size_t n = pkg::dtypeSize(o->dtype());
        for (int64_t d : s.outputShape(o->name()->str()))
          n *= static_cast<size_t>(d);
        outs.emplace_back(o->name()->str(), std::vector<uint8_t>(n));
      }
    auto t2 = clock::now();
    for (auto &[name, bytes] : outs)
      DLC_RETURN_IF_ERROR(s.getOutputBytes(name, bytes.data(), bytes.size()));
    auto t3 = clock::now();
    if (i >= warmup) {
      t.h2d.push_back(ms(t1 - t0));
      t.compute.push_back(ms(t2 - t1));
      t.d2h.push_back(ms(t3 - t2));
      t.total.push_back(ms(t3 - t0));
    }
  }
  return t;
}

BenchStats benchStats(std::vector<double> v) {
  BenchStats s;
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, idx == 0 ? 0 : idx - 1)];
  };
  return {at(0.0), at(0.5), at(0.9), at(0.99), at(1.0)};
}

} // namespace dlc::rt

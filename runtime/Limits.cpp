#include "Backend.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace dlc::rt {

const ArchLimits *archLimits(const std::string &arch) {
  static const ArchLimits table[] = {
      {"sm_80", 163 * 1024},
      {"sm_86", 99 * 1024},
      {"sm_89", 99 * 1024},
      {"sm_90", 227 * 1024},
  };
  for (const ArchLimits &l : table)
    if (arch == l.arch)
      return &l;
  return nullptr;
}

Status checkLaunchLimits(const pkg::PackageFile &p, const pkg::Launch &l) {
  const pkg::Kernel *k = p.meta().kernels()->Get(l.kernel());
  const pkg::Dim3 &b = *l.block(), &g = *l.grid();
  std::string who = "launch of kernel '" + k->name()->str() + "'";
  auto fail = [&](const std::string &why) {
    return Status(StatusCode::LaunchFailure, who + " would fail on a GPU: " + why);
  };
  uint64_t threads = uint64_t(b.x()) * b.y() * b.z();
  if (threads > kMaxThreadsPerBlock)
    return fail("a block of " + std::to_string(threads) + " threads exceeds the limit of " +
                std::to_string(kMaxThreadsPerBlock));
  if (b.x() > 1024 || b.y() > 1024 || b.z() > 64)
    return fail("block dimensions (" + std::to_string(b.x()) + ", " + std::to_string(b.y()) + ", " +
                std::to_string(b.z()) + ") exceed (1024, 1024, 64)");
  if (g.x() > 2147483647u || g.y() > 65535 || g.z() > 65535)
    return fail("grid dimensions (" + std::to_string(g.x()) + ", " + std::to_string(g.y()) + ", " +
                std::to_string(g.z()) + ") exceed (2^31-1, 65535, 65535)");
  // Each architecture compiled into the package must accept the launch.
  std::vector<const pkg::ArchResources *> archs;
  if (k->resources())
    for (const pkg::ArchResources *r : *k->resources())
      archs.push_back(r);
  // Without ptxas resources (an emu-only package) the limit is the smallest opt-in
  // limit among the architectures dlc compiles for (kernels opt in above 48 KB).
  if (archs.empty()) {
    int smallest = INT32_MAX;
    for (const char *a : {"sm_80", "sm_86", "sm_89", "sm_90"})
      smallest = std::min(smallest, archLimits(a)->maxSmemPerBlockOptin);
    if (l.dynamic_smem() > static_cast<uint32_t>(smallest))
      return fail(std::to_string(l.dynamic_smem()) + " bytes of dynamic shared memory exceed " +
                  std::to_string(smallest) + " (the smallest limit among sm_80..sm_90)");
  }
  for (const pkg::ArchResources *r : archs) {
    std::string arch = r->arch() ? r->arch()->str() : "?";
    const ArchLimits *lim = archLimits(arch);
    if (!lim)
      continue;
    if (r->static_smem() > kMaxStaticSmem)
      return fail(arch + ": " + std::to_string(r->static_smem()) +
                  " bytes of static shared memory exceed 48 KB");
    uint64_t smem = uint64_t(r->static_smem()) + l.dynamic_smem();
    if (smem > uint64_t(lim->maxSmemPerBlockOptin))
      return fail(arch + ": " + std::to_string(smem) + " bytes of shared memory per block exceed " +
                  std::to_string(lim->maxSmemPerBlockOptin));
    // Registers are allocated per warp in units of 256 (8 per thread).
    uint64_t regs = (uint64_t(r->registers()) + 7) / 8 * 8;
    uint64_t warpsThreads = (threads + 31) / 32 * 32;
    if (regs * warpsThreads > kRegistersPerBlock)
      return fail(arch + ": " + std::to_string(r->registers()) + " registers x " +
                  std::to_string(threads) + " threads exceed the " +
                  std::to_string(kRegistersPerBlock) + " registers of a multiprocessor");
  }
  return Status::ok();
}

} // namespace dlc::rt

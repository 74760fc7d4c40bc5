//===- Philox.h - The counter-based RNG of training-mode Dropout ---------===//
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a keyed bijection of a 128-bit counter, so element i of step s draws
// its number independently of every other element, in any order, on any device.
// The reference interpreter and the generated kernels include this one file (it is
// embedded in dlc for NVRTC and the emu compiler), so their masks are identical.
//===----------------------------------------------------------------------===//
#ifndef DLC_PHILOX_H
#define DLC_PHILOX_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(DLC_EMU)
#define DLC_PHILOX_FN __host__ __device__ inline
#else
#define DLC_PHILOX_FN inline
#endif

namespace dlc {
namespace philox {

/// The first 32-bit word of Philox4x32-10 for counter (index, stream) and key seed.
DLC_PHILOX_FN unsigned int draw(unsigned long long seed, unsigned long long stream,
                                unsigned long long index) {
  unsigned int c0 = static_cast<unsigned int>(index), c1 = static_cast<unsigned int>(index >> 32),
               c2 = static_cast<unsigned int>(stream), c3 = static_cast<unsigned int>(stream >> 32);
  unsigned int k0 = static_cast<unsigned int>(seed), k1 = static_cast<unsigned int>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    unsigned int h0 = static_cast<unsigned int>(p0 >> 32), l0 = static_cast<unsigned int>(p0);
    unsigned int h1 = static_cast<unsigned int>(p1 >> 32), l1 = static_cast<unsigned int>(p1);
    c0 = h1 ^ c1 ^ k0;
    c1 = l1;
    c2 = h0 ^ c3 ^ k1;
    c3 = l0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

/// Uniform in [0, 1) with 24 random bits (exact in float).
DLC_PHILOX_FN float uniform(unsigned long long seed, unsigned long long stream,
                            unsigned long long index) {
  return static_cast<float>(draw(seed, stream, index) >> 8) * (1.0f / 16777216.0f);
}

} // namespace philox
} // namespace dlc

#endif // DLC_PHILOX_H

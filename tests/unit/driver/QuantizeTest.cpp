// dlc quantize's thresholds on histograms computed by hand: the percentile's bin edge,
// and the entropy (Kullback-Leibler) choice worked through below.
#include "dlc/driver/Quantize.h"

#include <gtest/gtest.h>

using dlc::driver::entropyThreshold;
using dlc::driver::percentileThreshold;

TEST(QuantizeThresholds, PercentileIsTheUpperEdgeOfTheBinThatReachesIt) {
  // 40 values, 10 per bin of width 0.5: half of them lie below 1.0.
  EXPECT_FLOAT_EQ(percentileThreshold({10, 10, 10, 10}, 0.5, 50), 1.0f);
  EXPECT_FLOAT_EQ(percentileThreshold({10, 10, 10, 10}, 0.5, 50.1), 1.5f);
  // Every value: the last non-empty bin's edge.
  EXPECT_FLOAT_EQ(percentileThreshold({1, 0, 0, 1}, 1.0, 100), 4.0f);
  EXPECT_FLOAT_EQ(percentileThreshold({0, 0, 0}, 1.0, 99), 0.0f);
}

TEST(QuantizeThresholds, EntropyKeepsTheRangeWhenMergingLosesNothing) {
  // Bins {4, 0, 0, 1} at 2 levels. i = 2: P = [4, 1], Q = [4, 0]: Q is 0 where P is
  // not (infinite). i = 3: P = [4, 0, 1], the level [1, 3) has count 0 spread over
  // bin 2: again 0 where P is 1. i = 4: levels [0, 2) and [2, 4) each have one
  // non-empty bin, so Q = P and the divergence is 0: the whole range, 4.
  EXPECT_FLOAT_EQ(entropyThreshold({4, 0, 0, 1}, 1.0, 2), 4.0f);
}

TEST(QuantizeThresholds, EntropyClipsARareOutlier) {
  // Bins {10, 2, 0, 1} at 2 levels (sums normalized, natural logs):
  // i = 2: P = [10, 3]/13, Q = [10, 2]/12: KL = 0.7692 ln(0.9231) + 0.2308 ln(1.3846)
  //        = 0.0136.
  // i = 3: P = [10, 2, 1]/13, Q = [10, 1, 1]/12: KL = 0.7692 ln(0.9231)
  //        + 0.1538 ln(1.8462) + 0.0769 ln(0.9231) = 0.0266.
  // i = 4: P = [10, 2, 0, 1]/13, Q = [6, 6, 0, 1]/13: KL = 0.7692 ln(1.6667)
  //        + 0.1538 ln(0.3333) = 0.2239.
  // The least is i = 2: the threshold is 2 bins.
  EXPECT_FLOAT_EQ(entropyThreshold({10, 2, 0, 1}, 1.0, 2), 2.0f);
  EXPECT_FLOAT_EQ(entropyThreshold({10, 2, 0, 1}, 0.25, 2), 0.5f);
}

TEST(QuantizeThresholds, EntropyOfAUniformRangeIsItsEnd) {
  // Values spread evenly over the first 256 of 2048 bins, at 128 levels: below 256
  // bins the clipped values pile into the last bin (P differs from Q); at 256 each
  // level is two equal bins (Q = P, divergence 0). Ties go to the smallest range.
  std::vector<uint64_t> counts(2048, 0);
  for (size_t i = 0; i < 256; ++i)
    counts[i] = 100;
  EXPECT_FLOAT_EQ(entropyThreshold(counts, 1.0, 128), 256.0f);
  // Fewer non-empty bins than levels: the range itself.
  std::vector<uint64_t> few(2048, 0);
  few[0] = 5, few[99] = 1;
  EXPECT_FLOAT_EQ(entropyThreshold(few, 0.5, 128), 50.0f);
}

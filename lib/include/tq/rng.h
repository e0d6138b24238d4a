// Deterministic, platform-independent random numbers.
//
// Every seeded object in tqkit (rotations, QJL projections, test inputs) draws
// from tq::Rng so that the same seed gives the same bits on every compiler and
// C++ library: xoshiro256** seeded through SplitMix64, uniform doubles from the
// top 53 bits, and Gaussians by Marsaglia's polar method with a log built from
// IEEE +,−,×,÷ only (det_log), never std:: distributions or libm's log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace tq {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();                    // [0, 1)
  double uniform(double lo, double hi);
  double gaussian();                   // N(0, 1)
  bool coin() { return next_u64() >> 63; }
  uint64_t below(uint64_t n);          // uniform integer in [0, n), unbiased

 private:
  uint64_t s_[4];
  bool have_spare_ = false;
  double spare_ = 0.0;
};

// Natural log computed with IEEE basic operations only (bit-reproducible).
// Accurate to about 1 ulp for finite x > 0.
double det_log(double x);

// Fisher–Yates shuffle of a random-access container with rng.below (the same
// permutation for the same seed on every machine).
template <class Vec>
void shuffle(Vec& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(rng.below(i))]);
}

// Seed derivation: a well-mixed child seed from (seed, stream id).
uint64_t mix_seed(uint64_t seed, uint64_t stream);

}  // namespace tq

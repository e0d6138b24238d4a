#include "tq/rng.h"

#include <cmath>

#include "tq/error.h"

namespace tq {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull);
  return splitmix64(x);
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next_u64() {  // xoshiro256** (Blackman & Vigna)
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

uint64_t Rng::below(uint64_t n) {
  TQ_ASSERT(n > 0);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do { x = next_u64(); } while (x >= limit);
  return x % n;
}

double Rng::gaussian() {
  if (have_spare_) { have_spare_ = false; return spare_; }
  double u, v, s;
  do {
    u = 2.0 * uniform() - 1.0;
    v = 2.0 * uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double m = std::sqrt(-2.0 * det_log(s) / s);  // sqrt is correctly rounded (IEEE)
  spare_ = v * m;
  have_spare_ = true;
  return u * m;
}

double det_log(double x) {
  TQ_ASSERT(x > 0 && std::isfinite(x));
  // x = m · 2^e with m in [sqrt(1/2), sqrt(2)); frexp and ldexp are exact.
  int e;
  double m = std::frexp(x, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752440) { m *= 2.0; --e; }
  // log(m) = 2·atanh(z), z = (m−1)/(m+1), |z| ≤ 0.1716: z^2 ≤ 0.0295, 20 terms ≪ 1 ulp.
  const double z = (m - 1.0) / (m + 1.0), z2 = z * z;
  // Horner from the smallest term: sum = Σ z2^k / (2k+1), k < 20.
  double sum = 1.0 / 39.0;
  for (int k = 18; k >= 0; --k) sum = sum * z2 + 1.0 / double(2 * k + 1);
  sum *= z;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 split in two (fdlibm)
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return double(e) * kLn2Hi + (2.0 * sum + double(e) * kLn2Lo);
}

}  // namespace tq

// Orthogonal rotations applied to head vectors before scalar quantization.
//
//   HadamardRotation        y = H x / √d, Sylvester H, in-place fast
//                           Walsh–Hadamard transform, O(d log d); symmetric,
//                           so it is its own inverse. d must be a power of 2.
//   RandomizedHadamard      y = D2 · H/√d · D1 x, D1/D2 diagonal ±1 signs drawn
//                           from tq::Rng(seed) (D1 first d draws, D2 next d).
//   HaarRotation            y = Q x, Q Haar-distributed: QR (Householder, float64)
//                           of a d×d Gaussian matrix from tq::Rng(seed), columns
//                           sign-fixed so diag(R) > 0. Any d ≥ 2.
//   IdentityRotation        y = x.
//
// Non-power-of-two head_dim (80, 96, 160, 192, 320, …): Hadamard-based
// rotations refuse it with a tq::Error; the spec "auto" picks Hadamard for
// powers of two and a dense Haar rotation (seed 0) otherwise. We never pad:
// padding would change the record size, and a dense Haar rotation is an exact
// orthogonal matrix of the right size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tq/simd.h"

namespace tq {

class Rotation {
 public:
  virtual ~Rotation() = default;
  int dim() const { return d_; }
  virtual std::string name() const = 0;  // spec string that recreates it
  // In place on one vector of dim() floats.
  virtual void apply(float* x) const = 0;
  virtual void apply_inverse(float* x) const = 0;
  // n rows of dim() floats, row-major, in place.
  void apply_rows(float* x, int64_t n) const;
  // Dense d×d matrix (row-major, y = M x), for tests and GPU upload.
  std::vector<float> matrix() const;

 protected:
  explicit Rotation(int d) : d_(d) {}
  int d_;
};

bool is_power_of_two(int64_t d);

// fwht(x, n): unnormalized in-place Walsh–Hadamard transform, in tq/simd.h.

class IdentityRotation final : public Rotation {
 public:
  explicit IdentityRotation(int d);
  std::string name() const override { return "none"; }
  void apply(float*) const override {}
  void apply_inverse(float*) const override {}
};

class HadamardRotation final : public Rotation {
 public:
  explicit HadamardRotation(int d);
  std::string name() const override { return "hadamard"; }
  void apply(float* x) const override;
  void apply_inverse(float* x) const override { apply(x); }
  float scale() const { return scale_; }  // float(1/√d)

 private:
  float scale_;
};

class RandomizedHadamard final : public Rotation {
 public:
  RandomizedHadamard(int d, uint64_t seed);
  // Fixed sign tables (±1), e.g. the turboquant_plus fork's constants.
  RandomizedHadamard(int d, std::vector<float> s1, std::vector<float> s2, std::string name);
  std::string name() const override;
  void apply(float* x) const override;
  void apply_inverse(float* x) const override;
  const std::vector<float>& signs1() const { return s1_; }
  const std::vector<float>& signs2() const { return s2_; }

 private:
  uint64_t seed_;
  float scale_;
  std::vector<float> s1_, s2_;
  std::string fixed_name_;
};

class HaarRotation final : public Rotation {
 public:
  HaarRotation(int d, uint64_t seed);
  std::string name() const override;
  void apply(float* x) const override;
  void apply_inverse(float* x) const override;
  const std::vector<double>& q() const { return q_; }  // row-major d×d

 private:
  uint64_t seed_;
  std::vector<double> q_;
};

// "none" | "hadamard" | "rht:SEED" | "haar:SEED" | "auto" (hadamard for powers
// of two, haar:0 otherwise). Throws tq::Error naming the spec on anything else.
std::unique_ptr<Rotation> make_rotation(const std::string& spec, int d);

}  // namespace tq

// Scalar codebooks for rotated coordinates of unit vectors in R^d.
//
// After a random rotation, each coordinate of a unit vector follows the exact
// marginal of a uniform point on S^{d-1}: density ∝ (1 − t²)^((d−3)/2) on
// [−1, 1], which tends to N(0, 1/d) as d grows. A codebook is data: sorted
// centroids, the midpoints between them (the bucket boundaries), and what it
// was solved for. Solvers are pure functions.
//
// Distortion is per vector, D = d · E[(x − Q(x))²] for x one coordinate of a
// unit vector (so D is the expected ‖u − Q(u)‖² of a whole unit vector u).
// TurboQuant (Zandieh et al. 2025, Thm. 1) bounds it by √3·π/2 · 4^−b above and
// 4^−b below; the Gaussian Lloyd-Max values are 0.3634, 0.1175, 0.03455, 0.009500.
#pragma once

#include <string>
#include <vector>

namespace tq {

enum class Distribution { gauss, sphere };

const char* to_string(Distribution dist);
Distribution parse_distribution(const std::string& s);  // throws tq::Error

struct Codebook {
  std::string source;              // "gauss", "sphere", "uniform", "empirical", "table", "vllm", "closed-form"
  int d = 0;                       // dimension the coordinates belong to
  int bits = 0;
  std::vector<double> centroids;   // ascending, 2^bits values
  std::vector<double> midpoints;   // 2^bits − 1 boundaries; x ≥ midpoints[i] goes above
  double distortion = 0;           // d · E[(x − Q(x))²] under the distribution solved for
  double entropy_bits = 0;         // entropy of the index, bits
  int iterations = 0;              // Lloyd iterations to convergence (0 for closed forms)
};

// Lloyd-Max for N(0, 1/d): exact conditional means E[X | a < X < b] from
// φ and erfc, iterated until the largest relative change of a centroid is
// below 1e-12.
Codebook lloyd_max_gaussian(int d, int bits);

// Lloyd-Max for the exact sphere marginal ∝ (1 − t²)^((d−3)/2), d ≥ 2. Cell
// masses by adaptive Gauss–Kronrod quadrature in t = sin θ (integrand
// cos^(d−2) θ, smooth for every d ≥ 2) to 1e-14 relative; first moments in
// closed form.
Codebook lloyd_max_sphere(int d, int bits);

// Deterministic 1-D Lloyd (k-means) on samples of one coordinate; d only
// scales the reported distortion. Initial centroids at the sample quantiles
// (k + 1/2)/K; iterates until the partition no longer changes.
Codebook lloyd_max_empirical(std::vector<double> samples, int d, int bits);

// Best uniform grid (2^b levels at (i − (2^b−1)/2)·Δ) for the given
// distribution: Δ minimises the exact distortion (golden-section search).
Codebook uniform_codebook(Distribution dist, int d, int bits);

// Closed forms: b = 1 exact (±E|X|: √(2/π)/√d for gauss, Γ(d/2)/(√π Γ((d+1)/2))
// for the sphere); b = 2 the paper's published levels ±0.453/√d, ±1.51/√d.
Codebook closed_form_codebook(Distribution dist, int d, int bits);

// The codebook vLLM computes (its solve_lloyd_max: trapezoid rule, fixed
// iteration cap, fp32 result), reproduced so that vLLM caches decode alike.
Codebook vllm_codebook(int d, int bits);

// Builds a codebook from a user table (ascending, either the positive half of a
// symmetric table — 2^(b−1) values — or the full 2^b list) and evaluates it.
Codebook codebook_from_table(const std::vector<double>& table, Distribution dist, int d, int bits);

// Midpoints of sorted centroids.
std::vector<double> midpoints_of(const std::vector<double>& centroids);

// Exact distortion d·E[(x − Q(x))²] and index entropy of any sorted table
// under the given distribution (quantizing by nearest centroid).
void evaluate_codebook(Codebook& cb, Distribution dist);

// Distortion of the table on samples (nearest centroid), times d.
double empirical_distortion(const Codebook& cb, const std::vector<double>& samples);

// Lloyd-Max N(0,1) levels are the gauss codebook at d = 1.
}  // namespace tq

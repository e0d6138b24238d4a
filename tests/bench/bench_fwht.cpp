// FWHT rotation throughput (vectors/s, one core) next to a d×d GEMM baseline
// (Eigen) in the same run. Run: build/tests/bench_fwht [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>

#include <vector>

#include <Eigen/Dense>

#include "tq/rng.h"
#include "tq/rotation.h"

namespace {

constexpr int kBatch = 1024;  // vectors per iteration (a cache-resident batch)

std::vector<float> random_rows(int d) {
  tq::Rng r(1);
  std::vector<float> x(size_t(kBatch) * d);
  for (auto& v : x) v = float(r.gaussian());
  return x;
}

void BM_hadamard_fwht(benchmark::State& state) {
  const int d = int(state.range(0));
  tq::HadamardRotation rot(d);
  auto x = random_rows(d);
  for (auto _ : state) {
    rot.apply_rows(x.data(), kBatch);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

// Baseline: the same rotation as a dense d×d matrix, applied to the batch by
// Eigen's GEMM (blocked, vectorized): what a rotation without FWHT costs.
void BM_dense_gemm(benchmark::State& state) {
  const int d = int(state.range(0));
  const auto m = tq::HadamardRotation(d).matrix();
  Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> M(m.data(), d, d);
  auto x = random_rows(d);
  Eigen::Map<Eigen::MatrixXf> X(x.data(), d, kBatch);  // column r = row r of x
  Eigen::MatrixXf Y(d, kBatch);
  for (auto _ : state) {
    Y.noalias() = M * X;
    benchmark::DoNotOptimize(Y.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

}  // namespace

BENCHMARK(BM_hadamard_fwht)->Arg(64)->Arg(128)->Arg(256);
BENCHMARK(BM_dense_gemm)->Arg(64)->Arg(128)->Arg(256);
BENCHMARK_MAIN();

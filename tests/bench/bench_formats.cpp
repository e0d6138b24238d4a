// CPU encode/decode throughput (rows/s, one core) of the vLLM presets and
// turbo blocks at head_dim 128, next to a baseline that rotates with a dense
// d×d GEMM (Eigen) instead of the FWHT. The CPU encode target (README): ≥ 5 M keys/s
// encode for turboquant_4bit_nc.
// Run: taskset -c 0 build/tests/bench_formats [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include <Eigen/Dense>

#include "tq/format.h"
#include "tq/formats/mse.h"
#include "tq/rng.h"

namespace {

constexpr int kD = 128, kRows = 4096;

std::vector<float> rows() {
  tq::Rng r(3);
  std::vector<float> x(size_t(kRows) * kD);
  for (auto& v : x) v = float(r.gaussian());
  return x;
}

void BM_encode_keys(benchmark::State& st, const char* fmt_name) {
  const auto f = tq::make_format(fmt_name, kD);
  const auto x = rows();
  std::vector<uint8_t> out(f.key->encoded_bytes(kRows));
  for (auto _ : st) {
    f.key->encode(x.data(), kRows, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * kRows);
}

void BM_encode_values(benchmark::State& st, const char* fmt_name) {
  const auto f = tq::make_format(fmt_name, kD);
  const auto x = rows();
  std::vector<uint8_t> out(f.value->encoded_bytes(kRows));
  for (auto _ : st) {
    f.value->encode(x.data(), kRows, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * kRows);
}

void BM_decode_keys(benchmark::State& st, const char* fmt_name) {
  const auto f = tq::make_format(fmt_name, kD);
  const auto x = rows();
  const auto rec = f.key->encode(x);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    f.key->decode(rec.data(), kRows, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(st.iterations() * kRows);
}

void BM_score_keys(benchmark::State& st, const char* fmt_name) {
  const auto f = tq::make_format(fmt_name, kD);
  const auto x = rows();
  const auto rec = f.key->encode(x);
  std::vector<float> q(x.begin(), x.begin() + kD), p(f.key->prepared_size()), s(size_t{kRows});
  f.key->prepare_query(q.data(), p.data());
  for (auto _ : st) {
    f.key->score(p.data(), rec.data(), kRows, s.data());
    benchmark::DoNotOptimize(s.data());
  }
  st.SetItemsProcessed(st.iterations() * kRows);
}

// Baseline: the same 4-bit key encoder with the rotation done as a dense GEMM.
void BM_encode_keys_gemm_rotation(benchmark::State& st) {
  const auto f = tq::make_format("turboquant_4bit_nc", kD);
  const auto& mse = dynamic_cast<const tq::MseCodec&>(*f.key);
  const auto m = mse.rotation().matrix();
  Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> M(m.data(), kD, kD);
  const auto x = rows();
  Eigen::Map<const Eigen::MatrixXf> X(x.data(), kD, kRows);
  Eigen::MatrixXf Y(kD, kRows);
  std::vector<uint8_t> out(f.key->encoded_bytes(kRows));
  for (auto _ : st) {
    Y.noalias() = M * X;
    for (int r = 0; r < kRows; ++r) {
      float* y = Y.col(r).data();
      const float norm = X.col(r).norm();
      const float inv = 1.0f / (norm + 1e-8f);
      for (int j = 0; j < kD; ++j) y[j] *= inv;
      mse.pack(y, norm, out.data() + size_t(r) * f.key_bytes());
    }
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * kRows);
}

}  // namespace

#define TQ_PRESET_BENCH(fn)                                           \
  BENCHMARK_CAPTURE(fn, turboquant_k8v4, "turboquant_k8v4");          \
  BENCHMARK_CAPTURE(fn, turboquant_4bit_nc, "turboquant_4bit_nc");    \
  BENCHMARK_CAPTURE(fn, turboquant_k3v4_nc, "turboquant_k3v4_nc");    \
  BENCHMARK_CAPTURE(fn, turboquant_3bit_nc, "turboquant_3bit_nc");    \
  BENCHMARK_CAPTURE(fn, turbo3, "turbo3");                            \
  BENCHMARK_CAPTURE(fn, turbo4, "turbo4")

TQ_PRESET_BENCH(BM_encode_keys);
BENCHMARK(BM_encode_keys_gemm_rotation);
TQ_PRESET_BENCH(BM_encode_values);
TQ_PRESET_BENCH(BM_decode_keys);
TQ_PRESET_BENCH(BM_score_keys);
BENCHMARK_MAIN();

// Prefill throughput of the CPU forward passes: tokens/s at n_ctx 512 for each
// fetched model (SmolLM2, Gemma 3, Qwen2.5-Coder 0.5B and 1.5B), without logits
// and with logits for the second half of the window (what perplexity scoring
// computes), f16 KV store. Where the CPU has AVX-512 both matrix-product
// kernels run, alternating, and the AVX-512 kernel's speed-up over the AVX2 one
// is printed.
// Run: build/tests/bench_prefill [--ctx N] [--reps N] [--threads N] [--models a,b,...]
//      [--gemm both|avx512|avx2]  (the matrix-product kernels to time; both: where the CPU has AVX-512)
// Needs the fetched models (data/fetch_models.sh); a plain main, no Google Benchmark.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tq/error.h"
#include "tq/kv_store_basic.h"
#include "tq/model.h"
#include "tq/paths.h"
#include "../../lib/src/model/gemm.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void bench(const std::string& name, int ctx, int reps, int threads, const std::string& kernels) {
  const std::string path = tq::default_model_path(name);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::printf("%-8s not present (%s): run data/fetch_models.sh\n", name.c_str(), path.c_str());
    return;
  }
  const double t0 = now_s();
  const tq::Model m = tq::Model::load(path, false);
  const double load = now_s() - t0;
  // Deterministic pseudo-text: a token sequence cycling through the vocabulary.
  std::vector<int32_t> tokens(static_cast<size_t>(ctx));
  for (int i = 0; i < ctx; ++i) tokens[size_t(i)] = int32_t((1000 + 7919 * i) % m.config().n_vocab);
  tq::F16Store f16;
  tq::ForwardOptions opt;
  opt.n_threads = threads;
  // The matrix-product kernels this CPU has (AVX-512 and the AVX2 kernel it
  // replaces give the same bits), timed in alternation in the same run.
  std::vector<bool> force_avx2;
  const bool has512 = std::string(tq::detail::gemm_packed_path()) == "avx512";
  if (kernels != "avx2" && has512) force_avx2.push_back(false);
  if (kernels != "avx512" || !has512) force_avx2.push_back(true);
  for (const bool with_logits : {false, true}) {
    std::vector<std::vector<double>> times(force_avx2.size());
    for (int r = 0; r < reps; ++r) {
      for (size_t k = 0; k < force_avx2.size(); ++k) {
        tq::detail::gemm_force_avx2(force_avx2[k]);
        const double s = now_s();
        const auto logits = m.forward(tokens, &f16, with_logits ? ctx / 2 : ctx, nullptr, opt);
        times[k].push_back(now_s() - s);
      }
    }
    tq::detail::gemm_force_avx2(false);
    double first = 0;
    for (size_t k = 0; k < force_avx2.size(); ++k) {
      std::sort(times[k].begin(), times[k].end());
      const double med = times[k][times[k].size() / 2];
      if (k == 0) first = med;
      tq::detail::gemm_force_avx2(force_avx2[k]);
      std::printf("%-8s ctx %d %-22s %-9s %8.1f tokens/s  (median of %d: %.3f s; load %.2f s)", name.c_str(), ctx,
                  with_logits ? "+ logits 2nd half" : "prefill, no logits", tq::detail::gemm_packed_path(), ctx / med,
                  reps, med, load);
      if (k > 0) std::printf("  %s is %.2fx this", force_avx2[0] ? "avx2-fma" : "avx512", med / first);
      std::printf("\n");
    }
    tq::detail::gemm_force_avx2(false);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int ctx = 512, reps = 3, threads = 0;
  std::string models = "smollm2,gemma3,qwen0.5b,qwen1.5b", kernels = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--models")) models = argv[i + 1];
    else if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--gemm")) kernels = argv[i + 1];
    else ctx = -1;  // unknown option: print the usage
  }
  if (ctx < 2 || reps < 1 || argc % 2 == 0 || (kernels != "both" && kernels != "avx512" && kernels != "avx2")) {
    std::fprintf(stderr,
                 "usage: bench_prefill [--ctx N>=2] [--reps N>=1] [--threads N] [--models a,b,...] "
                 "[--gemm both|avx512|avx2]\n");
    return 2;
  }
  try {
    size_t pos = 0;
    while (pos <= models.size()) {
      const size_t comma = std::min(models.find(',', pos), models.size());
      if (comma > pos) bench(models.substr(pos, comma - pos), ctx, reps, threads, kernels);
      pos = comma + 1;
    }
  } catch (const tq::Error& e) {
    std::fprintf(stderr, "bench_prefill: error: %s\n", e.what());
    return 2;
  }
  return 0;
}

// Prefill throughput of the CPU forward passes: tokens/s at n_ctx 512 for each
// fetched model (SmolLM2, Gemma 3, Qwen2.5-Coder 0.5B and 1.5B), without logits
// and with logits for the second half of the window (what perplexity scoring
// computes), f16 KV store. The weight products run every way this CPU has,
// alternating in the same run: float32 on the AVX-512 kernel and on the AVX2
// kernel, and int8 (MatmulMode::int8: integer weight codes × int8 activations);
// each line after the first prints its speed-up over the first.
// Run: build/tests/bench_prefill [--ctx N] [--reps N] [--threads N] [--models a,b,...]
//      [--gemm both|avx512|avx2]  (the f32 kernels to time; both: where the CPU has AVX-512)
//      [--matmul both|f32|int8]   (the matmul modes to time)
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
#include "../../lib/src/model/gemm_int8.h"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One way to run the weight products: the model's matmul mode and, for f32,
// whether the AVX2 kernel is forced where the CPU has AVX-512.
struct Variant {
  tq::MatmulMode mode;
  bool force_avx2;
  std::string label() const {
    return mode == tq::MatmulMode::int8 ? std::string("int8-") + tq::detail::gemm_int8_path()
                                        : force_avx2 ? "f32-avx2-fma" : "f32-avx512";
  }
};

void bench(const std::string& name, int ctx, int reps, int threads, const std::string& kernels,
           const std::string& matmul) {
  const std::string path = tq::default_model_path(name);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::printf("%-8s not present (%s): run data/fetch_models.sh\n", name.c_str(), path.c_str());
    return;
  }
  // The variants timed in alternation in the same run: the f32 kernels this CPU
  // has (AVX-512 and the AVX2 kernel it replaces give the same bits), and the
  // int8 products (their own model: the weights are loaded as codes).
  std::vector<Variant> variants;
  const bool has512 = std::string(tq::detail::gemm_packed_path()) == "avx512";
  if (matmul != "int8") {
    if (kernels != "avx2" && has512) variants.push_back({tq::MatmulMode::f32, false});
    if (kernels != "avx512" || !has512) variants.push_back({tq::MatmulMode::f32, true});
  }
  if (matmul != "f32") variants.push_back({tq::MatmulMode::int8, false});
  std::vector<tq::Model> models;
  std::vector<double> load;
  for (const Variant& v : variants) {  // the f32 variants share one model and its load time
    if (v.mode == tq::MatmulMode::f32 && !models.empty()) {
      load.push_back(load.front());
      continue;
    }
    const double t0 = now_s();
    models.push_back(tq::Model::load(path, false, v.mode));
    load.push_back(now_s() - t0);
  }
  auto model_of = [&](size_t k) -> const tq::Model& {
    return variants[k].mode == tq::MatmulMode::int8 ? models.back() : models.front();
  };
  // Deterministic pseudo-text: a token sequence cycling through the vocabulary.
  const int n_vocab = models.front().config().n_vocab;
  std::vector<int32_t> tokens(static_cast<size_t>(ctx));
  for (int i = 0; i < ctx; ++i) tokens[size_t(i)] = int32_t((1000 + 7919 * i) % n_vocab);
  tq::F16Store f16;
  tq::ForwardOptions opt;
  opt.n_threads = threads;
  for (const bool with_logits : {false, true}) {
    std::vector<std::vector<double>> times(variants.size());
    for (int r = 0; r < reps; ++r) {
      for (size_t k = 0; k < variants.size(); ++k) {
        tq::detail::gemm_force_avx2(variants[k].force_avx2);
        const double s = now_s();
        const auto logits = model_of(k).forward(tokens, &f16, with_logits ? ctx / 2 : ctx, nullptr, opt);
        times[k].push_back(now_s() - s);
      }
    }
    tq::detail::gemm_force_avx2(false);
    double first = 0;
    for (size_t k = 0; k < variants.size(); ++k) {
      std::sort(times[k].begin(), times[k].end());
      const double med = times[k][times[k].size() / 2];
      if (k == 0) first = med;
      std::printf("%-8s ctx %d %-22s %-16s %8.1f tokens/s  (median of %d: %.3f s; load %.2f s)", name.c_str(), ctx,
                  with_logits ? "+ logits 2nd half" : "prefill, no logits", variants[k].label().c_str(), ctx / med,
                  reps, med, load[k]);
      if (k > 0) std::printf("  %.2fx %s", first / med, variants[0].label().c_str());
      std::printf("\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int ctx = 512, reps = 3, threads = 0;
  std::string models = "smollm2,gemma3,qwen0.5b,qwen1.5b", kernels = "both", matmul = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--models")) models = argv[i + 1];
    else if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--gemm")) kernels = argv[i + 1];
    else if (!std::strcmp(argv[i], "--matmul")) matmul = argv[i + 1];
    else ctx = -1;  // unknown option: print the usage
  }
  if (ctx < 2 || reps < 1 || argc % 2 == 0 || (kernels != "both" && kernels != "avx512" && kernels != "avx2") ||
      (matmul != "both" && matmul != "f32" && matmul != "int8")) {
    std::fprintf(stderr,
                 "usage: bench_prefill [--ctx N>=2] [--reps N>=1] [--threads N] [--models a,b,...] "
                 "[--gemm both|avx512|avx2] [--matmul both|f32|int8]\n");
    return 2;
  }
  try {
    size_t pos = 0;
    while (pos <= models.size()) {
      const size_t comma = std::min(models.find(',', pos), models.size());
      if (comma > pos) bench(models.substr(pos, comma - pos), ctx, reps, threads, kernels, matmul);
      pos = comma + 1;
    }
  } catch (const tq::Error& e) {
    std::fprintf(stderr, "bench_prefill: error: %s\n", e.what());
    return 2;
  }
  return 0;
}

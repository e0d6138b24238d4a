// Perplexity and KL divergence of a model whose KV cache goes through a
// format, by the llama.cpp `llama-perplexity` method (docs/models.md §7):
//
//  - tokenize the whole text (one trailing '\n' stripped; BOS as the model's
//    tokenizer adds it); at least 2·n_ctx tokens are needed;
//  - chunks of n_ctx tokens, each a fresh cache; if the model uses BOS it
//    overwrites the chunk's first token;
//  - score positions n_ctx/2 .. n_ctx−2, each predicting the next token:
//    nll = −log softmax(logits)[next], in double via log-sum-exp;
//  - PPL = exp(mean nll) ± PPL·σ, σ = sqrt((E[nll²] − E[nll]²)/(n − 1));
//  - against the base run (an fp16 cache): per token KLD = Σ p_base·(log p_base
//    − log p_test) over vocabulary entries with log p_base > −16; same top
//    token; Δp = p_test(next) − p_base(next). Means ± standard errors and the
//    percentiles max, 99.9, 99, 95, 90, median, 10, 5, 1, 0.1, min (linear
//    interpolation between order statistics at rank q·(n − 1)).
//
// Evaluation runs chunk by chunk: the base once, then every format, so memory
// holds one chunk of base logits. Fewer than 100 scored tokens are refused.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tq/json.h"
#include "tq/kv_store.h"

namespace tq {

class Model;

struct Percentiles {
  double max = 0, p99_9 = 0, p99 = 0, p95 = 0, p90 = 0, median = 0, p10 = 0, p5 = 0, p1 = 0, p0_1 = 0, min = 0;
  static Percentiles of(std::vector<double> values);  // throws tq::Error if empty
};
// {"max", "99.9%", "99%", "95%", "90%", "median", "10%", "5%", "1%", "0.1%", "min"}
void to_json(Json& j, const Percentiles& p);

struct FormatResult {
  std::string name;
  bool is_base = false;   // the reference run itself (no comparison fields)
  int64_t n_tokens = 0;   // scored tokens
  int n_chunks = 0;

  double nll_mean = 0, nll_err = 0;
  double ppl = 0, ppl_err = 0;

  // Against the base (zero for the base itself).
  double ln_ppl_ratio = 0, ln_ppl_ratio_err = 0;  // mean(nll − nll_base)
  double ppl_ratio = 0, ppl_ratio_err = 0;        // PPL / PPL_base
  double delta_ppl = 0, delta_ppl_err = 0;        // PPL − PPL_base
  double nll_correlation = 0;                     // corr(nll, nll_base) over tokens
  double kld_mean = 0, kld_err = 0;
  Percentiles kld;
  double same_top = 0, same_top_err = 0;          // fraction in [0, 1]
  double dp_mean = 0, dp_mean_err = 0, dp_rms = 0, dp_rms_err = 0;
  Percentiles dp;
};
// tq-eval --json: one object per format (the base without the comparison fields
// but delta_ppl, kld_mean, kld_err, same_top and dp_rms, which are exact for it).
void to_json(Json& j, const FormatResult& r);

// Per-token statistics of one format against the base, fed chunk by chunk.
class FormatAccumulator {
 public:
  FormatAccumulator(std::string name, bool is_base) : name_(std::move(name)), is_base_(is_base) {}
  // logits, base_logits: [rows, n_vocab] row-major (the same pointer for the
  // base itself); targets: the token each row predicts. NaN/inf logits throw.
  void add(const float* logits, const float* base_logits, const int32_t* targets, int64_t rows, int64_t n_vocab);
  void end_chunk() { ++chunks_; }
  int64_t n_tokens() const { return int64_t(nll_.size()); }
  FormatResult result() const;  // throws tq::Error below 100 tokens

  static constexpr int64_t kMinTokens = 100;
  static constexpr double kMinLogProb = -16.0;

 private:
  std::string name_;
  bool is_base_;
  int chunks_ = 0;
  std::vector<double> nll_, nll_base_, kld_, dp_;
  int64_t same_top_ = 0;
};

struct EvalOptions {
  int n_ctx = 512;
  int max_chunks = -1;  // −1: every full chunk of the text
  int n_threads = 0;    // forward pass threads (0: all)
  std::string base_name = "f16";  // label of the reference run in results
};

// (done chunks, total chunks), called after each chunk.
using EvalProgress = std::function<void(int, int)>;

// The token sequence evaluate_perplexity scores (exposed for tests and tools):
// the text with one trailing '\n' stripped, tokenized with the model's BOS rule.
std::vector<int32_t> perplexity_tokens(const Model& model, const std::string& text);

// Runs the base store and every format over the text's chunks. Returns the
// base result first, then one result per format in order. base may be nullptr
// (float32 cache) and so may a format's store.
std::vector<FormatResult> evaluate_perplexity(const Model& model, const std::string& text, KvStore* base,
                                              const std::vector<std::pair<std::string, KvStore*>>& formats,
                                              const EvalOptions& opt = {}, const EvalProgress& progress = {});

// Aligned plain-text report of results (base first), for people.
std::string perplexity_report(const std::vector<FormatResult>& results);

}  // namespace tq

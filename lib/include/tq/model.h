// CPU forward passes (float32) of the real models tqkit studies, loaded from
// GGUF (docs/models.md has the facts per architecture):
//
//  - arch "llama"  (SmolLM2-135M): RMSNorm → Q/K/V → RoPE NORM mode (adjacent
//    pairs) → GQA causal attention (scores · 1/√d) → Wo → residual; RMSNorm →
//    SwiGLU FFN → residual; tied output embedding.
//  - arch "gemma3" (Gemma 3 270M): embeddings · √n_embd; QK-norm; RoPE NEOX
//    mode (pairs i, i + d/2) with base rope.freq_base on global layers
//    (l % 6 == 5) and 10000 on sliding-window layers (window from
//    gemma3.attention.sliding_window: keys with i − j ≥ window are masked);
//    scores · 1/√head_dim (= query_pre_attn_scalar^−½ for 270M); post-attention
//    and post-FFN norms; GELU-tanh gated FFN.
//  - arch "qwen2" (Qwen2.5(-Coder) 0.5B/1.5B): as llama, plus F32 biases added
//    after the Q/K/V projections (before RoPE), RoPE NEOX mode, untied
//    output.weight; head_dim = n_embd / n_head when key_length is absent.
//
// Weights are dequantized to float32 at load (MatmulMode::f32, the default);
// MatmulMode::int8 keeps the integer codes of quantized weights and quantizes
// the activations to int8 for those products instead, as llama.cpp does on the
// CPU (faster; docs/models.md §10 gives its perplexity cost). Every forward runs positions
// 0..n−1 of a token sequence with a fresh cache (the llama-perplexity method);
// K/V go through a KvStore before attention reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "tq/kv_store.h"
#include "tq/tokenizer.h"

namespace tq {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The GGUF general.architecture values Model::load accepts.
inline constexpr const char* kSupportedArchitectures = "llama, gemma3, qwen2";

// How the weight products run: f32 — float32 weights and activations (exact up
// to float rounding; the reference); int8 — the GGUF's integer weight codes
// times activations quantized to int8 per group of 16 or 32 values (weights
// without integer codes, e.g. f16, stay float32; the token embedding always does).
enum class MatmulMode { f32, int8 };
const char* matmul_mode_name(MatmulMode m);  // "f32", "int8"

struct LayerConfig {
  float rope_theta = 10000.0f;
  int sliding_window = 0;   // 0 = global attention
  float attn_scale = 1.0f;  // multiplier applied to q·k
};

struct ModelConfig {
  std::string arch;  // one of kSupportedArchitectures
  std::string name;  // general.name
  std::string path;
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_embd = 0, n_ff = 0, n_vocab = 0;
  int n_rot = 0;                  // rotated dimensions per head (rope.dimension_count)
  int n_ctx_train = 0;            // <arch>.context_length: the longest sequence trained on (0: unknown)
  float rms_eps = 1e-5f;
  float embd_scale = 1.0f;        // gemma3: √n_embd
  bool rope_neox = false;         // pairs (i, i + n_rot/2) instead of (2i, 2i+1)
  bool qk_norm = false, post_norms = false, gelu = false;
  bool qkv_bias = false;          // qwen2: biases added after the Q/K/V projections
  MatmulMode matmul = MatmulMode::f32;
  std::vector<LayerConfig> layers;

  std::string summary() const;  // multi-line, for the load log
};

// Receives each layer's attention inputs during a forward pass, before the
// KvStore round trip: q [n, n_heads, head_dim] post-RoPE (Gemma: post QK-norm,
// before the score scale), k [n, n_kv_heads, head_dim] post-RoPE, v [n,
// n_kv_heads, head_dim] as projected. Pointers are valid only during the call.
class LayerCapture {
 public:
  virtual ~LayerCapture() = default;
  virtual void capture(int layer, int64_t n, const float* q, const float* k, const float* v) = 0;
};

struct ForwardOptions {
  bool disable_sliding_window = false;  // testing: treat every layer as global
  int n_threads = 0;                    // 0: all hardware threads
};

class Model {
 public:
  // Loads and dequantizes a GGUF model. verbose: print the configuration read
  // from the file and the tensor-type histogram to stderr.
  static Model load(const std::string& path, bool verbose = true, MatmulMode matmul = MatmulMode::f32);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  // What load printed (or would have printed with verbose): file, tensor-type
  // histogram, configuration.
  const std::string& load_log() const;

  // Runs positions 0..n−1 of `tokens` with a fresh cache. Attention reads K/V
  // through `store` (nullptr: float32, unchanged). Returns logits
  // [n − logits_from, n_vocab] for positions logits_from..n−1 (the vocabulary
  // projection is computed only for those rows; logits_from < 0 or == n: none).
  // capture may be nullptr.
  RowMatrix forward(const std::vector<int32_t>& tokens, KvStore* store, int64_t logits_from,
                    LayerCapture* capture = nullptr, const ForwardOptions& opt = {}) const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq

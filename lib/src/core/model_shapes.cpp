#include "tq/model_shapes.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "tq/error.h"

namespace tq {

namespace {

// From each model's config.json (num_attention_heads, num_key_value_heads, head_dim — which
// Gemma 2/3, Mistral-Nemo, Qwen3-32B and GLM-4.5 set explicitly: not hidden_size / heads —,
// num_hidden_layers) or, for Llama 3.1 and Gemma, the vendors' own model code (meta-llama's
// llama-models sku_list.py; google's gemma_pytorch config.py and google-deepmind's gemma
// _gemma.py). Sliding windows: Gemma 2 alternates local (4096) and global layers, Gemma 3
// has five local (1024; 270m: 512) per global layer, Phi-3-mini-4k windows every layer at
// 2047; Qwen's configs carry a window that use_sliding_window = false switches off.
constexpr std::array kShapes = {
    ModelShape{"llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 8, 128, 32},
    ModelShape{"llama-3.1-70b", "meta-llama/Llama-3.1-70B", 64, 8, 128, 80},
    ModelShape{"llama-3.1-405b", "meta-llama/Llama-3.1-405B", 128, 8, 128, 126},
    // multi-head attention (one kv head per query head), as in much of the KV-cache literature
    ModelShape{"llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 32, 128, 32},
    ModelShape{"llama-2-13b", "meta-llama/Llama-2-13b-hf", 40, 40, 128, 40},
    ModelShape{"mistral-7b-v0.3", "mistralai/Mistral-7B-v0.3", 32, 8, 128, 32},
    ModelShape{"mistral-nemo-12b", "mistralai/Mistral-Nemo-Instruct-2407", 32, 8, 128, 40},
    ModelShape{"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 8, 128, 32},
    ModelShape{"mistral-large-2", "mistralai/Mistral-Large-Instruct-2407", 96, 8, 128, 88},  // G = 12
    ModelShape{"qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B-Instruct", 12, 2, 128, 28},
    ModelShape{"qwen2.5-3b", "Qwen/Qwen2.5-3B-Instruct", 16, 2, 128, 36},
    ModelShape{"qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", 28, 4, 128, 28},
    ModelShape{"qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct", 64, 8, 128, 80},
    ModelShape{"qwen3-8b", "Qwen/Qwen3-8B", 32, 8, 128, 36},
    ModelShape{"qwen3-32b", "Qwen/Qwen3-32B", 64, 8, 128, 64},
    ModelShape{"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 64, 4, 128, 94},  // MoE: attention as a dense model's
    ModelShape{"qwen3-coder-480b-a35b", "Qwen/Qwen3-Coder-480B-A35B-Instruct", 96, 8, 128, 62},  // MoE, G = 12
    // MoE, G = 12; head_dim 128 set explicitly (hidden_size 5120 / 96 heads is not 128)
    ModelShape{"glm-4.5", "zai-org/GLM-4.5", 96, 8, 128, 92},
    ModelShape{"yi-34b", "01-ai/Yi-34B", 56, 8, 128, 60},
    ModelShape{"phi-4", "microsoft/phi-4", 40, 10, 128, 40},
    ModelShape{"phi-3-mini-4k", "microsoft/Phi-3-mini-4k-instruct", 32, 32, 96, 32, 32, 2047},
    ModelShape{"gemma-2-9b", "google/gemma-2-9b", 16, 8, 256, 42, 21, 4096},
    ModelShape{"gemma-2-27b", "google/gemma-2-27b", 32, 16, 128, 46, 23, 4096},
    ModelShape{"gemma-3-4b", "google/gemma-3-4b-pt", 8, 4, 256, 34, 29, 1024},
    ModelShape{"gemma-3-12b", "google/gemma-3-12b-pt", 16, 8, 256, 48, 40, 1024},
    ModelShape{"gemma-3-27b", "google/gemma-3-27b-pt", 32, 16, 128, 62, 52, 1024},
    // the two models tqkit runs itself (tq-dump, tq-eval)
    ModelShape{"smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct", 9, 3, 64, 30},
    ModelShape{"gemma-3-270m", "google/gemma-3-270m", 4, 1, 256, 18, 15, 512},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::span<const ModelShape> model_shapes() { return kShapes; }

const ModelShape& find_model_shape(std::string_view name) {
  const std::string key = lower(name);
  for (const ModelShape& m : kShapes)
    if (m.name == key) return m;
  std::string known;
  for (const ModelShape& m : kShapes) known += (known.empty() ? "" : ", ") + std::string(m.name);
  throw Error(fmt::format("unknown model '{}' (known: {})", name, known));
}

int64_t cached_tokens_all_layers(const ModelShape& m, int64_t n_tokens) {
  const int64_t windowed = m.sliding_layers > 0 ? std::min<int64_t>(n_tokens, m.window) : n_tokens;
  return int64_t(m.layers - m.sliding_layers) * n_tokens + int64_t(m.sliding_layers) * windowed;
}

std::string describe(const ModelShape& m) {
  std::string s = fmt::format("q {} / kv {} heads, head_dim {}, {} layers", m.q_heads, m.kv_heads, m.head_dim, m.layers);
  if (m.sliding_layers == m.layers) s += fmt::format(", all with a {}-token window", m.window);
  else if (m.sliding_layers > 0) s += fmt::format(", {} with a {}-token window", m.sliding_layers, m.window);
  return s;
}

}  // namespace tq

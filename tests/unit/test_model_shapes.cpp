// tq-bench --model's table: lookups and the KV-cache token count (hand-computed oracles).
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "tq/error.h"
#include "tq/model_shapes.h"

TEST_CASE("model shapes: lookup by name, case-insensitive; unknown names list the known ones", "[models]") {
  const tq::ModelShape& m = tq::find_model_shape("Llama-3.1-70B");
  CHECK(m.name == "llama-3.1-70b");
  CHECK(m.q_heads == 64);
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.layers == 80);
  REQUIRE_THROWS_WITH(tq::find_model_shape("llama-9"), Catch::Matchers::Contains("unknown model 'llama-9'") &&
                                                           Catch::Matchers::Contains("gemma-3-27b"));
}

TEST_CASE("model shapes: every entry is a valid attention shape with a unique name", "[models]") {
  std::set<std::string> names;
  for (const tq::ModelShape& m : tq::model_shapes()) {
    INFO(m.name);
    CHECK(names.insert(std::string(m.name)).second);
    CHECK(m.q_heads % m.kv_heads == 0);
    CHECK(m.layers > 0);
    CHECK(m.sliding_layers >= 0);
    CHECK(m.sliding_layers <= m.layers);
    CHECK((m.sliding_layers == 0) == (m.window == 0));
  }
  CHECK(names.size() >= 28);
}

TEST_CASE("model shapes: cached tokens over all layers keep each window", "[models]") {
  // Gemma 3 27B: 62 layers, 52 with a 1024-token window.
  const tq::ModelShape& g = tq::find_model_shape("gemma-3-27b");
  CHECK(tq::cached_tokens_all_layers(g, 32768) == 10 * 32768 + 52 * 1024);
  CHECK(tq::cached_tokens_all_layers(g, 1000) == 62 * 1000);  // shorter than the window
  CHECK(tq::cached_tokens_all_layers(g, 1024) == 62 * 1024);
  // Phi-3-mini-4k: every layer windowed (2047)
  CHECK(tq::cached_tokens_all_layers(tq::find_model_shape("phi-3-mini-4k"), 4096) == 32 * 2047);
  // no window: layers × tokens
  CHECK(tq::cached_tokens_all_layers(tq::find_model_shape("qwen2.5-7b"), 32768) == 28LL * 32768);
  // Qwen 2.5 3B (Qwen2.5 technical report, table 1): 36 layers, 16 query / 2 kv heads of 128
  const tq::ModelShape& q3 = tq::find_model_shape("qwen2.5-3b");
  CHECK(tq::cached_tokens_all_layers(q3, 4096) == 36LL * 4096);
  CHECK(tq::describe(q3) == "q 16 / kv 2 heads, head_dim 128, 36 layers");
  CHECK(tq::describe(g) == "q 32 / kv 16 heads, head_dim 128, 62 layers, 52 with a 1024-token window");
  // Llama 2 13B (config.json: hidden_size 5120 over 40 attention heads, 40 layers; as many kv
  // heads as query heads)
  const tq::ModelShape& l2 = tq::find_model_shape("llama-2-13b");
  CHECK(tq::describe(l2) == "q 40 / kv 40 heads, head_dim 128, 40 layers");
  CHECK(tq::cached_tokens_all_layers(l2, 4096) == 40LL * 4096);
  // Qwen3-235B-A22B (model card: 94 layers, 64 query / 4 kv heads; config.json head_dim 128): G = 16
  CHECK(tq::describe(tq::find_model_shape("qwen3-235b-a22b")) == "q 64 / kv 4 heads, head_dim 128, 94 layers");
  // G = 12 (config.json): Mistral Large 2 (hidden_size 12288 over 96 heads, 88 layers), GLM-4.5
  // (head_dim 128 given explicitly: hidden_size 5120 / 96 would be 53), Qwen3-Coder-480B
  CHECK(tq::describe(tq::find_model_shape("mistral-large-2")) == "q 96 / kv 8 heads, head_dim 128, 88 layers");
  CHECK(tq::describe(tq::find_model_shape("glm-4.5")) == "q 96 / kv 8 heads, head_dim 128, 92 layers");
  CHECK(tq::describe(tq::find_model_shape("qwen3-coder-480b-a35b")) == "q 96 / kv 8 heads, head_dim 128, 62 layers");
  CHECK(tq::cached_tokens_all_layers(tq::find_model_shape("mistral-large-2"), 32768) == 88LL * 32768);
}

// Cache paths resolve as data/fetch_models.sh and data/fetch_text.sh do.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "tq/paths.h"

TEST_CASE("paths: ${TQ_CACHE:-$HOME/.cache/tqkit}", "[paths]") {
  const char* old_cache = std::getenv("TQ_CACHE");
  const std::string saved = old_cache ? old_cache : "";
  ::setenv("TQ_CACHE", "/tmp/tqc", 1);
  CHECK(tq::cache_dir() == "/tmp/tqc");
  CHECK(tq::default_model_path("smollm2") == "/tmp/tqc/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  CHECK(tq::default_model_path("gemma3") == "/tmp/tqc/models/gemma-3-270m-q4_k_m.gguf");
  CHECK(tq::default_model_path("x.gguf") == "/tmp/tqc/models/x.gguf");
  CHECK(tq::default_text_path() == "/tmp/tqc/text/jargon-part1.txt");
  ::setenv("TQ_CACHE", "", 1);  // empty counts as unset
  const char* home = std::getenv("HOME");
  if (home) CHECK(tq::cache_dir() == std::string(home) + "/.cache/tqkit");
  if (old_cache) ::setenv("TQ_CACHE", saved.c_str(), 1);
  else ::unsetenv("TQ_CACHE");
}

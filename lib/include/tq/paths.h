// Where the fetched real-model files live. Resolution is identical to
// data/fetch_models.sh and data/fetch_text.sh: ${TQ_CACHE:-$HOME/.cache/tqkit}.
#pragma once

#include <string>

namespace tq {

// The GGUF files data/fetch_models.sh installs.
inline constexpr const char* kSmolLM2File = "SmolLM2-135M-Instruct.Q4_1.gguf";
inline constexpr const char* kGemma3File = "gemma-3-270m-q4_k_m.gguf";

// $TQ_CACHE if set and non-empty, else $HOME/.cache/tqkit (throws tq::Error if neither is set).
std::string cache_dir();

// <cache>/models/<name>. `name` is a file name, or the alias "smollm2" / "gemma3".
std::string default_model_path(const std::string& name);

// <cache>/text/jargon-part1.txt, the evaluation corpus of data/fetch_text.sh.
std::string default_text_path();

}  // namespace tq

// Where the fetched real-model files live. Resolution is identical to
// data/fetch_models.sh and data/fetch_text.sh: ${TQ_CACHE:-$HOME/.cache/tqkit}.
#pragma once

#include <string>

namespace tq {

// The GGUF files data/fetch_models.sh installs.
inline constexpr const char* kSmolLM2File = "SmolLM2-135M-Instruct.Q4_1.gguf";
inline constexpr const char* kGemma3File = "gemma-3-270m-q4_k_m.gguf";
inline constexpr const char* kQwen05File = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
inline constexpr const char* kQwen15File = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

// $TQ_CACHE if set and non-empty, else $HOME/.cache/tqkit (throws tq::Error if neither is set).
std::string cache_dir();

// <cache>/models/<name>. `name` is a file name, or one of the aliases
// data/fetch_models.sh uses: "smollm2", "gemma3", "qwen0.5b", "qwen1.5b".
std::string default_model_path(const std::string& name);

// A --model argument: one of the aliases above resolves to its cached file;
// anything else is taken as a path.
std::string resolve_model_arg(const std::string& arg);

// <cache>/text/jargon-part1.txt, the evaluation corpus of data/fetch_text.sh.
std::string default_text_path();

// <cache>/text/jargon-lexicon.txt, the long corpus of data/fetch_text.sh
// (long-context perplexity, passkey haystacks).
std::string long_text_path();

}  // namespace tq

#include "tq/paths.h"

#include <cstdlib>

#include "tq/error.h"

namespace tq {

std::string cache_dir() {
  if (const char* c = std::getenv("TQ_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  TQ_CHECK(home && *home, "cannot locate the tqkit cache: neither TQ_CACHE nor HOME is set");
  return std::string(home) + "/.cache/tqkit";
}

std::string default_model_path(const std::string& name) {
  TQ_CHECK(!name.empty(), "default_model_path: empty model name");
  std::string file = name;
  if (name == "smollm2") file = kSmolLM2File;
  else if (name == "gemma3") file = kGemma3File;
  else if (name == "qwen0.5b") file = kQwen05File;
  else if (name == "qwen1.5b") file = kQwen15File;
  return cache_dir() + "/models/" + file;
}

std::string resolve_model_arg(const std::string& arg) {
  for (const char* alias : {"smollm2", "gemma3", "qwen0.5b", "qwen1.5b"})
    if (arg == alias) return default_model_path(arg);
  return arg;
}

std::string default_text_path() { return cache_dir() + "/text/jargon-part1.txt"; }

std::string long_text_path() { return cache_dir() + "/text/jargon-lexicon.txt"; }

}  // namespace tq

// Locating the real model files for the model tests. A missing file is a test
// failure with instructions (not a skip): run data/fetch_models.sh. Tests that
// need Gemma are skipped only when TQ_NO_GEMMA is set in the environment.
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "tq/paths.h"

namespace tqtest {

inline bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Path of a fetched model; FAILs the test when it is missing.
inline std::string require_model(const std::string& name) {
  const std::string p = tq::default_model_path(name);
  if (!file_exists(p)) FAIL(p << " is missing: run data/fetch_models.sh (set TQ_CACHE to use another cache)");
  return p;
}

inline std::string require_text() {
  const std::string p = tq::default_text_path();
  if (!file_exists(p)) FAIL(p << " is missing: run data/fetch_text.sh");
  return p;
}

inline bool gemma_disabled() {
  const char* e = std::getenv("TQ_NO_GEMMA");
  return e && *e;
}

}  // namespace tqtest

// Skips the rest of a Gemma test case when TQ_NO_GEMMA is set.
#define TQ_REQUIRE_GEMMA()                                           \
  do {                                                               \
    if (tqtest::gemma_disabled()) {                                  \
      WARN("TQ_NO_GEMMA is set: Gemma test skipped");                \
      return;                                                        \
    }                                                                \
  } while (0)

// tq::Error — the one exception type for caller mistakes and bad input.
//
// Two kinds of failure (as faiss/impl/FaissAssert.h): invalid input (a file,
// a flag, a shape, a NaN) throws tq::Error whose message names what was wrong
// and where; broken internal invariants abort via TQ_ASSERT.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tq {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws tq::Error with a formatted message: TQ_THROW("{}: head_dim {} is not ...", where, d)
#define TQ_THROW(...) throw ::tq::Error(::fmt::format(__VA_ARGS__))

// Caller-facing check: throws tq::Error with the formatted message.
#define TQ_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) TQ_THROW(__VA_ARGS__);     \
  } while (0)

// Internal invariant: aborts with file and line (a bug in tqkit, not the input).
#define TQ_ASSERT(cond)                                                              \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "tqkit internal error: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

}  // namespace tq

// tq::Error — the one exception type for caller mistakes and bad input.
//
// Two kinds of failure (as faiss/impl/FaissAssert.h): invalid input (a file,
// a flag, a shape, a NaN) throws tq::Error whose message names what was wrong
// and where; broken internal invariants abort via TQ_ASSERT.
//
// An Error also records the source location it was constructed at (the throw
// site of TQ_THROW / TQ_CHECK / `throw tq::Error(...)`): where() gives
// "file:line", which the tools print under --verbose. The message itself
// never contains it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <version>
#ifdef __cpp_lib_source_location
#include <source_location>
#endif

#include <fmt/format.h>

namespace tq {

#ifdef __cpp_lib_source_location
using SourceLocation = std::source_location;
#else
// The same, for a standard library that lacks it on this compiler (clang 14
// with libstdc++ 12: the fuzzer build in tests/CMakeLists.txt).
class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) noexcept {
    return SourceLocation(file, line);
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr unsigned line() const noexcept { return line_; }

 private:
  constexpr SourceLocation(const char* file, unsigned line) : file_(file), line_(line) {}
  const char* file_;
  unsigned line_;
};
#endif

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, SourceLocation loc = SourceLocation::current())
      : std::runtime_error(what), loc_(loc) {}
  // Where the error was raised (pass it on when re-throwing with a new message).
  const SourceLocation& location() const { return loc_; }
  // "file:line" of the throw site.
  std::string where() const { return std::string(loc_.file_name()) + ":" + std::to_string(loc_.line()); }

 private:
  SourceLocation loc_;
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

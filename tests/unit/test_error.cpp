// tq::Error records its throw site (what the tools print under --verbose);
// the message itself is unchanged.
#include <catch2/catch.hpp>

#include <string>

#include "tq/error.h"
#include "tq/format.h"

using namespace tq;

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

TEST_CASE("errors: where() is the file and line of TQ_THROW / TQ_CHECK / throw Error", "[error]") {
  int line = 0;
  try {
    line = __LINE__ + 1;
    TQ_THROW("bad {} {}", "value", 3);
  } catch (const Error& e) {
    REQUIRE(std::string(e.what()) == "bad value 3");
    REQUIRE(ends_with(e.where(), "test_error.cpp:" + std::to_string(line)));
  }
  try {
    line = __LINE__ + 1;
    TQ_CHECK(1 + 1 == 3, "arithmetic {}", "broke");
  } catch (const Error& e) {
    REQUIRE(std::string(e.what()) == "arithmetic broke");
    REQUIRE(ends_with(e.where(), "test_error.cpp:" + std::to_string(line)));
  }
  try {
    line = __LINE__ + 1;
    throw Error("plain");
  } catch (const Error& e) {
    REQUIRE(ends_with(e.where(), "test_error.cpp:" + std::to_string(line)));
  }
}

TEST_CASE("errors: a message re-thrown with context keeps the original throw site", "[error]") {
  try {
    make_format("k=mse9", 64);  // the codec's check throws; make_format adds the format's name
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE(std::string(e.what()) == "format 'k=mse9' at head_dim 64: codec 'mse9': bits must be a digit 1..8");
    REQUIRE(e.where().find("registry.cpp:") != std::string::npos);
  }
}

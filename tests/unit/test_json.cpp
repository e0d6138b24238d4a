// tq::Json (nlohmann::ordered_json) on the tools' path: a value serialised
// with to_json, written by dump_json and read back by parse_json.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "tq/error.h"
#include "tq/json.h"
#include "tq/passkey.h"
#include "tq/perplexity.h"

using namespace tq;

namespace {
Json round_trip(const Json& j, int indent) { return parse_json(dump_json(j, indent), "round trip"); }
}  // namespace

TEST_CASE("json: 64-bit integers round-trip exactly", "[json]") {
  constexpr int64_t big = (int64_t(1) << 53) + 1;  // the first integer a double cannot hold
  REQUIRE(int64_t(double(big)) == big - 1);         // as a double it is 2^53
  for (const int indent : {-1, 2}) {
    const Json back = round_trip(Json{{"big", big}, {"neg", -big}, {"min", std::numeric_limits<int64_t>::min()},
                                      {"max", std::numeric_limits<int64_t>::max()},
                                      {"umax", std::numeric_limits<uint64_t>::max()}},
                                 indent);
    CHECK(back.at("big").is_number_integer());
    CHECK(back.at("big").get<int64_t>() == big);
    CHECK(back.at("neg").get<int64_t>() == -big);
    CHECK(back.at("min").get<int64_t>() == std::numeric_limits<int64_t>::min());
    CHECK(back.at("max").get<int64_t>() == std::numeric_limits<int64_t>::max());
    CHECK(back.at("umax").get<uint64_t>() == std::numeric_limits<uint64_t>::max());
  }
  CHECK(dump_json(Json(big)) == "9007199254740993");

  // Through a result struct's to_json, as tq-eval writes it.
  PasskeyTrial t;
  t.length = 1024;
  t.depth = 0.5;
  t.key = "12345";
  t.needle_token = big;
  t.text_offset = big + 2;
  const Json back = round_trip(Json(t), 2);
  CHECK(back.at("needle_token").get<int64_t>() == big);
  CHECK(back.at("text_offset").get<int64_t>() == big + 2);
  CHECK(back.at("length").is_number_integer());
  CHECK(back.at("depth").get<double>() == 0.5);
  CHECK(back.at("key").get<std::string>() == "12345");
}

TEST_CASE("json: doubles print shortest round-trip, non-finite as null", "[json]") {
  CHECK(dump_json(Json(0.1)) == "0.1");
  CHECK(dump_json(Json(1.0)) == "1.0");  // a double stays a double
  CHECK(dump_json(Json(1e-300)) == "1e-300");
  for (const double x : {0.1, 1.0 / 3.0, 2.0 / 3.0, 1e300, 5e-324, -123456.789e-7, 0.009500213, 6.02214076e23}) {
    const Json back = round_trip(Json{{"x", x}}, -1);
    CHECK(back.at("x").get<double>() == x);
  }
  CHECK(dump_json(Json{{"nan", std::nan("")}, {"inf", HUGE_VAL}}) == R"({"nan":null,"inf":null})");
}

TEST_CASE("json: objects keep insertion order", "[json]") {
  Json j;
  j["zeta"] = 1;
  j["alpha"] = 2;
  j["mid"] = Json::array({1, 2});
  CHECK(dump_json(j) == R"({"zeta":1,"alpha":2,"mid":[1,2]})");
  Percentiles p;
  p.max = 9;
  CHECK(Json(p).begin().key() == "max");
  CHECK(Json(p).back() == 0.0);  // "min"
}

TEST_CASE("json: parse errors are tq::Error naming the input and the byte", "[json]") {
  REQUIRE_THROWS_AS(parse_json("[1,,2]", "vectors.json"), Error);
  REQUIRE_THROWS_WITH(parse_json("[1,,2]", "vectors.json"),
                      Catch::StartsWith("vectors.json: invalid JSON at byte 3: ") && Catch::Contains("unexpected ','"));
  REQUIRE_THROWS_WITH(parse_json("{\"a\": 1} x", "f.json"), Catch::StartsWith("f.json: invalid JSON at byte 9"));
  REQUIRE_THROWS_WITH(parse_json("", "empty.json"), Catch::StartsWith("empty.json: invalid JSON at byte 0"));
  REQUIRE_THROWS_WITH(parse_json("{\"a\": tru}"), Catch::StartsWith("json: invalid JSON"));
  REQUIRE_THROWS_WITH(read_text_file("/nonexistent/x.json"), Catch::Contains("/nonexistent/x.json"));
}

TEST_CASE("json: strings that are not UTF-8 are written, not thrown on", "[json]") {
  // A greedy passkey answer can end inside a multi-byte character (one token of it).
  const Json j = {{"greedy", std::string("ab\xe2\x82")}};
  std::string s;
  REQUIRE_NOTHROW(s = dump_json(j));
  CHECK(s == "{\"greedy\":\"ab\xef\xbf\xbd\"}");  // U+FFFD
  CHECK(parse_json(s).at("greedy").get<std::string>() == "ab\xef\xbf\xbd");
  CHECK(dump_json(Json("tab\there \"q\" \x01")) == R"("tab\there \"q\" \u0001")");
  CHECK(parse_json(R"("\u00e9\u20ac")").get<std::string>() == "\xc3\xa9\xe2\x82\xac");
}

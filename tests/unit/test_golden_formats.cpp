// Regression guard: bytes of every registered format (and the research codecs)
// on a fixed input, against tests/data/golden_formats.txt. The vLLM presets are
// also checked against vLLM's own bytes (test_vllm_vectors.cpp); this file
// guards the rest. Regenerate deliberately with TQ_UPDATE_GOLDEN=1 after an
// intended layout change, and say so in the commit.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "tq/format.h"
#include "tq/rng.h"

using namespace tq;

namespace {
uint64_t fnv1a(const std::vector<uint8_t>& b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t c : b) { h ^= c; h *= 0x100000001b3ull; }
  return h;
}
}  // namespace

TEST_CASE("golden bytes of every format", "[formats][golden]") {
  std::vector<std::string> names;
  for (const auto& e : registered_formats()) names.push_back(e.name);
  for (const char* s : {"k=prod3,v=u4", "k=mse3,v=mse3,rot=haar:1", "k=mse4+fold,v=u2,rot=rht:7", "k=prod2,qjl=srht:3",
                        "k=prod4,qjl=haar:2", "turboquant_4bit_nc,cb=gauss", "k=mse2,cb=sphere"})
    names.push_back(s);
  std::map<std::string, std::string> got;
  for (int d : {64, 128, 256}) {
    Rng r(2024);
    const int n = 64;
    std::vector<float> k(size_t(n) * d), v(size_t(n) * d);
    for (auto& x : k) x = float(r.gaussian() * 2.0);
    for (auto& x : v) x = float(r.gaussian() * 0.5);
    for (const auto& name : names) {
      const KvFormat f = make_format(name, d);
      const auto kb = f.key->encode(k), vb = f.value->encode(v);
      got[fmt::format("{} d={}", name, d)] = fmt::format("{:016x} {:016x}", fnv1a(kb), fnv1a(vb));
    }
  }
  const std::string path = std::string(TQ_TEST_DATA) + "/golden_formats.txt";
  if (std::getenv("TQ_UPDATE_GOLDEN")) {
    std::ofstream out(path);
    for (const auto& [k, v] : got) out << k << '\t' << v << '\n';
    WARN("rewrote " << path);
    return;
  }
  std::ifstream in(path);
  REQUIRE(in.good());
  std::map<std::string, std::string> want;
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    want[line.substr(0, tab)] = line.substr(tab + 1);
  }
  REQUIRE(want.size() == got.size());
  for (const auto& [k, v] : got) {
    INFO(k);
    REQUIRE(want[k] == v);
  }
}

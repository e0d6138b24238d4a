// A whole tq-ablate run through the library (plan_ablation / run_ablation) on
// the small real dump in tests/data/kv, and the codebook override of
// make_format that the codebook study's empirical tables go through.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "tq/ablation_run.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/rng.h"
#include "tq/scalar_codebook.h"

using namespace tq;

namespace {

AblationConfig small_config() {
  AblationConfig c;
  c.dumps = {std::string(TQ_TEST_DATA) + "/kv/smollm2_256.h5"};  // head_dim 64, 3 KV heads, layers 0 and 18
  c.formats = {"q8_0"};
  c.studies = {"codebook"};
  c.topk = 4;
  return c;
}

}  // namespace

TEST_CASE("ablation run: same rows on 1 and 3 threads, every format sized, empirical tables fitted", "[ablation]") {
  AblationConfig c = small_config();
  c.threads = 1;
  const AblationResults one = run_ablation(c);
  c.threads = 3;
  int64_t last = 0, calls = 0;
  const AblationResults three = run_ablation(c, [&](int64_t done, int64_t total) {
    REQUIRE(total == 2);
    REQUIRE(done == last + 1);
    last = done;
    ++calls;
  });
  REQUIRE(calls == 2);
  // q8_0 + {mse3, mse4} × {gauss, sphere, empirical}, 2 layers, 3 KV heads.
  REQUIRE(one.formats.size() == 7);
  REQUIRE(one.rows.size() == 7 * 2 * 3);
  REQUIRE(three.rows.size() == one.rows.size());
  for (size_t i = 0; i < one.rows.size(); ++i) REQUIRE(metrics_csv_row(one.rows[i]) == metrics_csv_row(three.rows[i]));
  for (const auto& f : one.formats) {
    REQUIRE(f.slot_bytes > 0);
    REQUIRE(f.head_dim == 64);
  }
  // The empirical rows used their own table: their key error differs from the Gaussian table's.
  auto key_nmse = [&](const std::string& name) {
    for (const auto& r : one.rows)
      if (r.format == name && r.layer == 18 && r.kv_head == 0) return r.key_nmse;
    FAIL("no row for " << name);
    return 0.0;
  };
  REQUIRE(key_nmse("k=mse3+nc,cb=empirical") != key_nmse("k=mse3+nc,cb=gauss"));
  REQUIRE(three.threads == 3);
}

TEST_CASE("ablation run: bad input is refused by plan_ablation, by name", "[ablation]") {
  AblationConfig c = small_config();
  c.layers = std::string("5");
  REQUIRE_THROWS_WITH(plan_ablation(c), Catch::Contains("layer 5 is not in the dump"));
  c = small_config();
  c.formats = {"q9_9"};
  REQUIRE_THROWS_WITH(plan_ablation(c), Catch::Contains("unknown format 'q9_9'"));
  c = small_config();
  c.dumps.clear();
  REQUIRE_THROWS_AS(plan_ablation(c), Error);
  c = small_config();
  c.topk = 0;
  REQUIRE_THROWS_AS(plan_ablation(c), Error);
  c = small_config();
  c.layers = std::string("18");
  const AblationPlan plan = plan_ablation(c);
  REQUIRE(plan.total_layers() == 1);
  REQUIRE(plan.results.rows.empty());
}

TEST_CASE("formats: a codebook override replaces cb= for every mse/prod codec", "[formats]") {
  std::vector<std::pair<int, int>> asked;
  FormatOverrides over;
  over.codebook = [&](int d, int bits) {
    asked.emplace_back(d, bits);
    return get_scalar_codebook("sphere", d, bits);
  };
  const KvFormat a = make_format("k=mse3+nc,v=prod3,cb=empirical", 64, over);
  REQUIRE(asked == std::vector<std::pair<int, int>>{{64, 3}, {64, 2}});
  const KvFormat b = make_format("k=mse3+nc,v=prod3,cb=sphere", 64);
  Rng rng(7);
  std::vector<float> x(size_t(16) * 64);
  for (auto& v : x) v = float(rng.gaussian());
  REQUIRE(a.key->encode(x) == b.key->encode(x));
  REQUIRE(a.value->encode(x) == b.value->encode(x));
  // Without an override, cb=empirical (no file) is an unknown codebook.
  REQUIRE_THROWS_WITH(make_format("k=mse3,cb=empirical", 64), Catch::Contains("unknown distribution 'empirical'"));
}

TEST_CASE("codebooks: empirical_codebooks equals cb=empirical:FILE on the same samples", "[codebook]") {
  Rng rng(11);
  std::vector<double> samples(20000);
  for (auto& s : samples) s = rng.gaussian() / 8.0;
  const std::string path = fmt::format("/tmp/tq_test_empirical_{}.txt", ::getpid());
  {
    std::ofstream f(path);
    for (double s : samples) f << fmt::format("{:.17g}\n", s);
  }
  const auto from_file = get_scalar_codebook("empirical:" + path, 32, 3);
  std::remove(path.c_str());
  const CodebookSource src = empirical_codebooks(samples, "empirical:test");
  const auto in_memory = src(32, 3);
  REQUIRE(in_memory->centroids() == from_file->centroids());
  REQUIRE(in_memory->source() == "empirical:test");
  REQUIRE(src(32, 3) == in_memory);  // solved once per (d, bits)
  REQUIRE(src(32, 2)->levels() == 4);
}

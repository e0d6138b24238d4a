// KV dump HDF5 files: write → read round trips (f16 and f32) and the
// reader's schema validation with clear errors.
#include <catch2/catch.hpp>

#include <H5Cpp.h>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "tq/error.h"
#include "tq/float_formats.h"
#include "tq/kv_dump.h"
#include "tq/layer_list.h"
#include "tq/rng.h"

using namespace tq;

namespace {

KvDumpHeader small_header(bool f16) {
  KvDumpHeader h;
  h.model = "test-model";
  h.arch = "llama";
  h.source_file = "/x/m.gguf";
  h.source_sha256 = std::string(64, 'a');
  h.created_by = "test_kv_dump";
  h.n_layers = 4;
  h.n_heads = 4;
  h.n_kv_heads = 2;
  h.head_dim = 8;
  h.n_tokens = 5;
  h.tokens = {1, 7, 9, 11, 13};
  h.f16 = f16;
  return h;
}

std::vector<float> random_vec(size_t n, Rng& r) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.gaussian());
  return v;
}

struct TempFile {
  std::string path;
  explicit TempFile(const char* name) : path(name) {}
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("kv_dump: f32 and f16 round trips through HDF5", "[kv_dump]") {
  for (const bool f16 : {false, true}) {
    INFO("f16 " << f16);
    TempFile tmp("tq_test_kv_dump.h5");
    const KvDumpHeader h = small_header(f16);
    Rng rng(11);
    const auto q = random_vec(5 * 4 * 8, rng), k = random_vec(5 * 2 * 8, rng), v = random_vec(5 * 2 * 8, rng);
    {
      KvDumpWriter w(tmp.path, h);
      w.write_layer(1, 10000.0, 0, 0.125, q.data(), k.data(), v.data());
      w.write_layer(3, 1e6, 512, 0.0625, q.data(), v.data(), k.data());
      w.close();
    }
    const KvDump d = KvDump::open(tmp.path);
    const KvDumpHeader& r = d.header();
    CHECK(r.model == "test-model");
    CHECK(r.arch == "llama");
    CHECK(r.source_sha256 == h.source_sha256);
    CHECK(r.n_layers == 4);
    CHECK(r.n_heads == 4);
    CHECK(r.n_kv_heads == 2);
    CHECK(r.head_dim == 8);
    CHECK(r.n_tokens == 5);
    CHECK(r.tokens == h.tokens);
    CHECK(r.layers == std::vector<int>{1, 3});
    CHECK(r.f16 == f16);
    CHECK(d.has_layer(1));
    CHECK_FALSE(d.has_layer(0));
    const KvDumpLayer l1 = d.read_layer(1);
    CHECK(l1.rope_theta == 10000.0);
    CHECK(l1.sliding_window == 0);
    CHECK(l1.attn_scale == 0.125);
    REQUIRE(l1.q.size() == q.size());
    for (size_t i = 0; i < q.size(); ++i) CHECK(l1.q[i] == (f16 ? round_half(q[i]) : q[i]));
    for (size_t i = 0; i < k.size(); ++i) CHECK(l1.k[i] == (f16 ? round_half(k[i]) : k[i]));
    const KvDumpLayer l3 = d.read_layer(3);
    CHECK(l3.sliding_window == 512);
    CHECK(l3.q.size() == q.size());
    CHECK_THROWS_WITH(d.read_layer(0), Catch::Contains("layer 0 is not in the dump"));
  }
}

TEST_CASE("kv_dump: the reader names missing and mismatched fields", "[kv_dump]") {
  TempFile tmp("tq_test_kv_dump_bad.h5");
  const KvDumpHeader h = small_header(true);
  std::vector<float> q(5 * 4 * 8, 0.5f), kv(5 * 2 * 8, 0.25f);
  auto fresh = [&] {
    KvDumpWriter w(tmp.path, h);
    w.write_layer(0, 1e4, 0, 0.125, q.data(), kv.data(), kv.data());
  };
  H5::Exception::dontPrint();

  fresh();
  {
    H5::H5File f(tmp.path, H5F_ACC_RDWR);
    f.openGroup("/").removeAttr("source_sha256");
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains(tmp.path) && Catch::Contains("'source_sha256' is missing"));

  fresh();
  {
    H5::H5File f(tmp.path, H5F_ACC_RDWR);
    H5::Group g = f.openGroup("layer_000");
    g.unlink("k");
    const hsize_t dims[3] = {5, 2, 4};
    g.createDataSet("k", H5::PredType::IEEE_F32LE, H5::DataSpace(3, dims));
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains("/layer_000/k: shape [5, 2, 4], expected [5, 2, 8]"));

  fresh();
  {
    H5::H5File f(tmp.path, H5F_ACC_RDWR);
    H5::Group g = f.openGroup("layer_000");
    g.unlink("v");
    const hsize_t dims[3] = {5, 2, 8};
    g.createDataSet("v", H5::PredType::STD_I32LE, H5::DataSpace(3, dims));
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains("/layer_000/v: dtype is not floating point"));

  fresh();
  {
    H5::H5File f(tmp.path, H5F_ACC_RDWR);
    f.openGroup("layer_000").removeAttr("sliding_window");
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains("/layer_000: attribute 'sliding_window' is missing"));

  fresh();
  {
    H5::H5File f(tmp.path, H5F_ACC_RDWR);
    f.unlink("tokens");
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains("/tokens is missing"));

  {
    H5::H5File f(tmp.path, H5F_ACC_TRUNC);
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains("'schema' is missing"));

  {
    FILE* f = std::fopen(tmp.path.c_str(), "wb");
    std::fputs("not hdf5", f);
    std::fclose(f);
  }
  CHECK_THROWS_WITH(KvDump::open(tmp.path), Catch::Contains("not an HDF5 file"));
  CHECK_THROWS_WITH(KvDump::open("/nonexistent/kv.h5"), Catch::Contains("/nonexistent/kv.h5: cannot open"));
  CHECK_THROWS_WITH(KvDumpWriter("/nonexistent/dir/kv.h5", h), Catch::Contains("cannot create"));
}

// A NaN or an infinity in q, k or v would turn every metric computed from the layer into NaN: the writer refuses
// to write one (and a value beyond f16's range in an f16 dump, which would become one), the reader to return one.
TEST_CASE("kv_dump: values that are not finite are named, writing and reading", "[kv_dump]") {
  H5::Exception::dontPrint();
  std::vector<float> q(5 * 4 * 8, 0.5f), kv(5 * 2 * 8, 0.25f);
  for (const bool f16 : {false, true}) {
    INFO("f16 " << f16);
    TempFile tmp("tq_test_kv_dump_nan.h5");
    const KvDumpHeader h = small_header(f16);
    std::vector<float> bad = kv;
    bad[(3 * 2 + 1) * 8 + 6] = std::numeric_limits<float>::quiet_NaN();  // token 3, head 1, dim 6
    {
      KvDumpWriter w(tmp.path, h);
      CHECK_THROWS_WITH(w.write_layer(0, 1e4, 0, 0.125, q.data(), bad.data(), kv.data()),
                        Catch::Contains("/layer_000/k: token 3, head 1, dim 6: nan is not finite"));
    }
    bad[(3 * 2 + 1) * 8 + 6] = 70000.0f;  // finite, beyond f16
    {
      KvDumpWriter w(tmp.path, h);
      if (f16)
        CHECK_THROWS_WITH(w.write_layer(0, 1e4, 0, 0.125, q.data(), kv.data(), bad.data()),
                          Catch::Contains("/layer_000/v: token 3, head 1, dim 6: 70000 is beyond the f16 range"));
      else
        CHECK_NOTHROW(w.write_layer(0, 1e4, 0, 0.125, q.data(), kv.data(), bad.data()));
    }
    // a file written elsewhere: the reader names the first bad value of the layer it reads
    {
      KvDumpWriter w(tmp.path, h);
      w.write_layer(2, 1e4, 0, 0.125, q.data(), kv.data(), kv.data());
    }
    {
      H5::H5File f(tmp.path, H5F_ACC_RDWR);
      H5::DataSet ds = f.openGroup("layer_002").openDataSet("q");
      std::vector<float> x(q);
      x[(4 * 4 + 2) * 8 + 1] = -std::numeric_limits<float>::infinity();  // token 4, head 2, dim 1
      ds.write(x.data(), H5::PredType::NATIVE_FLOAT);
    }
    {
      const KvDump d = KvDump::open(tmp.path);  // (the schema is fine)
      CHECK_THROWS_WITH(d.read_layer(2), Catch::Contains(tmp.path) && Catch::Contains("/layer_002/q: token 4, head 2, "
                                                                                      "dim 1: -inf is not finite"));
    }
    {
      H5::H5File f(tmp.path, H5F_ACC_RDWR);
      H5::Attribute a = f.openGroup("layer_002").openAttribute("attn_scale");
      const double nan = std::numeric_limits<double>::quiet_NaN();
      a.write(H5::PredType::NATIVE_DOUBLE, &nan);
    }
    CHECK_THROWS_WITH(KvDump::open(tmp.path).read_layer(2),
                      Catch::Contains("/layer_002: rope_theta 10000, attn_scale nan"));
  }
}

TEST_CASE("layer lists: indices, ranges, firstN/lastN, errors", "[kv_dump]") {
  CHECK(parse_layer_list("0,1,28-29", 30) == std::vector<int>{0, 1, 28, 29});
  CHECK(parse_layer_list("first2,last2", 30) == std::vector<int>{0, 1, 28, 29});
  CHECK(parse_layer_list("3,1,3,2-3", 30) == std::vector<int>{1, 2, 3});
  CHECK(parse_layer_list("all", 3) == std::vector<int>{0, 1, 2});
  CHECK(parse_layer_list("none", 3).empty());
  CHECK_THROWS_WITH(parse_layer_list("30", 30), Catch::Contains("layer 30 is out of range"));
  CHECK_THROWS_WITH(parse_layer_list("5-3", 30), Catch::Contains("reversed"));
  CHECK_THROWS_WITH(parse_layer_list("1,,2", 30), Catch::Contains("empty item"));
  CHECK_THROWS_WITH(parse_layer_list("x", 30, "--skip-layers"), Catch::Contains("--skip-layers: 'x'"));
  CHECK_THROWS_AS(parse_layer_list("-1", 30), Error);
  CHECK_THROWS_AS(parse_layer_list("first0", 30), Error);
  CHECK_THROWS_AS(parse_layer_list("last31", 30), Error);
  CHECK_THROWS_AS(parse_layer_list("", 30), Error);
  CHECK_NOTHROW(check_layer_list_syntax("0,99,first3"));
  CHECK_THROWS_AS(check_layer_list_syntax("1-"), Error);
}

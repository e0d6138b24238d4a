// SHA-256 against the FIPS 180-2 / NIST example vectors.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "tq/error.h"
#include "tq/sha256.h"

using namespace tq;

TEST_CASE("sha256: published test vectors", "[sha256]") {
  CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_hex(m448.data(), m448.size()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string m896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  CHECK(sha256_hex(m896.data(), m896.size()) == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in uneven pieces to exercise the buffering.
  Sha256 h;
  const std::string a(1000, 'a');
  for (size_t done = 0, step = 1; done < 1000000; step = step % 997 + 1) {
    const size_t take = std::min(step, 1000000 - done);
    h.update(a.data(), std::min(take, a.size()));
    done += std::min(take, a.size());
  }
  CHECK(Sha256::hex(h.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256: files", "[sha256]") {
  const std::string path = "tq_test_sha256.tmp";
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  std::fputs("abc", f);
  std::fclose(f);
  CHECK(sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::remove(path.c_str());
  CHECK_THROWS_WITH(sha256_file("/nonexistent/f"), Catch::Contains("/nonexistent/f"));
}

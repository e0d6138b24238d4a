// Tokenizers on tiny synthetic vocabularies (GGUF files built in memory), so
// the BPE and SentencePiece paths run under the sanitizers without model
// files. Expected ids are worked out by hand from the merge rules/scores.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tq/error.h"
#include "tq/gguf.h"
#include "tq/tokenizer.h"

using namespace tq;
using Ids = std::vector<int32_t>;

namespace {

// Minimal GGUF metadata writer (no tensors).
struct Meta {
  std::vector<uint8_t> b;
  uint64_t n = 0;
  void put(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(uint8_t(v >> (8 * i)));
  }
  void str(const std::string& s) {
    put(s.size(), 8);
    b.insert(b.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t t) {
    str(k);
    put(t, 4);
    ++n;
  }
  void s(const std::string& k, const std::string& v) { key(k, 8), str(v); }
  void u32(const std::string& k, uint32_t v) { key(k, 4), put(v, 4); }
  void boolean(const std::string& k, bool v) { key(k, 7), put(v, 1); }
  void strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9), put(8, 4), put(v.size(), 8);
    for (auto& x : v) str(x);
  }
  void i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9), put(5, 4), put(v.size(), 8);
    for (int32_t x : v) put(uint32_t(x), 4);
  }
  void f32s(const std::string& k, const std::vector<float>& v) {
    key(k, 9), put(6, 4), put(v.size(), 8);
    for (float x : v) {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      put(u, 4);
    }
  }
  GgufFile file() const {
    std::vector<uint8_t> f;
    auto p = [&](uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i) f.push_back(uint8_t(v >> (8 * i)));
    };
    p(0x46554747u, 4), p(3, 4), p(0, 8), p(n, 8);
    f.insert(f.end(), b.begin(), b.end());
    return GgufFile::from_memory(f, "vocab.gguf");
  }
};

// GPT-2 bytes_to_unicode, written out independently of the library.
std::string byte_char(int b) {
  int cp = b;
  if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
    int k = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++k;
    cp = 256 + k;
  }
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// id 0: control "<|endoftext|>"; ids 1..256: byte b at 1 + b; then merges. Bytes in `missing` have no
// character token (byte b's id holds "<missing b>"), and id 0 is then also the unknown token.
Tokenizer gpt2(const std::string& pre, const std::vector<int>& missing = {}) {
  std::vector<std::string> tok{"<|endoftext|>"};
  for (int b = 0; b < 256; ++b) {
    const bool has = std::find(missing.begin(), missing.end(), b) == missing.end();
    tok.push_back(has ? byte_char(b) : "<missing " + std::to_string(b) + ">");
  }
  const std::string G = byte_char(' ');  // "Ġ"
  tok.push_back(G + "t");       // 257
  tok.push_back("he");          // 258
  tok.push_back(G + "the");     // 259
  tok.push_back("aa");          // 260
  tok.push_back("12");          // 261
  std::vector<int32_t> types(tok.size(), 1);
  types[0] = 3;
  Meta m;
  m.s("tokenizer.ggml.model", "gpt2");
  m.s("tokenizer.ggml.pre", pre);
  m.strs("tokenizer.ggml.tokens", tok);
  m.i32s("tokenizer.ggml.token_type", types);
  m.strs("tokenizer.ggml.merges", {G + " t", "h e", G + "t he", "a a", "1 2"});
  m.u32("tokenizer.ggml.bos_token_id", 0);
  m.u32("tokenizer.ggml.eos_token_id", 0);
  if (!missing.empty()) m.u32("tokenizer.ggml.unknown_token_id", 0);
  return Tokenizer::from_gguf(m.file());
}

int32_t B(char c) { return 1 + int32_t(uint8_t(c)); }

// SentencePiece vocabulary: unk, <s>, </s>, 256 byte tokens, then pieces.
Tokenizer spm() {
  std::vector<std::string> tok{"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types{2, 3, 3};
  std::vector<float> scores{0, 0, 0};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tok.push_back(buf), types.push_back(6), scores.push_back(0);
  }
  const std::string S = "\xE2\x96\x81";  // ▁
  const std::vector<std::pair<std::string, float>> pieces = {
      {S, -1}, {"a", -2}, {"b", -3}, {"ab", -4}, {S + "a", -5}, {S + "ab", -1}, {"aa", -2.5f}, {"c", -6}};
  for (auto& [p, sc] : pieces) tok.push_back(p), types.push_back(1), scores.push_back(sc);  // 259..266
  tok.push_back("\n\n"), types.push_back(4), scores.push_back(0);                            // 267
  Meta m;
  m.s("tokenizer.ggml.model", "llama");
  m.strs("tokenizer.ggml.tokens", tok);
  m.i32s("tokenizer.ggml.token_type", types);
  m.f32s("tokenizer.ggml.scores", scores);
  m.u32("tokenizer.ggml.bos_token_id", 1);
  m.u32("tokenizer.ggml.eos_token_id", 2);
  m.u32("tokenizer.ggml.unknown_token_id", 0);
  m.boolean("tokenizer.ggml.add_bos_token", true);
  m.boolean("tokenizer.ggml.add_space_prefix", false);
  return Tokenizer::from_gguf(m.file());
}

}  // namespace

TEST_CASE("tokenizer gpt2: merges by rank, leftmost first, byte-level mapping", "[tokenizer]") {
  const Tokenizer t = gpt2("gpt2");
  CHECK(t.kind() == Tokenizer::Kind::Gpt2Bpe);
  CHECK_FALSE(t.add_bos());
  CHECK(t.encode(" the") == Ids{259});
  CHECK(t.encode("the") == Ids{B('t'), 258});
  CHECK(t.encode("the the") == Ids{B('t'), 258, 259});
  CHECK(t.encode("aaa") == Ids{260, B('a')});  // two equal-rank pairs: the left one merges
  CHECK(t.encode("12") == Ids{261});           // no digit pre-split for pre "gpt2"
  CHECK(t.encode("\xC3\xA9") == Ids{1 + 0xC3, 1 + 0xA9});
  CHECK(t.decode(t.encode("\xC3\xA9 the\n")) == "\xC3\xA9 the\n");
  CHECK(t.encode("<|endoftext|>").size() == 13);
  CHECK(t.encode("<|endoftext|>", false, true) == Ids{0});
  CHECK(t.decode({0, 259}) == " the");
  CHECK_THROWS_WITH(t.encode("a\xC3"), Catch::Contains("invalid UTF-8 at byte 1"));
  CHECK_THROWS_AS(t.decode({9999}), Error);
}

// llama.cpp's rule for a character that is not a token (llm_tokenizer_bpe_session::tokenize): each of its bytes
// that is a one-byte token gives that token, the others nothing, whatever the unknown token is.
TEST_CASE("tokenizer gpt2: a byte without a character token is dropped, as in llama.cpp", "[tokenizer]") {
  const Tokenizer t = gpt2("gpt2", {0x04, 0xE9});
  CHECK(t.encode("a\x04" "b") == Ids{B('a'), B('b')});
  CHECK(t.encode("\x04") == Ids{});
  CHECK(t.encode("caf\xC3\xA9 \x04\x04the") ==
        Ids{B('c'), B('a'), B('f'), 1 + 0xC3, 1 + 0xA9, B(' '), B('t'), 258});  // " \x04\x04" is one piece
  CHECK(t.encode("\xE9\x80\x80") == Ids{1 + 0x80, 1 + 0x80});                  // U+9000: its lead byte E9 has none
  CHECK(t.decode(t.encode("x\x04y")) == "xy");
}

TEST_CASE("tokenizer gpt2: smollm pre-tokenizer splits every digit", "[tokenizer]") {
  const Tokenizer t = gpt2("smollm");
  CHECK(t.encode("12") == Ids{B('1'), B('2')});
  CHECK(t.encode("x 12") == Ids{B('x'), B(' '), B('1'), B('2')});
  CHECK(t.decode(t.encode("x 12 y")) == "x 12 y");
  Meta m;
  m.s("tokenizer.ggml.model", "gpt2");
  m.s("tokenizer.ggml.pre", "qwen9");
  m.strs("tokenizer.ggml.tokens", {"a"});
  m.strs("tokenizer.ggml.merges", {});
  CHECK_THROWS_WITH(Tokenizer::from_gguf(m.file()), Catch::Contains("'qwen9' is not supported"));
}

TEST_CASE("tokenizer spm: highest score first, byte fallback, user-defined tokens", "[tokenizer]") {
  const Tokenizer t = spm();
  CHECK(t.kind() == Tokenizer::Kind::SentencePiece);
  CHECK(t.add_bos());
  CHECK(t.encode("ab") == Ids{1, 262});
  CHECK(t.encode(" ab") == Ids{1, 264});          // "ab" (−4) before "▁a" (−5), then "▁ab" (−1)
  CHECK(t.encode("aaa") == Ids{1, 265, 260});     // equal scores: leftmost pair first
  CHECK(t.encode("x") == Ids{1, 3 + 'x'});        // not in the vocabulary: <0x78>
  CHECK(t.encode("\xC3\xA9", false, false) == Ids{3 + 0xC3, 3 + 0xA9});
  CHECK(t.encode("a\n\nb") == Ids{1, 260, 267, 261});
  CHECK(t.encode("<s>", false, false) == Ids{3 + '<', 3 + 's', 3 + '>'});
  CHECK(t.encode("<s>", false, true) == Ids{1});
  CHECK(t.decode({1, 264, 267, 3 + 0xC3, 3 + 0xA9, 2}) == " ab\n\n\xC3\xA9");
  for (const std::string s : {"", " ", "ab ab  aab", "\xC3\xA9t\xC3\xA9\n\n\nx", "<s></s>"}) {
    INFO(s);
    CHECK(t.decode(t.encode(s)) == s);
  }
}

TEST_CASE("tokenizer: bad metadata is a clear error", "[tokenizer]") {
  Meta m;
  m.s("tokenizer.ggml.model", "bert");
  CHECK_THROWS_WITH(Tokenizer::from_gguf(m.file()), Catch::Contains("'bert' is not supported"));
  Meta s;
  s.s("tokenizer.ggml.model", "llama");
  s.strs("tokenizer.ggml.tokens", {"a", "b"});
  CHECK_THROWS_WITH(Tokenizer::from_gguf(s.file()), Catch::Contains("needs tokenizer.ggml.scores"));
  Meta b;
  b.s("tokenizer.ggml.model", "llama");
  b.strs("tokenizer.ggml.tokens", {"a", "b"});
  b.f32s("tokenizer.ggml.scores", {0, 0});
  b.u32("tokenizer.ggml.bos_token_id", 7);
  CHECK_THROWS_WITH(Tokenizer::from_gguf(b.file()), Catch::Contains("bos_token_id = 7 is not a token id"));
}

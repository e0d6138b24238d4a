// Tokenizers of the real model files against known ids.
//
// SmolLM2 (gpt2/smollm): the smoke vectors of docs/models.md §6 hold, and
// the whole evaluation corpus was cross-checked once against Hugging Face
// `tokenizers` (transformers' GGUF conversion): identical 18448 ids.
// Gemma 3 (llama/SPM): ids below were cross-checked against the sentencepiece
// library running a BPE model built from the GGUF vocabulary and scores; the
// whole corpus agrees except where runs of 2+ spaces occur (see the test
// "user-defined tokens are cut out first").
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "model_files.h"
#include "tq/error.h"
#include "tq/gguf.h"
#include "tq/json.h"
#include "tq/rng.h"
#include "tq/tokenizer.h"

using tq::GgufFile;
using tq::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

const Tokenizer& smollm2() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(tqtest::require_model("smollm2")));
  return t;
}
const Tokenizer& gemma3() {
  static const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(tqtest::require_model("gemma3")));
  return t;
}

const std::vector<std::string> kVaried = {
    "Hello world! 123",
    "The capital of France is",
    "\n",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nand CRLF\r\n",
    "naïve café — “quotes” and ‘apostrophes’ … ½ ¾",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "emoji 🙂🚀👩‍💻 and flags 🇫🇷",
    "Ελληνικά, русский текст, עברית, العربية",
    "code: for (int i = 0; i < n; ++i) { x[i] += 3.14e-5; }",
    "it's they're we've I'm you'll he'd IT'S",
    "numbers 0 12 345 6789 1,234,567.89 1e10",
    "<bos><eos><|endoftext|><|im_start|> control tokens as text",
    "<b>bold</b> <table><tr><td>cell</td></tr></table>",
    std::string("\x01\x02\x7f odd bytes"),
    "",
};

}  // namespace

TEST_CASE("smollm2 tokenizer: smoke vectors from docs/models.md", "[model][tokenizer]") {
  const Tokenizer& t = smollm2();
  CHECK(t.kind() == Tokenizer::Kind::Gpt2Bpe);
  CHECK(t.n_vocab() == 49152);
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK_FALSE(t.add_bos());
  CHECK(t.encode("Hello world! 123") == Ids{19556, 905, 17, 216, 33, 34, 35});
  CHECK(t.encode("The capital of France is") == Ids{504, 3575, 282, 4649, 314});
  CHECK(t.encode("\n") == Ids{198});
  CHECK(t.token_text(216) == "\xC4\xA0");  // "Ġ": a lone space before the digits
  CHECK(t.encode("x", true, false) == Ids{1, t.find_token("x")});
}

TEST_CASE("smollm2 tokenizer: digits are split one by one, specials stay text", "[model][tokenizer]") {
  const Tokenizer& t = smollm2();
  const Ids ids = t.encode("2024");
  REQUIRE(ids.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(t.token_text(ids[size_t(i)]) == std::string(1, "2024"[i]));
  // Control tokens are text unless special parsing is asked for.
  const Ids plain = t.encode("<|im_start|>");
  CHECK(plain.size() > 1);
  CHECK(t.encode("<|im_start|>", false, true) == Ids{1});
  CHECK(t.decode({1, 504}) == "The");  // control tokens are dropped
  CHECK_THROWS_AS(t.encode(std::string("bad \xff utf8")), tq::Error);
}

// SmolLM2's vocabulary has no character token for the control bytes 0x04, 0x06, 0x13, 0x14, 0x16 and 0x1D, nor
// for 0xF1 and 0xF2 (lead bytes of U+40000 … U+BFFFF): llama.cpp drops them, where an unknown token would put
// <|endoftext|> into the text. Ids from llama-cpp-python 0.3.36:
//   Llama(MODEL, vocab_only=True).tokenize(BYTES, add_bos=False, special=False)
TEST_CASE("smollm2 tokenizer: bytes without a token are dropped, as in llama.cpp", "[model][tokenizer]") {
  const Tokenizer& t = smollm2();
  CHECK(t.encode("a\x04" "b\x1d" "c") == Ids{81, 82, 83});
  CHECK(t.encode("\x04") == Ids{});
  CHECK(t.encode("x \x06\x13\x14y\x16z") == Ids{104, 216, 105, 106});
  CHECK(t.encode("caf\xc3\xa9 \x04\x04the") == Ids{83, 1939, 2756, 216, 1195});
  CHECK(t.encode("\xf1\x8d\x9e\x9c") == Ids{231, 248, 246});  // U+4D79C
  CHECK(t.encode("a\xf2\x80\x80\x80" "b") == Ids{81, 218, 218, 218, 82});
}

namespace {

// Random texts (seeded): runs of ASCII letters, digits, punctuation, spaces, tabs and newlines, control bytes, 2-,
// 3- and 4-byte characters of every plane, and the models' special-token strings as plain text.
std::vector<std::string> random_texts(int n, uint64_t seed) {
  tq::Rng r(seed);
  const std::vector<std::string> specials{"<|endoftext|>", "<|im_start|>",    "<bos>",
                                          "</s>",          "<start_of_turn>", "<0x41>"};
  auto utf8 = [](uint32_t cp) {
    std::string s;
    tq::append_utf8(s, cp);
    return s;
  };
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s;
    const int pieces = int(1 + r.below(12));
    for (int k = 0; k < pieces; ++k) {
      const int len = int(1 + r.below(6));
      switch (r.below(8)) {
        case 0: for (int j = 0; j < len; ++j) s += char('a' + r.below(26)); break;
        case 1: for (int j = 0; j < len; ++j) s += char('0' + r.below(10)); break;
        case 2: for (int j = 0; j < len; ++j) s += " \t\n\r"[r.below(r.coin() ? 1 : 4)]; break;
        case 3: for (int j = 0; j < len; ++j) s += "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"[r.below(32)]; break;
        case 4: s += char(1 + r.below(31)); break;
        case 5: s += utf8(uint32_t(0x80 + r.below(0x800 - 0x80))); break;
        case 6: {  // 3-byte, not a surrogate, not U+2581 (SentencePiece's space)
          uint32_t cp;
          do cp = uint32_t(0x800 + r.below(0x10000 - 0x800));
          while ((cp >= 0xD800 && cp < 0xE000) || cp == 0x2581);
          s += utf8(cp);
          break;
        }
        default: s += r.coin() ? utf8(uint32_t(0x10000 + r.below(0x100000))) : specials[r.below(specials.size())];
      }
    }
    out.push_back(s);
  }
  return out;
}

// decode(encode(s)) == s over random texts, but for the bytes a vocabulary has no token for (dropped, as in
// llama.cpp: SmolLM2's 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xF1, 0xF2, the ids of the test above); encode is
// deterministic, and every id is in the vocabulary and not a control token (special-token strings are plain text
// without parse_special, and a byte without a token is not replaced by the unknown token, SmolLM2's <|endoftext|>).
void check_round_trips(const Tokenizer& t, const std::string& dropped, uint64_t seed) {
  for (const std::string& s : random_texts(400, seed)) {
    INFO(tq::Json(s).dump());
    const Ids ids = t.encode(s, false, false);
    for (const int32_t id : ids) REQUIRE((id >= 0 && id < t.n_vocab() && t.token_type(id) != Tokenizer::kControl));
    std::string kept;
    for (const char c : s)
      if (dropped.find(c) == std::string::npos) kept += c;
    REQUIRE(t.decode(ids) == kept);
    REQUIRE(t.encode(s, false, false) == ids);
  }
}

}  // namespace

TEST_CASE("tokenizers: random texts round-trip (smollm2, qwen2, gemma3)", "[model][tokenizer]") {
  check_round_trips(smollm2(), std::string("\x04\x06\x13\x14\x16\x1d\xf1\xf2"), 1);
  check_round_trips(Tokenizer::from_gguf(GgufFile::open(tqtest::require_model("qwen0.5b"))), "", 2);
  TQ_REQUIRE_GEMMA();
  check_round_trips(gemma3(), "", 3);
}

TEST_CASE("smollm2 tokenizer: decode(encode(s)) == s and encode is deterministic", "[model][tokenizer]") {
  const Tokenizer& t = smollm2();
  for (const std::string& s : kVaried) {
    INFO(s);
    const Ids a = t.encode(s);
    CHECK(t.decode(a) == s);
    CHECK(t.encode(s) == a);
  }
}

TEST_CASE("smollm2 tokenizer: the corpus round-trips", "[model][tokenizer]") {
  const std::string text = tq::read_text_file(tqtest::require_text());
  const Ids ids = smollm2().encode(text);
  CHECK(ids.size() == 18448);  // also the count of Hugging Face tokenizers (cross-check, see top)
  CHECK(smollm2().decode(ids) == text);
}

TEST_CASE("gemma3 tokenizer: BOS, known ids, byte fallback", "[model][tokenizer]") {
  TQ_REQUIRE_GEMMA();
  const Tokenizer& t = gemma3();
  CHECK(t.kind() == Tokenizer::Kind::SentencePiece);
  CHECK(t.n_vocab() == 262144);
  CHECK(t.bos_id() == 2);
  CHECK(t.eos_id() == 1);
  CHECK(t.add_bos());
  // Cross-checked with sentencepiece (BPE model from the GGUF vocab/scores).
  CHECK(t.encode("The capital of France is") == Ids{2, 818, 5279, 529, 7001, 563});
  CHECK(t.encode("Hello world! 123") == Ids{2, 9259, 1902, 236888, 236743, 236770, 236778, 236800});
  CHECK(t.encode("naïve café 日本語 🙂 it's 3.14") ==
        Ids{2, 1789, 238527, 560, 33443, 33375, 238582, 57235, 625, 236789, 236751, 236743, 236800, 236761, 236770,
            236812});
  CHECK(t.token_text(818) == "The");
  CHECK(t.token_text(5279) == "\xE2\x96\x81" "capital");  // ▁capital
  CHECK(t.encode("", true, false) == Ids{2});
  CHECK(t.encode("x", false, false).front() != 2);
  // A character outside the vocabulary falls back to <0xXX> byte tokens.
  CHECK(t.encode("\xF0\xAA\x9B\x96", false, false) == Ids{478, 408, 393, 388});  // U+2A6D6
  CHECK(t.token_text(478) == "<0xF0>");
  CHECK(t.decode({2, 478, 408, 393, 388}) == "\xF0\xAA\x9B\x96");
}

TEST_CASE("gemma3 tokenizer: user-defined tokens are cut out first (llama.cpp)", "[model][tokenizer]") {
  TQ_REQUIRE_GEMMA();
  const Tokenizer& t = gemma3();
  // "\n\n" (108), two spaces (138) and tab (255968) are user-defined tokens:
  // llama.cpp splits them out of the raw text before the SPM merges. The
  // sentencepiece library instead escapes spaces first, giving "b", "▁", "▁c".
  // This is the only difference found on the corpus (runs of 2+ spaces).
  CHECK(t.encode("a\n\nb  c\td") == Ids{2, 236746, 108, 236763, 138, 236755, 255968, 236753});
  CHECK(t.encode("<b>bold</b>", false, false) == Ids{200, 15640, 209});
  // Control tokens are text unless special parsing is on.
  CHECK(t.encode("<bos>", false, false) != Ids{2});
  CHECK(t.encode("<bos>", false, true) == Ids{2});
}

TEST_CASE("gemma3 tokenizer: decode(encode(s)) == s and encode is deterministic", "[model][tokenizer]") {
  TQ_REQUIRE_GEMMA();
  const Tokenizer& t = gemma3();
  for (const std::string& s : kVaried) {
    INFO(s);
    const Ids a = t.encode(s);
    REQUIRE(!a.empty());
    CHECK(a.front() == 2);
    CHECK(t.decode(a) == s);
    CHECK(t.encode(s) == a);
  }
  const std::string text = tq::read_text_file(tqtest::require_text());
  const Ids ids = t.encode(text);
  CHECK(ids.size() == 18158);
  CHECK(t.decode(ids) == text);
}

// llama.cpp (llama-cpp-python 0.3.36's vendored llama.cpp, commit 0c1e570):
//   llama-tokenize -m MODEL -f FILE --no-escape --no-parse-special --log-disable --ids
// on files holding exactly these bytes.
TEST_CASE("gemma3 tokenizer: a literal </s> is plain text, as in llama.cpp", "[model][tokenizer]") {
  TQ_REQUIRE_GEMMA();
  const Tokenizer& t = gemma3();
  CHECK(t.token_type(212) == Tokenizer::kControl);  // "</s>": user-defined in the file, forced to control
  CHECK(t.encode("Hello </s> world") == Ids{2, 9259, 1454, 236751, 236813, 1902});  // ▁</ s > ▁world
  CHECK(t.encode("x</s>") == Ids{2, 236781, 954, 236751, 236813});
  CHECK(t.encode("x</s>", true, true) == Ids{2, 236781, 212});  // with special parsing: the token
}

TEST_CASE("qwen2 tokenizer: llama.cpp's ids, specials as text", "[model][tokenizer][qwen2]") {
  const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(tqtest::require_model("qwen0.5b")));
  CHECK(t.kind() == Tokenizer::Kind::Gpt2Bpe);
  CHECK(t.n_vocab() == 151936);
  CHECK_FALSE(t.add_bos());
  CHECK(t.encode("Once upon a time") == Ids{12522, 5193, 264, 882});
  CHECK(t.encode("Hello world! 123") == Ids{9707, 1879, 0, 220, 16, 17, 18});
  CHECK(t.encode("Ünïcödé — 東京 2024年\n\n\tTabs  and   spaces") ==
        Ids{52491, 77, 37572, 66, 2956, 128505, 1959, 60596, 109, 46553, 220, 17, 15, 17, 19, 7948, 271, 10261, 3435,
            220, 323, 256, 12621});
  CHECK(t.encode("I'm sure they'll say it's fine, DON'T you think?") ==
        Ids{40, 2776, 2704, 807, 3278, 1977, 432, 594, 6915, 11, 44273, 17323, 498, 1744, 30});
  CHECK(t.encode("a</s>b <|endoftext|> c") == Ids{64, 522, 82, 51407, 82639, 8691, 723, 427, 91, 29, 272});
  CHECK(t.encode("a</s>b <|endoftext|> c", false, true) == Ids{64, 128247, 65, 220, 151643, 272});
  for (const std::string& s : kVaried) {
    INFO(s);
    CHECK(t.decode(t.encode(s)) == s);
  }
}

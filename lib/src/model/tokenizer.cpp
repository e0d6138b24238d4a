#include "tq/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include "tq/error.h"
#include "tq/gguf.h"

namespace tq {

namespace {

// Length of the UTF-8 sequence a lead byte announces (1 for a stray byte).
size_t utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Strict UTF-8 validation; returns the offset of the first bad byte or npos.
size_t first_invalid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
    else return i;
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      const uint8_t d = uint8_t(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min_cp = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string::npos;
}

// A compiled PCRE2 pattern (UTF + UCP: \p{L}, \s etc. by Unicode properties).
class Regex {
 public:
  explicit Regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      TQ_THROW("tokenizer: cannot compile regex '{}' at {}: {}", pattern, off, reinterpret_cast<const char*>(buf));
    }
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits s[off, off+len) into the regex matches and the unmatched gaps
  // between them (as llama.cpp's unicode_regex_split), appending [begin, end) pairs.
  void split(const std::string& s, size_t off, size_t len, std::vector<std::pair<size_t, size_t>>& out) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    TQ_ASSERT(md);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data() + off);
    size_t pos = 0, gap = 0;
    while (pos < len) {
      const int rc = pcre2_match(code_, subject, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(md);
        TQ_THROW("tokenizer: regex match failed with PCRE2 error {}", rc);
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      size_t b = ov[0], e = ov[1];
      if (e == b) {  // empty match: step over one character
        pos = b + utf8_len(uint8_t(s[off + b]));
        continue;
      }
      if (b > gap) out.emplace_back(off + gap, off + b);
      out.emplace_back(off + b, off + e);
      pos = gap = e;
    }
    if (gap < len) out.emplace_back(off + gap, off + len);
    pcre2_match_data_free(md);
  }

 private:
  pcre2_code* code_ = nullptr;
};

constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// Qwen2's pre-tokenizer (its tokenizer.json, with the case-insensitive
// contractions spelled out as llama.cpp does): letters keep one leading
// non-letter, digits split one by one, punctuation runs take trailing newlines.
constexpr const char* kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Token texts llama.cpp treats as end-of-generation markers and therefore as
// control tokens whatever type the file gives them (so that a literal "</s>"
// in Gemma's plain text is split like any other text).
constexpr const char* kForcedControl[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "</s>", "<|eom_id|>", "<EOT>", "<|end_of_text|>"};
constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581 ▁

// One piece of the text after cutting out special tokens.
struct Fragment {
  int32_t token;  // >= 0: a special token; -1: raw text [off, off + len)
  size_t off, len;
};

// Symbols of a BPE word: a doubly linked list over the word's characters.
struct Symbol {
  int prev, next;
  size_t off, n;  // byte range in the word; n == 0 once merged away
};

// One symbol per UTF-8 character of s, linked in order (the start of both BPE merges).
std::vector<Symbol> utf8_symbols(const std::string& s) {
  std::vector<Symbol> sym;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8_len(uint8_t(s[i])), s.size() - i);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, i, n});
    i += n;
  }
  if (!sym.empty()) sym.back().next = -1;
  return sym;
}

// The merge loop both BPE variants share: every neighbouring pair is offered to try_add(l, r), which queues
// the pairs it knows (a Bigram with left, right, size and the variant's priority); then the best queued pair
// merges, its new neighbours are offered, and so on until the queue is empty. A popped pair is stale when
// either symbol has merged into another since it was queued.
template <class Queue, class TryAdd>
void merge_symbols(std::vector<Symbol>& sym, Queue& queue, const TryAdd& try_add) {
  for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
  while (!queue.empty()) {
    const auto b = queue.top();
    queue.pop();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size || l.next != b.right) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
}

}  // namespace

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
}

struct Tokenizer::Impl {
  Kind kind = Kind::Gpt2Bpe;
  std::string source;  // file name for messages
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  std::unordered_map<std::string, int32_t> all_ids;    // every token
  std::unordered_map<std::string, int32_t> merge_ids;  // tokens a merge may produce (SPM)
  std::unordered_map<std::string, int32_t> merge_rank; // "left right" → rank (gpt2)
  std::vector<int32_t> specials;  // user-defined + control + unknown ids, longest text first
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_space_prefix = false;
  int32_t byte_tokens[256];
  // gpt2 byte ↔ unicode mapping
  std::string byte_to_unicode[256];
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte;
  std::vector<std::unique_ptr<Regex>> pre;  // regexes applied in sequence

  std::vector<Fragment> partition(const std::string& text, bool parse_special) const;
  void encode_gpt2(const std::string& text, size_t off, size_t len, std::vector<int32_t>& out) const;
  void encode_spm(const std::string& text, std::vector<int32_t>& out) const;
  void bpe_word(const std::string& word, std::vector<int32_t>& out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  auto im = std::make_unique<Impl>();
  Impl& t = *im;
  t.source = f.path();
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "gpt2") t.kind = Kind::Gpt2Bpe;
  else if (model == "llama") t.kind = Kind::SentencePiece;
  else TQ_THROW("{}: tokenizer.ggml.model '{}' is not supported (expected gpt2 or llama)", f.path(), model);

  t.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const int32_t n = int32_t(t.tokens.size());
  TQ_CHECK(n > 0 && t.tokens.size() < size_t(INT32_MAX), "{}: tokenizer.ggml.tokens is empty", f.path());
  if (f.has("tokenizer.ggml.token_type")) {
    t.types = f.get_i32_array("tokenizer.ggml.token_type");
    TQ_CHECK(t.types.size() == t.tokens.size(), "{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(),
             t.types.size(), t.tokens.size());
  } else {
    t.types.assign(size_t(n), kNormal);
  }
  if (f.has("tokenizer.ggml.scores")) {
    t.scores = f.get_f32_array("tokenizer.ggml.scores");
    TQ_CHECK(t.scores.size() == t.tokens.size(), "{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path(),
             t.scores.size(), t.tokens.size());
  } else {
    TQ_CHECK(t.kind != Kind::SentencePiece, "{}: a 'llama' tokenizer needs tokenizer.ggml.scores", f.path());
    t.scores.assign(size_t(n), 0.0f);
  }
  auto id_of = [&](const char* key) -> int32_t {
    if (!f.has(key)) return -1;
    const uint32_t id = f.get_u32(key);
    TQ_CHECK(id < uint32_t(n), "{}: {} = {} is not a token id (vocab {})", f.path(), key, id, n);
    return int32_t(id);
  };
  t.bos = id_of("tokenizer.ggml.bos_token_id");
  t.eos = id_of("tokenizer.ggml.eos_token_id");
  t.unk = id_of("tokenizer.ggml.unknown_token_id");
  t.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", t.kind == Kind::SentencePiece);
  TQ_CHECK(!t.add_bos || t.bos >= 0, "{}: add_bos_token is set but there is no bos_token_id", f.path());
  t.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", false);

  for (int32_t i = 0; i < n; ++i)
    for (const char* c : kForcedControl)
      if (t.tokens[size_t(i)] == c) t.types[size_t(i)] = kControl;

  t.all_ids.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    t.all_ids.emplace(t.tokens[i], i);  // first id wins on duplicate strings
    const int32_t ty = t.types[i];
    if (ty != kControl && ty != kUnused && ty != kByte) t.merge_ids.emplace(t.tokens[i], i);
    if ((ty == kControl || ty == kUserDefined || ty == kUnknown) && !t.tokens[i].empty()) t.specials.push_back(i);
  }
  std::stable_sort(t.specials.begin(), t.specials.end(),
                   [&](int32_t a, int32_t b) { return t.tokens[a].size() > t.tokens[b].size(); });

  std::fill(std::begin(t.byte_tokens), std::end(t.byte_tokens), -1);
  if (t.kind == Kind::SentencePiece) {
    for (int b = 0; b < 256; ++b) {
      auto it = t.all_ids.find(fmt::format("<0x{:02X}>", b));
      if (it != t.all_ids.end()) t.byte_tokens[b] = it->second;
    }
  } else {
    // GPT-2 bytes_to_unicode: printable bytes map to themselves, the others to U+0100 + k.
    int k = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + k++);
      append_utf8(t.byte_to_unicode[b], cp);
      t.unicode_to_byte[cp] = uint8_t(b);
      auto it = t.all_ids.find(t.byte_to_unicode[b]);
      if (it != t.all_ids.end()) t.byte_tokens[b] = it->second;
    }
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    t.merge_rank.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const size_t sp = merges[r].find(' ', 1);
      TQ_CHECK(sp != std::string::npos, "{}: tokenizer.ggml.merges[{}] = '{}' is not 'left right'", f.path(), r, merges[r]);
      t.merge_rank.emplace(merges[r], int32_t(r));
    }
    const std::string pre = f.get_string("tokenizer.ggml.pre", "default");
    if (pre == "qwen2") {
      t.pre.push_back(std::make_unique<Regex>(kQwen2Regex));
    } else {
      if (pre == "smollm") t.pre.push_back(std::make_unique<Regex>("\\p{N}"));
      else if (pre != "default" && pre != "gpt2")
        TQ_THROW("{}: tokenizer.ggml.pre '{}' is not supported (expected smollm, qwen2, gpt2 or default)", f.path(),
                 pre);
      t.pre.push_back(std::make_unique<Regex>(kGpt2Regex));
    }
  }
  return Tokenizer(std::move(im));
}

// Cuts special tokens out of the text, longest first (llama.cpp's
// tokenizer_st_partition): each token is searched in the raw fragments left
// by the longer ones.
std::vector<Fragment> Tokenizer::Impl::partition(const std::string& text, bool parse_special) const {
  std::vector<Fragment> frags{{-1, 0, text.size()}};
  for (const int32_t id : specials) {
    if (!parse_special && types[id] != kUserDefined) continue;
    const std::string& s = tokens[id];
    std::vector<Fragment> next;
    next.reserve(frags.size());
    bool found = false;
    for (const Fragment& fr : frags) {
      if (fr.token >= 0 || fr.len < s.size()) {
        next.push_back(fr);
        continue;
      }
      size_t pos = fr.off;
      const size_t end = fr.off + fr.len;
      while (true) {
        const size_t hit = text.find(s, pos);
        if (hit == std::string::npos || hit + s.size() > end) break;
        found = true;
        if (hit > pos) next.push_back({-1, pos, hit - pos});
        next.push_back({id, hit, s.size()});
        pos = hit + s.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    if (found) frags.swap(next);
  }
  return frags;
}

// Byte-level BPE of one pre-tokenized word (already mapped to GPT-2 characters).
void Tokenizer::Impl::bpe_word(const std::string& word, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym = utf8_symbols(word);
  if (sym.empty()) return;

  struct Bigram {
    int left, right, rank;
    size_t size;
  };
  auto worse = [](const Bigram& a, const Bigram& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  std::string key;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(word, sym[l].off, sym[l].n);
    key += ' ';
    key.append(word, sym[r].off, sym[r].n);
    auto it = merge_rank.find(key);
    if (it != merge_rank.end()) queue.push({l, r, it->second, sym[l].n + sym[r].n});
  };
  merge_symbols(sym, queue, try_add);
  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string s = word.substr(sym[i].off, sym[i].n);
    auto it = all_ids.find(s);
    if (it != all_ids.end()) {
      out.push_back(it->second);
      continue;
    }
    // Not a token (every merge gives one, so s is one byte's GPT-2 character): as llama.cpp, each byte of s
    // that is a one-byte token gives it, and the others give nothing. A vocabulary may lack a byte's character
    // (SmolLM2 has none for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xF1, 0xF2): that byte is dropped, not unk.
    for (const char c : s) {
      auto it = all_ids.find(std::string(1, c));
      if (it != all_ids.end()) out.push_back(it->second);
    }
  }
}

void Tokenizer::Impl::encode_gpt2(const std::string& text, size_t off, size_t len, std::vector<int32_t>& out) const {
  std::vector<std::pair<size_t, size_t>> pieces{{off, off + len}}, next;
  for (const auto& re : pre) {
    next.clear();
    for (const auto& [b, e] : pieces) re->split(text, b, e - b, next);
    pieces.swap(next);
  }
  std::string word;
  for (const auto& [b, e] : pieces) {
    word.clear();
    for (size_t i = b; i < e; ++i) word += byte_to_unicode[uint8_t(text[i])];
    bpe_word(word, out);
  }
}

// SentencePiece BPE of one raw fragment (llama.cpp llm_tokenizer_spm).
void Tokenizer::Impl::encode_spm(const std::string& raw, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(raw.size() + 8);
  for (char c : raw) {
    if (c == ' ') text += kSpace;
    else text += c;
  }
  std::vector<Symbol> sym = utf8_symbols(text);
  if (sym.empty()) return;

  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  auto worse = [](const Bigram& a, const Bigram& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  std::string key;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(text, sym[l].off, sym[l].n + sym[r].n);
    auto it = merge_ids.find(key);
    if (it == merge_ids.end()) return;
    queue.push({l, r, scores[it->second], key.size()});
  };
  merge_symbols(sym, queue, try_add);
  // Every merge produces a token, so a symbol is either a token or a single
  // character that is not one: that becomes byte tokens (<0xXX>). (llama.cpp's
  // resegmentation through recorded merges never triggers for the same reason.)
  for (int i = 0; i >= 0; i = sym[i].next) {
    auto it = merge_ids.find(text.substr(sym[i].off, sym[i].n));
    if (it != merge_ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (size_t k = 0; k < sym[i].n; ++k) {
      const int32_t id = byte_tokens[uint8_t(text[sym[i].off + k])];
      out.push_back(id >= 0 ? id : unk);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_bos, bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  if (add_bos) {
    TQ_CHECK(t.bos >= 0, "{}: cannot add BOS: the tokenizer has no bos_token_id", t.source);
    out.push_back(t.bos);
  }
  if (t.kind == Kind::Gpt2Bpe) {
    const size_t bad = first_invalid_utf8(text);
    TQ_CHECK(bad == std::string::npos, "tokenizer: invalid UTF-8 at byte {} of the text", bad);
  }
  bool prev_special = true;
  for (const Fragment& fr : t.partition(text, parse_special)) {
    if (fr.token >= 0) {
      out.push_back(fr.token);
      prev_special = true;
      continue;
    }
    if (t.kind == Kind::Gpt2Bpe) {
      t.encode_gpt2(text, fr.off, fr.len, out);
    } else {
      std::string raw = (t.add_space_prefix && prev_special) ? " " : "";
      raw.append(text, fr.off, fr.len);
      t.encode_spm(raw, out);
    }
    prev_special = false;
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& t = *impl_;
  std::string out;
  for (const int32_t id : ids) {
    TQ_CHECK(id >= 0 && id < int32_t(t.tokens.size()), "tokenizer: token id {} out of range (vocab {})", id,
             t.tokens.size());
    const int32_t ty = t.types[id];
    const std::string& s = t.tokens[id];
    if (ty == kControl) continue;
    if (ty == kUserDefined) {
      out += s;
      continue;
    }
    if (t.kind == Kind::SentencePiece) {
      if (ty == kByte && s.size() == 6 && s.rfind("<0x", 0) == 0 && s[5] == '>') {
        auto hex = [](char ch) {
          if (ch >= '0' && ch <= '9') return ch - '0';
          if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
          if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
          return -1;
        };
        const int hi = hex(s[3]), lo = hex(s[4]);
        if (hi >= 0 && lo >= 0) {
          out += char(hi * 16 + lo);
          continue;
        }
      }
      for (size_t i = 0; i < s.size();) {
        if (s.compare(i, 3, kSpace) == 0) {
          out += ' ';
          i += 3;
        } else {
          out += s[i++];
        }
      }
    } else {
      for (size_t i = 0; i < s.size();) {
        const size_t n = std::min(utf8_len(uint8_t(s[i])), s.size() - i);
        uint32_t cp = uint8_t(s[i]);
        if (n > 1) {
          cp &= (0xFFu >> (n + 1));
          for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
        }
        auto it = t.unicode_to_byte.find(cp);
        if (it != t.unicode_to_byte.end()) out += char(it->second);
        else out.append(s, i, n);
        i += n;
      }
    }
  }
  return out;
}

Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
int32_t Tokenizer::n_vocab() const { return int32_t(impl_->tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
const std::string& Tokenizer::token_text(int32_t id) const {
  TQ_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id {} out of range (vocab {})", id, n_vocab());
  return impl_->tokens[id];
}
int32_t Tokenizer::token_type(int32_t id) const {
  TQ_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id {} out of range (vocab {})", id, n_vocab());
  return impl_->types[id];
}
int32_t Tokenizer::find_token(const std::string& text) const {
  auto it = impl_->all_ids.find(text);
  return it == impl_->all_ids.end() ? -1 : it->second;
}

}  // namespace tq

// Tokenizers built from GGUF metadata (tokenizer.ggml.*), following llama.cpp
// (docs/models.md §6).
//
//  - "gpt2": byte-level BPE. Pre-tokenizer: for pre "smollm", every \p{N}
//    character is split off first; then the GPT-2 regex (PCRE2, UTF + UCP).
//    Each piece is mapped byte → GPT-2 "bytes_to_unicode" character and merged
//    by rank (index in tokenizer.ggml.merges), lowest rank first, leftmost on
//    ties; symbols that are not tokens fall back to one token per byte.
//  - "llama": SentencePiece-style BPE. Spaces → U+2581 "▁", split into UTF-8
//    characters, repeatedly merge the adjacent pair that forms the vocab token
//    of highest score (leftmost on ties), resegment through the recorded
//    merges; anything left that is not a token becomes <0xXX> byte tokens.
//    A space prefix is added only if tokenizer.ggml.add_space_prefix says so.
//
// Special tokens: user-defined tokens (type 4) are always cut out of the text
// before the above, longest first; control tokens (type 3) only when
// parse_special is set — otherwise "<bos>" in a text is plain text. Control,
// unused and byte tokens never come out of a merge (as in SentencePiece).
// BOS is prepended when tokenizer.ggml.add_bos_token is true (default: true
// for "llama", false for "gpt2").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tq {

class GgufFile;

class Tokenizer {
 public:
  enum class Kind { Gpt2Bpe, SentencePiece };
  enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

  static Tokenizer from_gguf(const GgufFile& f);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text → token ids; prepends BOS when add_bos(). Throws tq::Error on
  // invalid UTF-8 (gpt2) since the pre-tokenizer regex needs characters.
  std::vector<int32_t> encode(const std::string& text) const { return encode(text, add_bos(), false); }
  std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special) const;
  // Ids → text: control tokens are dropped, byte tokens become their bytes.
  std::string decode(const std::vector<int32_t>& ids) const;

  Kind kind() const;
  int32_t n_vocab() const;
  int32_t bos_id() const;  // -1 when the file has none
  int32_t eos_id() const;
  bool add_bos() const;
  const std::string& token_text(int32_t id) const;  // the raw vocab string
  int32_t token_type(int32_t id) const;
  int32_t find_token(const std::string& text) const;  // -1 if absent

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Appends code point cp (< 0x110000) to s as UTF-8.
void append_utf8(std::string& s, uint32_t cp);

}  // namespace tq

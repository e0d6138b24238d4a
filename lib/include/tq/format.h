// KV formats: a key codec + a value codec + a byte layout, and the registry
// every tool takes --format names from.
//
// A name is a registered preset ("turboquant_4bit_nc", "q8_0", …; `all` lists
// them) or a spec of comma-separated options, optionally after a preset:
//   k=CODEC,v=CODEC     codecs: mse<b>[+nc|+fold] prod<b> u<b> f16 f32 fp8
//                       fp8e4b15 q8_0 q4_0 int8 int4 kivi<b> turbo<b> turbo4-qjl
//                       (a side left out stays f16)
//   rot=hadamard|rht:SEED|haar:SEED|none|auto   rotation of mse/prod codecs
//   cb=gauss|sphere|vllm|uniform|empirical:FILE codebook of mse/prod codecs
//   qjl=gauss:SEED|haar:SEED|srht:SEED         QJL projection of prod codecs
//   e.g. "k=prod3,v=u4", "k=mse3,v=mse3,rot=haar:1", "turboquant_4bit_nc,cb=gauss".
// vLLM presets use the vLLM slot layout: key part | value part, padded to an
// even size (the pad byte is written as 0); other formats are key | value.
// To add a codec: one header in tq/formats/ and one row in kCodecs; a preset: one line in kRegistry
// (both in lib/src/format/registry.cpp).
#pragma once

#include <string>
#include <vector>

#include "tq/codec.h"
#include "tq/json.h"
#include "tq/scalar_codebook.h"

namespace tq {

struct KvFormat {
  std::string name;         // what the user asked for
  std::string description;
  int head_dim = 0;
  CodecPtr key, value;
  bool vllm_slot = false;

  size_t key_bytes() const { return key->row_bytes(); }
  size_t value_bytes() const { return value->row_bytes(); }
  size_t slot_bytes() const;
  double bits_per_value() const { return 8.0 * double(slot_bytes()) / (2.0 * head_dim); }
  // Slots for n token-heads of row codecs: slot i = key(k_i) | value(v_i) | pad.
  void encode_slots(const float* k, const float* v, int64_t n, uint8_t* slots) const;
  void decode_slots(const uint8_t* slots, int64_t n, float* k, float* v) const;
};

// Builds a format for a head_dim; throws tq::Error naming the format and the
// reason when the name is unknown or the head_dim is unsupported.
KvFormat make_format(const std::string& name, int head_dim);

// What a caller supplies in place of spec options.
struct FormatOverrides {
  // When set, gives the codebook of every mse/prod codec (called with head_dim
  // and the codec's scalar bits) instead of the spec's cb= option, whose value
  // is then only a label: e.g. "k=mse3+nc,cb=empirical" with a table fitted in
  // memory (empirical_codebooks in tq/scalar_codebook.h).
  CodebookSource codebook;
};
KvFormat make_format(const std::string& name, int head_dim, const FormatOverrides& overrides);

struct FormatEntry {
  const char* name;
  const char* description;
  const char* spec;  // what the preset means as a spec
};
const std::vector<FormatEntry>& registered_formats();

// Expands "all" and splits comma-free lists; keeps order, drops duplicates.
std::vector<std::string> expand_format_names(const std::vector<std::string>& names);

// --list-formats output (text table or JSON list of {name, key_bytes,
// value_bytes, slot_bytes, bits_per_value}); unsupported head_dims show why.
std::string list_formats_text(int head_dim);
Json list_formats_json(int head_dim);

}  // namespace tq

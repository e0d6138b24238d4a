#include <algorithm>
#include <map>

#include "tq/error.h"
#include "tq/format.h"
#include "tq/formats/int_per_token.h"
#include "tq/formats/kivi.h"
#include "tq/formats/layouts.h"
#include "tq/formats/llama_blocks.h"
#include "tq/formats/mse.h"
#include "tq/formats/plain.h"
#include "tq/formats/prod.h"
#include "tq/formats/turbo.h"
#include "tq/formats/uniform.h"
#include "tq/table.h"

namespace tq {

// The registry: every preset once, as the spec it stands for.
static const std::vector<FormatEntry> kRegistry = {
    {"f16", "fp16 K and V (llama.cpp default cache; the reference)", "k=f16,v=f16"},
    {"f32", "float32 K and V (no rounding)", "k=f32,v=f32"},
    {"turboquant_k8v4", "vLLM: FP8 E4M3 keys, 4-bit min/max values", "k=fp8,v=u4,layout=vllm"},
    {"turboquant_4bit_nc", "vLLM: 4-bit Hadamard+Lloyd-Max keys (norm corr.), 4-bit values",
     "k=mse4+nc,v=u4,rot=hadamard,cb=vllm,layout=vllm"},
    {"turboquant_k3v4_nc", "vLLM: 3-bit keys (norm corr.), 4-bit values", "k=mse3+nc,v=u4,rot=hadamard,cb=vllm,layout=vllm"},
    {"turboquant_3bit_nc", "vLLM: 3-bit keys (norm corr.), 3-bit values", "k=mse3+nc,v=u3,rot=hadamard,cb=vllm,layout=vllm"},
    {"turbo2", "turboquant_plus 2-bit blocks of 128 (corrected norm)", "k=turbo2,v=turbo2"},
    {"turbo3", "turboquant_plus 3-bit blocks of 128 (2 bits + sign plane)", "k=turbo3,v=turbo3"},
    {"turbo4", "turboquant_plus 4-bit nibble blocks of 128", "k=turbo4,v=turbo4"},
    {"turbo4-qjl", "turboquant_plus legacy 3-bit + 1-bit QJL blocks of 128", "k=turbo4-qjl,v=turbo4-qjl"},
    {"q8_0", "llama.cpp q8_0 blocks of 32", "k=q8_0,v=q8_0"},
    {"q4_0", "llama.cpp q4_0 blocks of 32", "k=q4_0,v=q4_0"},
    {"fp8", "FP8 E4M3 K and V, no scale", "k=fp8,v=fp8"},
    {"fp8e4b15", "FP8 E4B15 K and V (Triton pre-sm89 encoding), no scale", "k=fp8e4b15,v=fp8e4b15"},
    {"int8", "per-token-head symmetric int8", "k=int8,v=int8"},
    {"int4", "per-token-head symmetric int4", "k=int4,v=int4"},
    {"kivi2", "KIVI 2-bit: keys per channel over 32 tokens, values per token", "k=kivi2,v=kivi2"},
    {"kivi4", "KIVI 4-bit", "k=kivi4,v=kivi4"},
};

const std::vector<FormatEntry>& registered_formats() { return kRegistry; }

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

const FormatEntry* find_preset(const std::string& name) {
  for (const auto& e : kRegistry)
    if (name == e.name) return &e;
  return nullptr;
}

struct Options {
  std::map<std::string, std::string> kv;
  void apply(const std::string& spec, const std::string& where) {
    for (const auto& tok : split(spec, ',')) {
      if (tok.empty()) continue;
      const auto eq = tok.find('=');
      TQ_CHECK(eq != std::string::npos && eq > 0, "format '{}': '{}' is not an option (expected key=value)", where, tok);
      const std::string key = tok.substr(0, eq);
      static const char* known[] = {"k", "v", "rot", "cb", "qjl", "layout"};
      TQ_CHECK(std::find(std::begin(known), std::end(known), key) != std::end(known),
               "format '{}': unknown option '{}' (expected k, v, rot, cb, qjl, layout)", where, key);
      kv[key] = tok.substr(eq + 1);
    }
  }
  std::string get(const std::string& k, const std::string& def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
};

int parse_bits(const std::string& codec, size_t prefix_len) {
  const std::string b = codec.substr(prefix_len);
  TQ_CHECK(b.size() == 1 && b[0] >= '1' && b[0] <= '8', "codec '{}': bits must be a digit 1..8", codec);
  return b[0] - '0';
}

// What a codec row's factory gets: the spec's codec name parsed by the row's pattern.
struct CodecArgs {
  const std::string& codec;  // as written ("mse3+nc")
  int bits;                  // the <b> digit (0 for fixed names)
  std::string suffix;        // the [+…] option written ("" if none)
  bool is_key;
  int d;
  const Options& o;
  const FormatOverrides& over;
  std::shared_ptr<const ScalarCodebook> codebook(int b) const {
    return over.codebook ? over.codebook(d, b) : get_scalar_codebook(o.get("cb", "gauss"), d, b);
  }
};

// The codec table (as ggml's type_traits): one row per codec — the name a spec writes ("<b>": one bits
// digit; "[+x|+y]": optional suffixes), what it is, and its factory. Record sizes and quality bounds are
// the codec classes' own (Codec::row_bytes from tq/formats/layouts.h where the GPU shares the layout;
// Codec::gaussian_nmse_bound). A new codec: its header in tq/formats/ and one row here.
struct CodecRow {
  const char* pattern;
  const char* what;
  CodecPtr (*make)(const CodecArgs&);
};
const CodecRow kCodecs[] = {
    {"f16", "fp16", [](const CodecArgs& a) -> CodecPtr { return std::make_shared<PlainCodec>(PlainKind::f16, a.d); }},
    {"f32", "float32", [](const CodecArgs& a) -> CodecPtr { return std::make_shared<PlainCodec>(PlainKind::f32, a.d); }},
    {"fp8", "FP8 E4M3, no scale",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<PlainCodec>(PlainKind::fp8_e4m3, a.d); }},
    {"fp8e4b15", "FP8 E4B15 (Triton's pre-sm89 encoding), no scale",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<PlainCodec>(PlainKind::fp8_e4b15, a.d); }},
    {"q8_0", "llama.cpp q8_0 blocks of 32",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<LlamaBlockCodec>(LlamaBlockCodec::q8_0, a.d); }},
    {"q4_0", "llama.cpp q4_0 blocks of 32",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<LlamaBlockCodec>(LlamaBlockCodec::q4_0, a.d); }},
    {"int8", "per-vector symmetric int8", [](const CodecArgs& a) -> CodecPtr { return std::make_shared<IntCodec>(8, a.d); }},
    {"int4", "per-vector symmetric int4", [](const CodecArgs& a) -> CodecPtr { return std::make_shared<IntCodec>(4, a.d); }},
    {"turbo2", "turboquant_plus 2-bit blocks of 128",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<TurboCodec>(TurboKind::turbo2, a.d); }},
    {"turbo3", "turboquant_plus 3-bit blocks of 128",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<TurboCodec>(TurboKind::turbo3, a.d); }},
    {"turbo4", "turboquant_plus 4-bit blocks of 128",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<TurboCodec>(TurboKind::turbo4, a.d); }},
    {"turbo4-qjl", "turboquant_plus 3-bit + 1-bit QJL blocks of 128",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<TurboCodec>(TurboKind::turbo4_qjl, a.d); }},
    {"kivi<b>", "KIVI: keys per channel over groups of tokens, values per token",
     [](const CodecArgs& a) -> CodecPtr {
       if (a.is_key) return std::make_shared<KiviKeyCodec>(a.bits, a.d);
       return std::make_shared<KiviValueCodec>(a.bits, a.d);
     }},
    {"u<b>", "per-vector min/max uniform codes",
     [](const CodecArgs& a) -> CodecPtr { return std::make_shared<UniformCodec>(a.bits, a.d); }},
    {"mse<b>[+nc|+fold]", "rotation + Lloyd-Max scalar codebook (+nc: norm corrected on read; +fold: into the codes)",
     [](const CodecArgs& a) -> CodecPtr {
       const NormMode norm = a.suffix == "+nc" ? NormMode::nc : a.suffix == "+fold" ? NormMode::fold : NormMode::raw;
       return std::make_shared<MseCodec>(a.bits, a.d, make_rotation(a.o.get("rot", "auto"), a.d), a.codebook(a.bits), norm,
                                         a.codec);
     }},
    {"prod<b>", "TurboQuant-prod: (b-1)-bit mse + 1-bit QJL of the residual",
     [](const CodecArgs& a) -> CodecPtr {
       auto cb = a.bits > 1 ? a.codebook(a.bits - 1) : nullptr;
       auto qjl = std::make_shared<const QjlProjection>(a.o.get("qjl", "gauss:1"), a.d);
       return std::make_shared<ProdCodec>(a.bits, a.d, make_rotation(a.o.get("rot", "auto"), a.d), cb, qjl, a.codec);
     }},
};

// Whether `codec` is written in row r's pattern; bits / suffix: what it wrote. A "<b>" row claims a name of
// its prefix, one character and one of its suffixes, and checks that character as bits (mse9: an error, not
// an unknown codec).
bool claims(const CodecRow& r, const std::string& codec, int& bits, std::string& suffix) {
  const std::string pat = r.pattern;
  const size_t at = pat.find("<b>");
  bits = 0;
  suffix.clear();
  if (at == std::string::npos) return codec == pat;
  const std::string prefix = pat.substr(0, at);
  std::string base = codec;
  if (const size_t lb = pat.find('[', at); lb != std::string::npos) {
    for (const auto& sfx : split(pat.substr(lb + 1, pat.find(']', lb) - lb - 1), '|'))
      if (base.size() > sfx.size() && base.compare(base.size() - sfx.size(), sfx.size(), sfx) == 0) {
        suffix = sfx;
        base.resize(base.size() - sfx.size());
        break;
      }
  }
  if (base.size() != prefix.size() + 1 || base.compare(0, prefix.size(), prefix) != 0) return false;
  bits = parse_bits(base, prefix.size());
  return true;
}

CodecPtr make_codec(const std::string& codec, bool is_key, int d, const Options& o, const FormatOverrides& over) {
  for (const CodecRow& r : kCodecs) {
    int bits = 0;
    std::string suffix;
    if (claims(r, codec, bits, suffix)) return r.make(CodecArgs{codec, bits, suffix, is_key, d, o, over});
  }
  std::string patterns;
  for (const CodecRow& r : kCodecs) patterns += std::string(patterns.empty() ? "" : ", ") + r.pattern;
  TQ_THROW("unknown codec '{}' (expected one of: {})", codec, patterns);
}

}  // namespace

size_t KvFormat::slot_bytes() const {
  const size_t s = key_bytes() + value_bytes();
  return vllm_slot ? size_t(layout::vllm_slot_bytes(int(key_bytes()), int(value_bytes()))) : s;
}

void KvFormat::encode_slots(const float* k, const float* v, int64_t n, uint8_t* slots) const {
  TQ_CHECK(key->group_rows() == 1 && value->group_rows() == 1, "format '{}': group codecs have no per-token slots", name);
  const size_t sb = slot_bytes(), kb = key_bytes(), vb = value_bytes();
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* s = slots + size_t(i) * sb;
    key->encode(k + size_t(i) * size_t(head_dim), 1, s);
    value->encode(v + size_t(i) * size_t(head_dim), 1, s + kb);
    for (size_t p = kb + vb; p < sb; ++p) s[p] = 0;
  }
}

void KvFormat::decode_slots(const uint8_t* slots, int64_t n, float* k, float* v) const {
  TQ_CHECK(key->group_rows() == 1 && value->group_rows() == 1, "format '{}': group codecs have no per-token slots", name);
  const size_t sb = slot_bytes(), kb = key_bytes();
  for (int64_t i = 0; i < n; ++i) {
    key->decode(slots + size_t(i) * sb, 1, k + size_t(i) * size_t(head_dim));
    value->decode(slots + size_t(i) * sb + kb, 1, v + size_t(i) * size_t(head_dim));
  }
}

KvFormat make_format(const std::string& name, int head_dim) { return make_format(name, head_dim, FormatOverrides{}); }

KvFormat make_format(const std::string& name, int head_dim, const FormatOverrides& overrides) {
  TQ_CHECK(!name.empty(), "empty format name");
  TQ_CHECK(head_dim >= 1 && head_dim <= kMaxHeadDim, "format '{}': head_dim {} out of range", name, head_dim);
  Options o;
  std::string desc;
  const auto first = split(name, ',').front();
  std::string rest = name;
  if (first.find('=') == std::string::npos) {
    const FormatEntry* e = find_preset(first);
    if (!e) {
      std::string known;
      for (const auto& r : kRegistry) known += std::string(known.empty() ? "" : ", ") + r.name;
      TQ_THROW("unknown format '{}' (registered: {}; or a spec such as k=mse4+nc,v=u4)", first, known);
    }
    o.apply(e->spec, name);
    desc = e->description;
    rest = name.size() > first.size() ? name.substr(first.size() + 1) : "";
  }
  o.apply(rest, name);
  KvFormat f;
  f.name = name;
  f.head_dim = head_dim;
  f.description = desc.empty() ? "spec" : desc;
  const std::string layout = o.get("layout", "plain");
  TQ_CHECK(layout == "plain" || layout == "vllm", "format '{}': layout '{}' unknown (plain or vllm)", name, layout);
  f.vllm_slot = layout == "vllm";
  try {
    f.key = make_codec(o.get("k", "f16"), true, head_dim, o, overrides);
    f.value = make_codec(o.get("v", "f16"), false, head_dim, o, overrides);
  } catch (const Error& e) {
    throw Error(fmt::format("format '{}' at head_dim {}: {}", name, head_dim, e.what()), e.location());
  }
  return f;
}

std::vector<std::string> expand_format_names(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  for (const auto& n : names) {
    if (n == "all") {
      for (const auto& e : kRegistry) add(e.name);
    } else {
      add(n);
    }
  }
  return out;
}

std::string list_formats_text(int head_dim) {
  Table t({"name", "key_bytes", "value_bytes", "slot_bytes", "bits_per_value", "description"});
  for (const auto& e : kRegistry) {
    try {
      const KvFormat f = make_format(e.name, head_dim);
      t.add({e.name, std::to_string(f.key_bytes()), std::to_string(f.value_bytes()), std::to_string(f.slot_bytes()),
             fmt::format("{:.3f}", f.bits_per_value()), e.description});
    } catch (const Error& err) {
      t.add({e.name, "-", "-", "-", "-", std::string("unsupported: ") + err.what()});
    }
  }
  return fmt::format("KV formats at head_dim {} (bytes per token-head; blocks of 128 count whole blocks)\n", head_dim) +
         t.text();
}

Json list_formats_json(int head_dim) {
  Json out = Json::array();
  for (const auto& e : kRegistry) {
    Json j = {{"name", e.name}};
    try {
      const KvFormat f = make_format(e.name, head_dim);
      j["key_bytes"] = f.key_bytes();
      j["value_bytes"] = f.value_bytes();
      j["slot_bytes"] = f.slot_bytes();
      j["bits_per_value"] = f.bits_per_value();
    } catch (const Error& err) {
      j["unsupported"] = err.what();
    }
    j["description"] = e.description;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace tq

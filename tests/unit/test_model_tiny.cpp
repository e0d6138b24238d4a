// The forward passes on tiny random models (GGUF files written by the test)
// against a naive float64 reference written from docs/models.md: RMSNorm, RoPE
// NORM vs NEOX pairing, GQA, SwiGLU vs GELU-tanh, Gemma's embedding scale,
// QK-norm, post-norms, sliding window and per-layer RoPE bases, Qwen2's Q/K/V
// biases and untied output. No model files needed; runs under the sanitizers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tq/error.h"
#include "tq/kv_store_basic.h"
#include "tq/model.h"
#include "tq/rng.h"

using namespace tq;

namespace {

// ---- a compact GGUF writer (metadata + F32 tensors) ------------------------
struct File {
  std::vector<uint8_t> kv;
  uint64_t n_kv = 0;
  std::vector<std::pair<std::string, std::pair<std::vector<uint64_t>, std::vector<float>>>> tensors;

  static void put(std::vector<uint8_t>& b, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
  }
  static void put_str(std::vector<uint8_t>& b, const std::string& s) {
    put(b, s.size(), 8);
    b.insert(b.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t t) {
    put_str(kv, k);
    put(kv, t, 4);
    ++n_kv;
  }
  void str(const std::string& k, const std::string& v) { key(k, 8), put_str(kv, v); }
  void u32(const std::string& k, uint32_t v) { key(k, 4), put(kv, v, 4); }
  void f32(const std::string& k, float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    key(k, 6), put(kv, u, 4);
  }
  void strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9), put(kv, 8, 4), put(kv, v.size(), 8);
    for (auto& s : v) put_str(kv, s);
  }
  void tensor(const std::string& name, std::vector<uint64_t> ne, std::vector<float> data) {
    tensors.push_back({name, {std::move(ne), std::move(data)}});
  }
  void write(const std::string& path) const {
    std::vector<uint8_t> b;
    put(b, 0x46554747u, 4), put(b, 3, 4), put(b, tensors.size(), 8), put(b, n_kv, 8);
    b.insert(b.end(), kv.begin(), kv.end());
    uint64_t off = 0;
    for (auto& [name, t] : tensors) {
      put_str(b, name);
      put(b, t.first.size(), 4);
      for (uint64_t n : t.first) put(b, n, 8);
      put(b, 0, 4);  // F32
      put(b, off, 8);
      off += (t.second.size() * 4 + 31) / 32 * 32;
    }
    while (b.size() % 32) b.push_back(0);
    for (auto& [name, t] : tensors) {
      const size_t start = b.size();
      for (float x : t.second) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        put(b, u, 4);
      }
      while ((b.size() - start) % 32) b.push_back(0);
    }
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
};

// ---- the tiny model and its float64 reference ------------------------------
struct Spec {
  std::string arch;
  int layers, embd, ff, heads, kv_heads, hd, window;
  float theta;
};

// Deliberate defects in the written file (bad-input tests).
struct Faults {
  std::string omit;                                      // a tensor left out
  std::map<std::string, std::vector<uint64_t>> reshape;  // tensors written with a wrong shape
  std::map<std::string, uint32_t> meta;                  // u32 metadata written with these values instead
  std::map<std::string, float> meta_f32;                 // f32 metadata likewise
};

using Mat = std::vector<double>;  // row-major [out, in]
struct Weights {
  std::map<std::string, Mat> m;
  std::map<std::string, std::vector<uint64_t>> shape;
};

// GPT-2 byte vocabulary: control token 0, byte b at id 1 + b.
std::vector<std::string> byte_vocab() {
  std::vector<std::string> v{"<|endoftext|>"};
  int k = 0;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = keep ? b : 256 + k++;
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    v.push_back(s);
  }
  return v;
}

Weights make_model(const Spec& s, const std::string& path, uint64_t seed, const Faults& faults = {}) {
  Rng rng(seed);
  File f;
  Weights w;
  const std::string a = s.arch + ".";
  const bool gemma = s.arch == "gemma3", qwen2 = s.arch == "qwen2";
  const int vocab = 257;
  // v, or the value faults give the key in `over`
  const auto or_fault = [](const auto& over, const std::string& key, auto v) {
    const auto it = over.find(key);
    return it == over.end() ? v : it->second;
  };
  const auto u32 = [&](const std::string& key, uint32_t v) { f.u32(key, or_fault(faults.meta, key, v)); };
  const auto f32 = [&](const std::string& key, float v) { f.f32(key, or_fault(faults.meta_f32, key, v)); };
  f.str("general.architecture", s.arch);
  f.str("general.name", "tiny-" + s.arch);
  u32(a + "block_count", uint32_t(s.layers));
  u32(a + "embedding_length", uint32_t(s.embd));
  u32(a + "feed_forward_length", uint32_t(s.ff));
  u32(a + "attention.head_count", uint32_t(s.heads));
  u32(a + "attention.head_count_kv", uint32_t(s.kv_heads));
  if (!qwen2) {  // qwen2 GGUFs have no key_length: head_dim = n_embd / n_head
    u32(a + "attention.key_length", uint32_t(s.hd));
    u32(a + "attention.value_length", uint32_t(s.hd));
  }
  f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  f32(a + "rope.freq_base", s.theta);
  if (gemma) u32(a + "attention.sliding_window", uint32_t(s.window));
  f.str("tokenizer.ggml.model", "gpt2");
  f.str("tokenizer.ggml.pre", "gpt2");
  f.strs("tokenizer.ggml.tokens", byte_vocab());
  f.strs("tokenizer.ggml.merges", {});
  auto add = [&](const std::string& name, std::vector<uint64_t> ne, std::vector<float> d) {
    w.m[name] = Mat(d.begin(), d.end());
    if (name == faults.omit) return;
    if (auto it = faults.reshape.find(name); it != faults.reshape.end()) {
      ne = it->second;
      uint64_t n = 1;
      for (uint64_t x : ne) n *= x;
      d.resize(n, 0.5f);
    }
    f.tensor(name, std::move(ne), std::move(d));
  };
  auto mat = [&](const std::string& name, int in, int out, double scale) {
    std::vector<float> d(size_t(in) * size_t(out));
    for (float& x : d) x = float(scale * rng.gaussian());
    add(name, {uint64_t(in), uint64_t(out)}, std::move(d));
  };
  auto norm = [&](const std::string& name, int n) {
    std::vector<float> d(static_cast<size_t>(n));
    for (float& x : d) x = float(1.0 + 0.2 * rng.gaussian());
    add(name, {uint64_t(n)}, std::move(d));
  };
  // Biases large against the unit-scale projections, as Qwen2's K bias is
  // (layer 0: |b| up to ~354 against keys of norm ~20 without it).
  auto bias = [&](const std::string& name, int n, double scale) {
    std::vector<float> d(static_cast<size_t>(n));
    for (float& x : d) x = float(scale * rng.gaussian());
    add(name, {uint64_t(n)}, std::move(d));
  };
  mat("token_embd.weight", s.embd, vocab, gemma ? 0.2 : 1.0);
  norm("output_norm.weight", s.embd);
  if (qwen2) mat("output.weight", s.embd, vocab, 0.5);  // untied
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    norm(b + "attn_norm.weight", s.embd);
    norm(b + "ffn_norm.weight", s.embd);
    mat(b + "attn_q.weight", s.embd, s.heads * s.hd, 0.4);
    mat(b + "attn_k.weight", s.embd, s.kv_heads * s.hd, 0.4);
    mat(b + "attn_v.weight", s.embd, s.kv_heads * s.hd, 0.4);
    if (qwen2) {
      bias(b + "attn_q.bias", s.heads * s.hd, 0.5);
      bias(b + "attn_k.bias", s.kv_heads * s.hd, 3.0);
      bias(b + "attn_v.bias", s.kv_heads * s.hd, 0.5);
    }
    mat(b + "attn_output.weight", s.heads * s.hd, s.embd, 0.3);
    mat(b + "ffn_gate.weight", s.embd, s.ff, 0.3);
    mat(b + "ffn_up.weight", s.embd, s.ff, 0.3);
    mat(b + "ffn_down.weight", s.ff, s.embd, 0.3);
    if (gemma) {
      norm(b + "attn_q_norm.weight", s.hd);
      norm(b + "attn_k_norm.weight", s.hd);
      norm(b + "post_attention_norm.weight", s.embd);
      norm(b + "post_ffw_norm.weight", s.embd);
    }
  }
  f.write(path);
  return w;
}

std::vector<double> matvec(const Mat& W, const std::vector<double>& x, int out) {
  const size_t in = x.size();
  std::vector<double> y(static_cast<size_t>(out), 0.0);
  for (int r = 0; r < out; ++r)
    for (size_t c = 0; c < in; ++c) y[size_t(r)] += W[size_t(r) * in + c] * x[c];
  return y;
}

void rmsnorm(double* x, int n, const Mat& w, double eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const double s = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) x[i] = x[i] * s * w[size_t(i)];
}

// Naive forward: logits [n, vocab] in double, following docs/models.md literally.
std::vector<std::vector<double>> reference(const Spec& s, Weights& w, const std::vector<int32_t>& tok,
                                           bool window_on = true) {
  const bool gemma = s.arch == "gemma3", qwen2 = s.arch == "qwen2";
  const int n = int(tok.size()), E = s.embd, hd = s.hd, vocab = 257;
  const double eps = 1e-6;
  std::vector<std::vector<double>> h(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(E)));
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < E; ++c)
      h[size_t(i)][size_t(c)] = w.m["token_embd.weight"][size_t(tok[size_t(i)]) * E + c] * (gemma ? std::sqrt(double(E)) : 1.0);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool global = !gemma || l % 6 == 5;
    const double theta = gemma && !global ? 10000.0 : s.theta;
    const int window = gemma && !global && window_on ? s.window : 0;
    std::vector<std::vector<double>> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      std::vector<double> a = h[size_t(i)];
      rmsnorm(a.data(), E, w.m[b + "attn_norm.weight"], eps);
      q[size_t(i)] = matvec(w.m[b + "attn_q.weight"], a, s.heads * hd);
      k[size_t(i)] = matvec(w.m[b + "attn_k.weight"], a, s.kv_heads * hd);
      v[size_t(i)] = matvec(w.m[b + "attn_v.weight"], a, s.kv_heads * hd);
      if (qwen2) {  // biases before RoPE
        for (const char* t : {"q", "k", "v"}) {
          std::vector<double>& x = *t == 'q' ? q[size_t(i)] : *t == 'k' ? k[size_t(i)] : v[size_t(i)];
          const Mat& bb = w.m[b + "attn_" + t + ".bias"];
          for (size_t c = 0; c < x.size(); ++c) x[c] += bb[c];
        }
      }
      auto rope = [&](std::vector<double>& x, int nh) {
        for (int hh = 0; hh < nh; ++hh) {
          double* p = x.data() + hh * hd;
          if (gemma) {
            rmsnorm(p, hd, w.m[b + (&x == &q[size_t(i)] ? "attn_q_norm.weight" : "attn_k_norm.weight")], eps);
          }
          for (int j = 0; j < hd / 2; ++j) {
            const double ang = i * std::pow(theta, -2.0 * j / hd);
            const bool neox = gemma || qwen2;
            const int i0 = neox ? j : 2 * j, i1 = neox ? j + hd / 2 : 2 * j + 1;  // NEOX vs NORM
            const double x0 = p[i0], x1 = p[i1];
            p[i0] = x0 * std::cos(ang) - x1 * std::sin(ang);
            p[i1] = x0 * std::sin(ang) + x1 * std::cos(ang);
          }
        }
      };
      rope(q[size_t(i)], s.heads);
      rope(k[size_t(i)], s.kv_heads);
    }
    for (int i = 0; i < n; ++i) {
      std::vector<double> o(size_t(s.heads) * hd, 0.0);
      for (int hh = 0; hh < s.heads; ++hh) {
        const int g = hh / (s.heads / s.kv_heads);
        std::vector<double> sc;
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += q[size_t(i)][size_t(hh * hd + c)] * k[size_t(j)][size_t(g * hd + c)];
          d /= std::sqrt(double(hd));
          if (window > 0 && i - j >= window) d = -INFINITY;
          sc.push_back(d);
          mx = std::max(mx, d);
        }
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - mx));
        for (int j = 0; j <= i; ++j)
          for (int c = 0; c < hd; ++c) o[size_t(hh * hd + c)] += sc[size_t(j)] / z * v[size_t(j)][size_t(g * hd + c)];
      }
      std::vector<double> t = matvec(w.m[b + "attn_output.weight"], o, E);
      if (gemma) rmsnorm(t.data(), E, w.m[b + "post_attention_norm.weight"], eps);
      for (int c = 0; c < E; ++c) h[size_t(i)][size_t(c)] += t[size_t(c)];
      std::vector<double> f = h[size_t(i)];
      rmsnorm(f.data(), E, w.m[b + "ffn_norm.weight"], eps);
      std::vector<double> gt = matvec(w.m[b + "ffn_gate.weight"], f, s.ff), up = matvec(w.m[b + "ffn_up.weight"], f, s.ff);
      for (int c = 0; c < s.ff; ++c) {
        const double x = gt[size_t(c)];
        const double act = gemma ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                                 : x / (1 + std::exp(-x));
        gt[size_t(c)] = act * up[size_t(c)];
      }
      std::vector<double> d = matvec(w.m[b + "ffn_down.weight"], gt, E);
      if (gemma) rmsnorm(d.data(), E, w.m[b + "post_ffw_norm.weight"], eps);
      for (int c = 0; c < E; ++c) h[size_t(i)][size_t(c)] += d[size_t(c)];
    }
  }
  std::vector<std::vector<double>> logits;
  for (int i = 0; i < n; ++i) {
    std::vector<double> x = h[size_t(i)];
    rmsnorm(x.data(), E, w.m["output_norm.weight"], eps);
    logits.push_back(matvec(w.m[qwen2 ? "output.weight" : "token_embd.weight"], x, vocab));
  }
  return logits;
}

double max_rel_err(const RowMatrix& got, const std::vector<std::vector<double>>& want, int64_t from) {
  double err = 0, scale = 0;
  for (int64_t r = 0; r < got.rows(); ++r)
    for (int64_t c = 0; c < got.cols(); ++c) {
      err = std::max(err, std::fabs(double(got(r, c)) - want[size_t(from + r)][size_t(c)]));
      scale = std::max(scale, std::fabs(want[size_t(from + r)][size_t(c)]));
    }
  return err / scale;
}

std::vector<int32_t> random_tokens(int n, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(1 + r.below(256)));
  return t;
}

struct TempPath {
  std::string p;
  explicit TempPath(std::string s) : p(std::move(s)) {}
  ~TempPath() { std::remove(p.c_str()); }
};

}  // namespace

TEST_CASE("tiny llama: forward matches a float64 reference (NORM RoPE, GQA, SwiGLU)", "[model_tiny]") {
  const Spec s{"llama", 2, 32, 48, 4, 2, 8, 0, 10000.0f};
  TempPath path("tq_test_tiny_llama.gguf");
  Weights w = make_model(s, path.p, 1);
  const Model m = Model::load(path.p, false);
  CHECK(m.config().head_dim == 8);
  CHECK_FALSE(m.config().rope_neox);
  const auto tok = random_tokens(70, 2);  // > one 64-row attention block
  const auto want = reference(s, w, tok);
  for (int threads : {1, 2}) {
    ForwardOptions o;
    o.n_threads = threads;
    const RowMatrix got = m.forward(tok, nullptr, 0, nullptr, o);
    REQUIRE(got.rows() == 70);
    REQUIRE(got.cols() == 257);
    CHECK(max_rel_err(got, want, 0) < 2e-5);
    const RowMatrix tail = m.forward(tok, nullptr, 65, nullptr, o);
    CHECK(max_rel_err(tail, want, 65) < 2e-5);
  }
  // An fp16 KV round trip moves the logits a little.
  F16Store f16;
  const RowMatrix h = m.forward(tok, &f16, 0);
  CHECK(max_rel_err(h, want, 0) < 2e-2);
  CHECK(max_rel_err(h, want, 0) > 0);
}

TEST_CASE("tiny gemma3: forward matches a float64 reference (NEOX, QK-norm, window, bases)", "[model_tiny]") {
  const Spec s{"gemma3", 6, 24, 40, 2, 1, 16, 5, 1e6f};
  TempPath path("tq_test_tiny_gemma.gguf");
  Weights w = make_model(s, path.p, 3);
  const Model m = Model::load(path.p, false);
  const ModelConfig& c = m.config();
  CHECK(c.rope_neox);
  CHECK(c.head_dim == 16);  // key_length, not n_embd / n_heads
  CHECK(c.layers[0].sliding_window == 5);
  CHECK(c.layers[5].sliding_window == 0);
  CHECK(c.layers[0].rope_theta == 10000.0f);
  CHECK(c.layers[5].rope_theta == 1e6f);
  CHECK(c.layers[0].attn_scale == 0.25f);
  const auto tok = random_tokens(20, 4);
  const auto want = reference(s, w, tok);
  const RowMatrix got = m.forward(tok, nullptr, 0);
  CHECK(max_rel_err(got, want, 0) < 2e-5);
  // The window matters, and disabling it matches the reference without it.
  ForwardOptions global;
  global.disable_sliding_window = true;
  const auto want_global = reference(s, w, tok, false);
  const RowMatrix g = m.forward(tok, nullptr, 0, nullptr, global);
  CHECK(max_rel_err(g, want_global, 0) < 2e-5);
  CHECK(max_rel_err(g, want, 0) > 1e-3);
  CHECK((g.topRows(5) - got.topRows(5)).cwiseAbs().maxCoeff() == 0.0f);  // positions < window: unaffected
}

TEST_CASE("tiny qwen2: forward matches a float64 reference (biases, NEOX, head_dim, untied output)", "[model_tiny]") {
  const Spec s{"qwen2", 2, 32, 48, 4, 2, 8, 0, 1e6f};
  TempPath path("tq_test_tiny_qwen2.gguf");
  Weights w = make_model(s, path.p, 11);
  const Model m = Model::load(path.p, false);
  const ModelConfig& c = m.config();
  CHECK(c.head_dim == 8);  // n_embd / n_head: the file has no key_length
  CHECK(c.rope_neox);
  CHECK(c.qkv_bias);
  CHECK(c.layers[1].rope_theta == 1e6f);
  const auto tok = random_tokens(70, 12);
  const auto want = reference(s, w, tok);
  const RowMatrix got = m.forward(tok, nullptr, 0);
  CHECK(max_rel_err(got, want, 0) < 2e-5);
  // Without the biases the reference differs: they matter at this scale.
  Weights nob = w;
  for (int l = 0; l < 2; ++l)
    for (const char* t : {"q", "k", "v"})
      for (double& x : nob.m["blk." + std::to_string(l) + ".attn_" + t + ".bias"]) x = 0;
  CHECK(max_rel_err(got, reference(s, nob, tok), 0) > 1e-2);
  // The captured keys carry the bias.
  struct Cap : LayerCapture {
    std::vector<float> k0;
    void capture(int layer, int64_t n, const float*, const float* k, const float*) override {
      if (layer == 0) k0.assign(k, k + n * 2 * 8);
    }
  } cap;
  m.forward(tok, nullptr, 0, &cap);
  double mean0 = 0;  // position 0 is not rotated: its key is Wk·a + bk exactly
  for (int i = 0; i < 8; ++i) mean0 += std::fabs(cap.k0[size_t(i)] - w.m["blk.0.attn_k.bias"][size_t(i)]);
  CHECK(mean0 / 8 < 4.0);  // |Wk·a| ~ 0.4·√32 ≈ 2.3 per coordinate, the bias ~3
}

TEST_CASE("tiny qwen2: a missing or misshapen bias is named", "[model_tiny]") {
  const Spec s{"qwen2", 1, 32, 48, 4, 2, 8, 0, 1e6f};
  TempPath p1("tq_test_tiny_qwen2_nobias.gguf");
  make_model(s, p1.p, 13, Faults{"blk.0.attn_k.bias", {}, {}, {}});
  CHECK_THROWS_WITH(Model::load(p1.p, false), Catch::Contains("tensor 'blk.0.attn_k.bias' is missing"));
  TempPath p2("tq_test_tiny_qwen2_badbias.gguf");
  make_model(s, p2.p, 13, Faults{"", {{"blk.0.attn_v.bias", {12}}}, {}, {}});
  CHECK_THROWS_WITH(Model::load(p2.p, false),
                    Catch::Contains("tensor 'blk.0.attn_v.bias' has shape [12], expected [16]"));
  TempPath p3("tq_test_tiny_qwen2_badq.gguf");
  make_model(s, p3.p, 13, Faults{"", {{"blk.0.attn_q.weight", {32, 30}}}, {}, {}});
  CHECK_THROWS_WITH(Model::load(p3.p, false), Catch::Contains("tensor 'blk.0.attn_q.weight' has shape"));
}

// Hyperparameters whose products would overflow int (n_heads · head_dim: 4 · 2^30) are refused by name.
TEST_CASE("tiny models: implausible head counts and head dims are named", "[model_tiny]") {
  const Spec s{"llama", 1, 32, 48, 4, 2, 8, 0, 10000.0f};
  TempPath p1("tq_test_tiny_llama_hd.gguf");
  const std::map<std::string, uint32_t> huge_hd{{"llama.attention.key_length", 1u << 30},
                                                {"llama.attention.value_length", 1u << 30}};
  make_model(s, p1.p, 3, Faults{"", {}, huge_hd, {}});
  CHECK_THROWS_WITH(Model::load(p1.p, false), Catch::Contains("key_length 1073741824 / value_length 1073741824"));
  TempPath p2("tq_test_tiny_llama_heads.gguf");
  make_model(s, p2.p, 3, Faults{"", {}, {{"llama.attention.head_count", 1u << 13}}, {}});
  CHECK_THROWS_WITH(Model::load(p2.p, false),
                    Catch::Contains("implausible hyperparameters: 1 layers, n_embd 32, n_ff 48, 8192 heads"));
  TempPath p3("tq_test_tiny_llama_embd.gguf");
  make_model(s, p3.p, 3, Faults{"", {}, {{"llama.embedding_length", 0x7fffffffu}}, {}});
  CHECK_THROWS_WITH(Model::load(p3.p, false), Catch::Contains("n_embd 2147483647"));
}

// Random tiny models (random shapes, one fault each from the ones a damaged or foreign GGUF shows: a tensor
// left out or misshapen, a hyperparameter 0, odd, huge or negative as int, a NaN or infinite float) either load
// and give finite logits, or fail with a tq::Error; under ASan/UBSan (CI) nothing else may happen on the way.
TEST_CASE("tiny models: random shapes and faults load or fail with a clear error", "[model_tiny]") {
  Rng r(2026);
  const char* archs[] = {"llama", "gemma3", "qwen2"};
  const uint32_t ints[] = {0u, 1u, 3u, 7u, 4096u, 4097u, 1u << 20, 1u << 30, 0x7fffffffu, 0x80000000u, 0xffffffffu};
  const float floats[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0f,
                          0.0f, 1e-30f, 1e30f};
  int loaded = 0, refused = 0;
  for (int i = 0; i < 150; ++i) {
    const int heads = int(1 + r.below(4));
    const Spec s{archs[r.below(3)], int(1 + r.below(2)), 8 * int(1 + r.below(4)), 8 * int(1 + r.below(4)), heads,
                 r.coin() ? heads : int(1 + r.below(4)), 2 * int(1 + r.below(4)), int(r.below(3)), 10000.0f};
    const std::string a = s.arch + ".", b = "blk.0.";
    const std::vector<std::string> tensors{"token_embd.weight", "output_norm.weight", b + "attn_norm.weight",
                                           b + "attn_q.weight",     b + "attn_k.weight",  b + "attn_v.weight",
                                           b + "attn_output.weight", b + "ffn_up.weight", b + "ffn_down.weight"};
    const std::vector<std::string> ukeys{a + "block_count", a + "embedding_length", a + "feed_forward_length",
                                         a + "attention.head_count", a + "attention.head_count_kv",
                                         a + "attention.key_length", a + "attention.sliding_window"};
    Faults faults;
    switch (r.below(5)) {
      case 0: faults.omit = tensors[r.below(tensors.size())]; break;
      case 1: faults.reshape[tensors[r.below(tensors.size())]] = {8 * (1 + r.below(3)), 1 + r.below(9)}; break;
      case 2: faults.meta[ukeys[r.below(ukeys.size())]] = ints[r.below(std::size(ints))]; break;
      case 3: faults.meta_f32[a + (r.coin() ? "rope.freq_base" : "attention.layer_norm_rms_epsilon")] =
                  floats[r.below(std::size(floats))]; break;
      default: break;  // the shapes alone
    }
    INFO("model " << i << ": " << s.arch << " layers " << s.layers << " embd " << s.embd << " ff " << s.ff << " heads "
                  << s.heads << "/" << s.kv_heads << " hd " << s.hd);
    TempPath p("tq_test_tiny_random.gguf");
    make_model(s, p.p, uint64_t(100 + i), faults);
    try {
      const Model m = Model::load(p.p, false);
      const RowMatrix lg = m.forward(random_tokens(5, uint64_t(i)), nullptr, 0);
      REQUIRE(lg.rows() == 5);
      REQUIRE(lg.allFinite());
      ++loaded;
    } catch (const Error&) {
      ++refused;
    }
  }
  CHECK(loaded >= 20);  // both outcomes are exercised
  CHECK(refused >= 20);
}

// A NaN, infinite or negative RMSNorm epsilon or RoPE base would make every logit NaN: refused by name.
TEST_CASE("tiny models: invalid RMSNorm epsilon and RoPE base are named", "[model_tiny]") {
  const Spec s{"llama", 1, 32, 48, 4, 2, 8, 0, 10000.0f};
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::string eps = "llama.attention.layer_norm_rms_epsilon", base = "llama.rope.freq_base";
  for (const auto& [key, v] :
       std::vector<std::pair<std::string, float>>{{eps, nan}, {eps, -1e-6f}, {base, inf}, {base, 0.0f}}) {
    INFO(key << " " << v);
    TempPath p("tq_test_tiny_llama_eps.gguf");
    make_model(s, p.p, 3, Faults{"", {}, {}, {{key, v}}});
    CHECK_THROWS_WITH(Model::load(p.p, false), Catch::Contains("rope.freq_base") && Catch::Contains("are invalid"));
  }
  TempPath ok("tq_test_tiny_llama_eps0.gguf");  // epsilon 0 is valid (RMSNorm of a nonzero row)
  make_model(s, ok.p, 3, Faults{"", {}, {}, {{eps, 0.0f}}});
  CHECK_NOTHROW(Model::load(ok.p, false));
}

TEST_CASE("tiny models: captures, stores and bad input", "[model_tiny]") {
  const Spec s{"llama", 2, 32, 48, 4, 2, 8, 0, 10000.0f};
  TempPath path("tq_test_tiny_llama2.gguf");
  make_model(s, path.p, 5);
  const Model m = Model::load(path.p, false);
  struct Cap : LayerCapture {
    std::vector<int> layers;
    void capture(int layer, int64_t n, const float* q, const float* k, const float* v) override {
      layers.push_back(layer);
      for (int64_t i = 0; i < n * 4 * 8; ++i) REQUIRE(std::isfinite(q[i]));
      for (int64_t i = 0; i < n * 2 * 8; ++i) REQUIRE((std::isfinite(k[i]) && std::isfinite(v[i])));
    }
  } cap;
  // A store that zeroes V: attention outputs vanish, logits change.
  struct ZeroV : KvStore {
    void roundtrip(int, int64_t n, int nkv, int hd, const float* k, const float*, float* ko, float* vo) override {
      for (int64_t i = 0; i < n * nkv * hd; ++i) ko[i] = k[i], vo[i] = 0.0f;
    }
  } zero;
  const auto tok = random_tokens(9, 6);
  const RowMatrix a = m.forward(tok, nullptr, 0, &cap), z = m.forward(tok, &zero, 0);
  CHECK(cap.layers == std::vector<int>{0, 1});
  CHECK((a - z).cwiseAbs().maxCoeff() > 1e-3f);
  CHECK_THROWS_AS(m.forward({}, nullptr, 0), Error);
  CHECK_THROWS_AS(m.forward({300}, nullptr, 0), Error);
  CHECK_THROWS_AS(m.forward(tok, nullptr, 10), Error);

  File bad;
  bad.str("general.architecture", "bert");
  TempPath bp("tq_test_tiny_bert.gguf");
  bad.write(bp.p);
  CHECK_THROWS_WITH(Model::load(bp.p, false), Catch::Contains("architecture 'bert' is not supported"));
  CHECK_THROWS_WITH(Model::load(bp.p, false), Catch::Contains("supported: llama, gemma3, qwen2"));
  CHECK(make_kv_store("f16") != nullptr);
  CHECK_THROWS_WITH(make_kv_store("q9"), Catch::Contains("unknown format 'q9'"));
  KvStoreOptions so;
  so.n_layers = 4;
  so.head_dim = 64;
  so.skip_layers = "first1";
  CHECK(make_kv_store("turboquant_4bit_nc", so) != nullptr);
  CHECK_THROWS_WITH(make_kv_store("turboquant_4bit_nc", KvStoreOptions{}), Catch::Contains("head_dim"));
  so.head_dim = 96;
  CHECK_THROWS_WITH(make_kv_store("turboquant_4bit_nc", so), Catch::Contains("power of two"));
}

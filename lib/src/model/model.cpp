#include "tq/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numbers>

#include <Eigen/Dense>
#include <fmt/format.h>

#include "tq/error.h"
#include "tq/gguf.h"
#include "tq/parallel.h"
#include "gemm.h"
#include "gemm_int8.h"

namespace tq {

namespace {

using Vec = Eigen::VectorXf;

// A weight matrix W [out, in]: float32 panels, or (MatmulMode::int8, weights
// with integer codes) the codes.
struct Weight {
  detail::PackedMatrix f32;
  detail::Int8Matrix i8;
  int64_t rows() const { return i8.empty() ? f32.rows() : i8.rows(); }
  int64_t cols() const { return i8.empty() ? f32.cols() : i8.cols(); }
};

// Y = X · Wᵀ (X [n, in] with leading dimension ldx, W [out, in] pre-packed,
// Y [n, out]). Threads take 256-column chunks from a shared counter, so a core
// slowed by a neighbour on this shared VM does not hold the other back (a
// static half each ran 25-35% slower in such runs); each chunk streams its
// share of W once and all share X, which stays in cache.
void matmul_t(const float* X, int64_t n, int64_t ldx, const Weight& W, RowMatrix& Y, int n_threads) {
  Y.resize(n, W.rows());
  const int64_t out = W.rows();
  constexpr int64_t kChunk = 16 * detail::PackedMatrix::kPanel;
  auto chunks = [&](auto&& product) {  // product(c0, c1) writes Y's columns [c0, c1)
    parallel_for(n_threads, (out + kChunk - 1) / kChunk,
                 [&](int64_t t) { product(t * kChunk, std::min(out, t * kChunk + kChunk)); });
  };
  if (!W.i8.empty()) {
    const detail::Int8Rows xq(n, X, ldx, W.cols(), W.i8.group(), n_threads);
    chunks([&](int64_t c0, int64_t c1) { detail::gemm_int8(xq, W.i8, c0, c1, Y.data() + c0, out); });
  } else {
    const detail::PackedRows xp(n, X, ldx, W.cols());
    chunks([&](int64_t c0, int64_t c1) { detail::gemm_packed(xp, W.f32, c0, c1, Y.data() + c0, out); });
  }
}

void matmul_t(const RowMatrix& X, const Weight& W, RowMatrix& Y, int n_threads) {
  TQ_ASSERT(X.cols() == W.cols());
  matmul_t(X.data(), X.rows(), X.cols(), W, Y, n_threads);
}

// In place: each row x of X (or each head_dim segment when seg > 0) becomes
// x / sqrt(mean(x²) + eps) · w. Sum of squares in double, as ggml does.
void rms_norm_rows(float* x, int64_t rows, int64_t width, const Vec& w, float eps) {
  TQ_ASSERT(w.size() == width);
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * width;
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += double(p[i]) * double(p[i]);
    const float scale = float(1.0 / std::sqrt(ss / double(width) + double(eps)));
    for (int64_t i = 0; i < width; ++i) p[i] = p[i] * scale * w[i];
  }
}

struct Layer {
  Vec attn_norm, ffn_norm, q_norm, k_norm, post_attn_norm, post_ffw_norm;
  Vec bq, bk, bv;  // qwen2: projection biases (empty otherwise)
  // Q, K, V stacked in one matrix [q_dim + 2·kv_dim, n_embd] and gate, up in
  // one [2·n_ff, n_embd]: one product each instead of three and two (the
  // 256-row K and V products of Qwen2.5-1.5B ran at half the large ones' rate).
  Weight wqkv, wo, w_gate_up, w_down;
};

// Adds b to every row of X [n, b.size()].
void add_bias(RowMatrix& X, const Vec& b) {
  if (b.size() == 0) return;
  TQ_ASSERT(X.cols() == b.size());
  X.rowwise() += b.transpose();
}

}  // namespace

struct Model::Impl {
  ModelConfig cfg;
  Tokenizer tok;
  std::string log;
  Weight tok_embd;  // [n_vocab, n_embd], float32: rows looked up, and the output when tied
  Weight output;    // [n_vocab, n_embd]; empty when tied to tok_embd
  Vec output_norm;
  std::vector<Layer> layers;

  const Weight& out_weight() const { return output.rows() ? output : tok_embd; }
  void rope(float* x, int64_t n, int n_head, const LayerConfig& lc) const;
  void attention(const RowMatrix& Q, const RowMatrix& K, const RowMatrix& V, RowMatrix& O, const LayerConfig& lc,
                 bool no_window, int n_threads) const;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;
const ModelConfig& Model::config() const { return impl_->cfg; }
const Tokenizer& Model::tokenizer() const { return impl_->tok; }
const std::string& Model::load_log() const { return impl_->log; }

const char* matmul_mode_name(MatmulMode m) { return m == MatmulMode::int8 ? "int8" : "f32"; }

std::string ModelConfig::summary() const {
  std::string s = fmt::format(
      "model '{}' (arch {}): {} layers, n_embd {}, n_ff {}, {} query heads, {} KV heads, head_dim {}, n_rot {}, "
      "vocab {}, rms_eps {:g}, embedding scale {:g}, RoPE {}{}{}{}{}{}\n",
      name, arch, n_layers, n_embd, n_ff, n_heads, n_kv_heads, head_dim, n_rot, n_vocab, rms_eps, embd_scale,
      rope_neox ? "NEOX" : "NORM", qkv_bias ? ", QKV biases" : "", qk_norm ? ", QK-norm" : "", post_norms ? ", post-norms" : "",
      gelu ? ", GELU-tanh FFN" : ", SwiGLU FFN", matmul == MatmulMode::int8 ? ", int8 weight products" : "");
  // One line per distinct layer setting, listing the layers that use it.
  std::vector<bool> done(layers.size(), false);
  for (size_t a = 0; a < layers.size(); ++a) {
    if (done[a]) continue;
    std::string ids;
    for (size_t i = a; i < layers.size(); ++i) {
      const LayerConfig &x = layers[i], &y = layers[a];
      if (x.rope_theta == y.rope_theta && x.sliding_window == y.sliding_window && x.attn_scale == y.attn_scale) {
        ids += fmt::format("{}{}", ids.empty() ? "" : ",", i);
        done[i] = true;
      }
    }
    s += fmt::format("  layers {}: rope_theta {:g}, {}, attn_scale {:g}\n", ids, layers[a].rope_theta,
                     layers[a].sliding_window ? fmt::format("sliding window {}", layers[a].sliding_window) : "global",
                     layers[a].attn_scale);
  }
  return s;
}

namespace {

Vec load_vec(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensor& t = f.tensor(name);
  TQ_CHECK(t.n_elements() == n && t.n_rows() == 1, "{}: tensor '{}' has shape {}, expected [{}]", f.path(), name,
           t.shape_string(), n);
  Vec v(n);
  f.dequantize_rows(t, 0, 1, v.data());
  return v;
}

// The parts of one weight matrix (stacked Q/K/V or gate/up): GGUF tensors of
// shape [in, out_i], stacked along out.
struct Part {
  std::string name;
  int64_t out;
};

// Loads parts (each [in, out_i]) stacked into one weight [Σ out_i, in]: the
// integer codes when int8 and every part has them, else float32 panels,
// dequantized 1024 rows per task.
Weight load_weight(const GgufFile& f, const std::vector<Part>& parts, int64_t in, bool int8, int n_threads) {
  int64_t rows = 0;
  bool codes = int8 && in % 32 == 0;
  for (const Part& p : parts) {
    const GgufTensor& t = f.tensor(p.name);
    TQ_CHECK(t.n_dims == 2 && t.ne[0] == in && t.ne[1] == p.out, "{}: tensor '{}' has shape {}, expected [{}, {}]",
             f.path(), p.name, t.shape_string(), in, p.out);
    codes = codes && ggml_type_has_codes(t.type);
    rows += p.out;
  }
  Weight w;
  if (codes) w.i8 = detail::Int8Matrix(rows, in);
  else w.f32 = detail::PackedMatrix(rows, in);
  int64_t row0 = 0;
  for (const Part& p : parts) {
    const GgufTensor& t = f.tensor(p.name);
    const int64_t step = 1024;
    parallel_for(n_threads, (p.out + step - 1) / step, [&](int64_t b) {
      const int64_t r0 = b * step, r1 = std::min(p.out, r0 + step);
      if (codes) {
        w.i8.set_rows(row0 + r0, r1 - r0, t.type, f.tensor_data(t) + r0 * t.row_bytes(), t.row_bytes());
        return;
      }
      std::vector<float> buf(size_t((r1 - r0) * in));
      f.dequantize_rows(t, r0, r1 - r0, buf.data());
      w.f32.set_rows(row0 + r0, r1 - r0, buf.data(), in);
    });
    row0 += p.out;
  }
  if (codes) w.i8.finish();
  return w;
}

}  // namespace

Model Model::load(const std::string& path, bool verbose, MatmulMode matmul) {
  const GgufFile f = GgufFile::open(path);
  const std::string arch = f.get_string("general.architecture");
  TQ_CHECK(arch == "llama" || arch == "gemma3" || arch == "qwen2",
           "{}: architecture '{}' is not supported (supported: {})", path, arch, kSupportedArchitectures);
  auto im = std::make_unique<Impl>(Impl{ModelConfig{}, Tokenizer::from_gguf(f), {}, {}, {}, {}, {}});
  ModelConfig& c = im->cfg;
  c.path = path;
  c.arch = arch;
  c.matmul = matmul;
  c.name = f.get_string("general.name", "");
  const std::string p = c.arch + ".";
  const bool gemma = c.arch == "gemma3";
  const bool qwen2 = c.arch == "qwen2";
  c.n_layers = int(f.get_u32(p + "block_count"));
  c.n_embd = int(f.get_u32(p + "embedding_length"));
  c.n_ff = int(f.get_u32(p + "feed_forward_length"));
  c.n_heads = int(f.get_u32(p + "attention.head_count"));
  c.n_kv_heads = int(f.get_u32(p + "attention.head_count_kv", uint32_t(c.n_heads)));
  // (the bounds keep every product of two of them, e.g. n_heads · head_dim, within int)
  TQ_CHECK(c.n_layers > 0 && c.n_layers <= 1024 && c.n_embd > 0 && c.n_embd <= (1 << 20) && c.n_ff > 0 &&
               c.n_ff <= (1 << 22) && c.n_heads > 0 && c.n_heads <= 4096 && c.n_kv_heads > 0,
           "{}: implausible hyperparameters: {} layers, n_embd {}, n_ff {}, {} heads, {} KV heads", path, c.n_layers,
           c.n_embd, c.n_ff, c.n_heads, c.n_kv_heads);
  TQ_CHECK(c.n_heads % c.n_kv_heads == 0, "{}: {} query heads are not a multiple of {} KV heads", path, c.n_heads,
           c.n_kv_heads);
  c.head_dim = int(f.get_u32(p + "attention.key_length", uint32_t(c.n_embd / c.n_heads)));
  const int v_dim = int(f.get_u32(p + "attention.value_length", uint32_t(c.head_dim)));
  TQ_CHECK(v_dim == c.head_dim && c.head_dim > 0 && c.head_dim % 2 == 0 && c.head_dim <= 4096,
           "{}: key_length {} / value_length {} are not supported (must be equal, even and at most 4096)", path,
           c.head_dim, v_dim);
  c.n_rot = int(f.get_u32(p + "rope.dimension_count", uint32_t(c.head_dim)));
  TQ_CHECK(c.n_rot > 0 && c.n_rot <= c.head_dim && c.n_rot % 2 == 0, "{}: rope.dimension_count {} is invalid", path,
           c.n_rot);
  c.rms_eps = f.get_f32(p + "attention.layer_norm_rms_epsilon");
  c.n_ctx_train = int(f.get_u32(p + "context_length", 0));
  const float theta = f.get_f32(p + "rope.freq_base", 10000.0f);
  TQ_CHECK(std::isfinite(c.rms_eps) && c.rms_eps >= 0.0f && std::isfinite(theta) && theta > 0.0f,
           "{}: layer_norm_rms_epsilon {} / rope.freq_base {} are invalid (must be finite, ≥ 0 and > 0)", path,
           c.rms_eps, theta);
  const GgufTensor& embd = f.tensor("token_embd.weight");
  TQ_CHECK(embd.n_dims == 2 && embd.ne[0] == c.n_embd, "{}: token_embd.weight has shape {}, expected [{}, n_vocab]",
           path, embd.shape_string(), c.n_embd);
  c.n_vocab = int(embd.ne[1]);
  TQ_CHECK(c.n_vocab == im->tok.n_vocab(), "{}: token_embd.weight has {} rows but the tokenizer {} tokens", path,
           c.n_vocab, im->tok.n_vocab());

  const float attn_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  if (gemma) {
    // Gemma 3: embeddings scaled by √n_embd; 5 sliding-window layers then 1
    // global (llama.cpp swa pattern 6; not in the GGUF); sliding layers use
    // RoPE base 10000 (llama.cpp rope_freq_base_train_swa; not in the GGUF).
    c.embd_scale = std::sqrt(float(c.n_embd));
    c.rope_neox = c.qk_norm = c.post_norms = c.gelu = true;
    const int window = int(f.get_u32(p + "attention.sliding_window", 512));
    for (int l = 0; l < c.n_layers; ++l) {
      const bool global = l % 6 == 5;
      c.layers.push_back({global ? theta : 10000.0f, global ? 0 : window, attn_scale});
    }
  } else {
    // qwen2: rotate-half RoPE (llama.cpp LLAMA_ROPE_TYPE_NEOX for this arch);
    // Q/K/V biases are loaded below.
    c.rope_neox = qwen2;
    c.qkv_bias = qwen2;
    for (int l = 0; l < c.n_layers; ++l) c.layers.push_back({theta, 0, attn_scale});
  }

  im->log = fmt::format("{}: GGUF v{}, {} tensors: {}\n", path, f.version(), f.tensors().size(),
                        f.type_histogram_text()) +
            c.summary();
  if (verbose) std::fputs(im->log.c_str(), stderr);

  const int nt = resolve_threads(0);
  const int q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  const bool int8 = matmul == MatmulMode::int8;
  im->tok_embd = load_weight(f, {{"token_embd.weight", c.n_vocab}}, c.n_embd, false, nt);
  if (f.find_tensor("output.weight"))
    im->output = load_weight(f, {{"output.weight", c.n_vocab}}, c.n_embd, int8, nt);
  im->output_norm = load_vec(f, "output_norm.weight", c.n_embd);
  im->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    Layer& L = im->layers[size_t(l)];
    const std::string b = fmt::format("blk.{}.", l);
    L.attn_norm = load_vec(f, b + "attn_norm.weight", c.n_embd);
    L.ffn_norm = load_vec(f, b + "ffn_norm.weight", c.n_embd);
    L.wqkv = load_weight(f, {{b + "attn_q.weight", q_dim}, {b + "attn_k.weight", kv_dim}, {b + "attn_v.weight", kv_dim}},
                         c.n_embd, int8, nt);
    L.wo = load_weight(f, {{b + "attn_output.weight", c.n_embd}}, q_dim, int8, nt);
    L.w_gate_up = load_weight(f, {{b + "ffn_gate.weight", c.n_ff}, {b + "ffn_up.weight", c.n_ff}}, c.n_embd, int8, nt);
    L.w_down = load_weight(f, {{b + "ffn_down.weight", c.n_embd}}, c.n_ff, int8, nt);
    if (c.qkv_bias) {
      L.bq = load_vec(f, b + "attn_q.bias", q_dim);
      L.bk = load_vec(f, b + "attn_k.bias", kv_dim);
      L.bv = load_vec(f, b + "attn_v.bias", kv_dim);
    }
    if (c.qk_norm) {
      L.q_norm = load_vec(f, b + "attn_q_norm.weight", c.head_dim);
      L.k_norm = load_vec(f, b + "attn_k_norm.weight", c.head_dim);
    }
    if (c.post_norms) {
      L.post_attn_norm = load_vec(f, b + "post_attention_norm.weight", c.n_embd);
      L.post_ffw_norm = load_vec(f, b + "post_ffw_norm.weight", c.n_embd);
    }
  }
  return Model(std::move(im));
}

// RoPE in place on x [n, n_head, head_dim]: position p, pair k (0 ≤ k < n_rot/2)
// rotated by angle p · θ^(−2k/n_rot). NORM pairs (2k, 2k+1); NEOX pairs (k, k + n_rot/2).
void Model::Impl::rope(float* x, int64_t n, int n_head, const LayerConfig& lc) const {
  const int hd = cfg.head_dim, half = cfg.n_rot / 2;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  std::vector<double> freq(static_cast<size_t>(half));
  for (int k = 0; k < half; ++k) freq[size_t(k)] = std::pow(double(lc.rope_theta), -2.0 * k / double(cfg.n_rot));
  for (int64_t p = 0; p < n; ++p) {
    for (int k = 0; k < half; ++k) {
      const double a = double(p) * freq[size_t(k)];
      cs[size_t(k)] = float(std::cos(a));
      sn[size_t(k)] = float(std::sin(a));
    }
    for (int h = 0; h < n_head; ++h) {
      float* v = x + (p * n_head + h) * hd;
      for (int k = 0; k < half; ++k) {
        const int i0 = cfg.rope_neox ? k : 2 * k, i1 = cfg.rope_neox ? k + half : 2 * k + 1;
        const float a = v[i0], b = v[i1];
        v[i0] = a * cs[size_t(k)] - b * sn[size_t(k)];
        v[i1] = a * sn[size_t(k)] + b * cs[size_t(k)];
      }
    }
  }
}

// Causal (and sliding-window) softmax attention, one task per (head, block of
// query rows); keys outside [i − window + 1, i] are never multiplied (but for up
// to 15 scores before a window, to start at a 16-key panel). Both products run on the
// packed GEMM: S = q·kᵀ against each KV head's keys and O = P·V against its
// values transposed, both packed once per layer (packing them per task took as
// long as the products at n_ctx 16384). The P·V k-slices start at the window's
// first key and the score rows keep this layout, so the outputs do not depend
// on the panel rounding.
void Model::Impl::attention(const RowMatrix& Q, const RowMatrix& K, const RowMatrix& V, RowMatrix& O,
                            const LayerConfig& lc, bool no_window, int n_threads) const {
  const int64_t n = Q.rows();
  const int hd = cfg.head_dim, nh = cfg.n_heads, group = cfg.n_heads / cfg.n_kv_heads;
  const int64_t window = no_window ? 0 : lc.sliding_window;
  constexpr int64_t kBlock = 64, kPanel = detail::PackedMatrix::kPanel;
  const int64_t n_blocks = (n + kBlock - 1) / kBlock;
  O.resize(n, int64_t(nh) * hd);
  // per KV head g: its keys (row i: K[i, g, :]) and its values transposed (row d: V[:, g, d])
  std::vector<detail::PackedMatrix> kp, vp;
  std::vector<float> vt(size_t(hd) * size_t(n));
  for (int g = 0; g < cfg.n_kv_heads; ++g) {
    kp.emplace_back(n, hd);
    kp.back().set_rows(0, n, K.data() + int64_t(g) * hd, K.cols());
    for (int64_t i = 0; i < n; ++i)
      for (int d = 0; d < hd; ++d) vt[size_t(d) * size_t(n) + size_t(i)] = V(i, int64_t(g) * hd + d);
    vp.emplace_back(hd, n);
    vp.back().set_rows(0, hd, vt.data(), n);
  }
  parallel_for(n_threads, nh * n_blocks, [&](int64_t task) {
    const int h = int(task / n_blocks);
    const int64_t r0 = (task % n_blocks) * kBlock, r1 = std::min(n, r0 + kBlock), rb = r1 - r0;
    const int g = h / group;
    const int64_t c0 = window > 0 ? std::max<int64_t>(0, r0 - window + 1) : 0, nk = r1 - c0;
    RowMatrix s(rb, nk);  // scores of keys [c0, r1)
    const float* q = Q.data() + r0 * Q.cols() + int64_t(h) * hd;
    const int64_t c0p = c0 / kPanel * kPanel;  // the products start at a panel
    if (c0p == c0) {
      detail::gemm_packed(rb, q, Q.cols(), kp[size_t(g)], c0, r1, s.data(), nk);
    } else {  // a window: keys [c0p, r1), then the row layout the softmax had (its sums depend on alignment)
      RowMatrix sp(rb, r1 - c0p);
      detail::gemm_packed(rb, q, Q.cols(), kp[size_t(g)], c0p, r1, sp.data(), r1 - c0p);
      s = sp.rightCols(nk);
    }
    for (int64_t i = 0; i < rb; ++i) {
      const int64_t pos = r0 + i;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) - c0 : 0;  // first allowed key
      const int64_t hi = pos - c0;                                                     // last allowed key
      auto row = s.row(i);
      if (lo > 0) row.head(lo).setZero();
      if (hi + 1 < nk) row.tail(nk - hi - 1).setZero();
      auto seg = row.segment(lo, hi - lo + 1);
      seg *= lc.attn_scale;
      const float m = seg.maxCoeff();
      seg = (seg.array() - m).exp();
      seg /= seg.sum();
    }
    detail::gemm_packed(detail::PackedRows(rb, s.data(), nk, nk), vp[size_t(g)], 0, hd,
                        O.data() + r0 * O.cols() + int64_t(h) * hd, O.cols(), c0);
  });
}

RowMatrix Model::forward(const std::vector<int32_t>& tokens, KvStore* store, int64_t logits_from,
                         LayerCapture* capture, const ForwardOptions& opt) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  const int64_t n = int64_t(tokens.size());
  TQ_CHECK(n > 0, "forward: no tokens");
  for (int64_t i = 0; i < n; ++i)
    TQ_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < c.n_vocab, "forward: token {} at position {} is not in [0, {})",
             tokens[size_t(i)], i, c.n_vocab);
  TQ_CHECK(logits_from <= n, "forward: logits_from {} beyond {} tokens", logits_from, n);
  const int nt = resolve_threads(opt.n_threads);
  const int hd = c.head_dim;

  RowMatrix h(n, c.n_embd);
  for (int64_t i = 0; i < n; ++i) {
    m.tok_embd.f32.get_row(tokens[size_t(i)], h.row(i).data());
    h.row(i) *= c.embd_scale;
  }

  const int64_t q_dim = int64_t(c.n_heads) * hd, kv_dim = int64_t(c.n_kv_heads) * hd, n_ff = c.n_ff;
  RowMatrix a, qkv, q, k, v, o, t, gu;
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = m.layers[size_t(l)];
    const LayerConfig& lc = c.layers[size_t(l)];
    a = h;
    rms_norm_rows(a.data(), n, c.n_embd, L.attn_norm, c.rms_eps);
    matmul_t(a, L.wqkv, qkv, nt);
    q = qkv.leftCols(q_dim);
    k = qkv.middleCols(q_dim, kv_dim);
    v = qkv.rightCols(kv_dim);
    add_bias(q, L.bq);
    add_bias(k, L.bk);
    add_bias(v, L.bv);
    if (c.qk_norm) {
      rms_norm_rows(q.data(), n * c.n_heads, hd, L.q_norm, c.rms_eps);
      rms_norm_rows(k.data(), n * c.n_kv_heads, hd, L.k_norm, c.rms_eps);
    }
    m.rope(q.data(), n, c.n_heads, lc);
    m.rope(k.data(), n, c.n_kv_heads, lc);
    if (capture) capture->capture(l, n, q.data(), k.data(), v.data());
    if (store) store->roundtrip(l, n, c.n_kv_heads, hd, k.data(), v.data(), k.data(), v.data());
    m.attention(q, k, v, o, lc, opt.disable_sliding_window, nt);
    matmul_t(o, L.wo, t, nt);
    if (c.post_norms) rms_norm_rows(t.data(), n, c.n_embd, L.post_attn_norm, c.rms_eps);
    h += t;

    a = h;
    rms_norm_rows(a.data(), n, c.n_embd, L.ffn_norm, c.rms_eps);
    matmul_t(a, L.w_gate_up, gu, nt);  // row r: gate [0, n_ff), up [n_ff, 2·n_ff)
    const bool gelu = c.gelu;
    parallel_for(nt, gu.rows(), [&](int64_t r) {
      auto g = gu.row(r).head(n_ff).array();
      const auto u = gu.row(r).tail(n_ff).array();
      if (gelu) {
        const float k0 = std::sqrt(2.0f / std::numbers::pi_v<float>);
        g = 0.5f * g * (1.0f + (k0 * (g + 0.044715f * g * g * g)).tanh()) * u;
      } else {
        g = g / (1.0f + (-g).exp()) * u;
      }
    });
    matmul_t(gu.data(), n, 2 * n_ff, L.w_down, t, nt);  // the activated gate half, in place
    if (c.post_norms) rms_norm_rows(t.data(), n, c.n_embd, L.post_ffw_norm, c.rms_eps);
    h += t;
  }

  if (logits_from < 0 || logits_from == n) return RowMatrix(0, c.n_vocab);
  RowMatrix hf = h.bottomRows(n - logits_from);
  rms_norm_rows(hf.data(), hf.rows(), c.n_embd, m.output_norm, c.rms_eps);
  RowMatrix logits;
  matmul_t(hf, m.out_weight(), logits, nt);
  return logits;
}

}  // namespace tq

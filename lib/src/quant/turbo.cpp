#include "tq/formats/turbo.h"

#include <cmath>
#include <cstring>

#include "bytes.h"
#include "tq/bitpack.h"
#include "tq/error.h"

namespace tq {

namespace {

constexpr int kQK = 128;
constexpr double kSqrtHalfPi = 1.2533141373155002512;

// The fork's sign tables as bit masks: bit i set ⇔ sign −1 (u32 words for
// elements 0–31, 32–63, 64–95, 96–127).
constexpr uint32_t kWhtS1[4] = {0xe46a0359u, 0x42f85949u, 0xa4c63bbbu, 0x49f250a9u};
constexpr uint32_t kWhtS2[4] = {0x16acee90u, 0x3f628fdcu, 0xb7a5357au, 0xbea56562u};
constexpr uint32_t kQjlS1[4] = {0x693a565eu, 0x25622d30u, 0x0243e607u, 0xfec58bdau};
constexpr uint32_t kQjlS2[4] = {0x3d172324u, 0x203007cbu, 0x9540a34bu, 0x856b1126u};

std::vector<float> signs_from(const uint32_t (&m)[4]) {
  std::vector<float> s(kQK);
  for (int i = 0; i < kQK; ++i) s[size_t(i)] = (m[i / 32] >> (i % 32)) & 1u ? -1.f : 1.f;
  return s;
}

// The fork's centroid tables (ggml-turbo-quant.c) and, where it lists them,
// its rounded midpoint constants (which we use as given).
std::shared_ptr<const ScalarCodebook> turbo_codebook(int bits) {
  static const auto cb2 = std::make_shared<const ScalarCodebook>(
      "turbo2", std::vector<float>{-0.133462f, -0.039994f, 0.039994f, 0.133462f},
      std::vector<float>{-0.086728f, 0.0f, 0.086728f});
  static const auto cb3 = std::make_shared<const ScalarCodebook>(
      "turbo3",
      std::vector<float>{-0.190685f, -0.117832f, -0.065717f, -0.021460f, 0.021460f, 0.065717f, 0.117832f, 0.190685f},
      std::vector<float>{-0.154259f, -0.091775f, -0.043589f, 0.0f, 0.043589f, 0.091775f, 0.154259f});
  static const auto cb4 = std::make_shared<const ScalarCodebook>(
      "turbo4",
      std::vector<float>{-0.173926f, -0.117195f, -0.089527f, -0.068756f, -0.051262f, -0.035597f, -0.020989f, -0.006938f,
                         0.006938f, 0.020989f, 0.035597f, 0.051262f, 0.068756f, 0.089527f, 0.117195f, 0.173926f},
      std::vector<float>{-0.145560f, -0.103361f, -0.079142f, -0.060009f, -0.043430f, -0.028293f, -0.013963f, 0.0f,
                         0.013963f, 0.028293f, 0.043430f, 0.060009f, 0.079142f, 0.103361f, 0.145560f});
  return bits == 2 ? cb2 : bits == 3 ? cb3 : cb4;
}

const char* turbo_name(TurboKind k) {
  switch (k) {
    case TurboKind::turbo2: return "turbo2";
    case TurboKind::turbo3: return "turbo3";
    case TurboKind::turbo4: return "turbo4";
    case TurboKind::turbo4_qjl: return "turbo4-qjl";
  }
  return "?";
}

}  // namespace

TurboCodec::TurboCodec(TurboKind kind, int d) : Codec(turbo_name(kind), d), kind_(kind) {
  TQ_CHECK(d >= 1 && d <= kMaxHeadDim, "{}: head_dim {} must be in 1..{}", name(), d, kMaxHeadDim);
  blocks_ = (d + kQK - 1) / kQK;
  switch (kind) {
    case TurboKind::turbo2: block_bytes_ = sizeof(BlockTurbo2); cb_ = turbo_codebook(2); break;
    case TurboKind::turbo3: block_bytes_ = sizeof(BlockTurbo3); cb_ = turbo_codebook(3); break;
    case TurboKind::turbo4: block_bytes_ = sizeof(BlockTurbo4); cb_ = turbo_codebook(4); break;
    case TurboKind::turbo4_qjl: block_bytes_ = sizeof(BlockTurbo4Qjl); cb_ = turbo_codebook(3); break;
  }
  rot_ = std::make_shared<const RandomizedHadamard>(kQK, signs_from(kWhtS1), signs_from(kWhtS2), "turbo-wht");
  if (kind == TurboKind::turbo4_qjl)
    qjl_ = std::make_shared<const RandomizedHadamard>(kQK, signs_from(kQjlS1), signs_from(kQjlS2), "turbo-qjl");
}

TurboCodec::TurboCodec(TurboKind kind, int d, std::shared_ptr<const ScalarCodebook> codebook) : TurboCodec(kind, d) {
  TQ_CHECK(codebook && codebook->levels() == cb_->levels(), "{}: a codebook of {} levels is needed, not {}", name(),
           cb_->levels(), codebook ? codebook->levels() : 0);
  cb_ = std::move(codebook);
}

void TurboCodec::encode_block(const float* x, uint8_t* blk) const {
  float y[kQK], c[kQK];
  uint8_t idx[kQK];
  const float n = std::sqrt(tree_sum_squares(x, kQK));
  const float inv = n > 1e-10f ? 1.0f / n : 0.0f;
  for (int j = 0; j < kQK; ++j) y[j] = x[j] * inv;
  rot_->apply(y);
  cb_->index(y, kQK, idx);
  const auto& cen = cb_->centroids();
  for (int j = 0; j < kQK; ++j) c[j] = cen[idx[j]];
  switch (kind_) {
    case TurboKind::turbo2:
    case TurboKind::turbo3:
    case TurboKind::turbo4: {
      const float recon = std::sqrt(tree_sum_squares(c, kQK));
      detail::put_f16(blk, recon > 1e-10f ? n / recon : n);
      if (kind_ == TurboKind::turbo4) {
        pack_bits(idx, kQK, 4, blk + 2);
      } else {
        uint8_t low[kQK], high[kQK];
        for (int j = 0; j < kQK; ++j) { low[j] = idx[j] & 3; high[j] = uint8_t(idx[j] >> 2); }
        pack_bits(low, kQK, 2, blk + 2);
        if (kind_ == TurboKind::turbo3) pack_bits(high, kQK, 1, blk + 2 + 32);
      }
      break;
    }
    case TurboKind::turbo4_qjl: {
      float r[kQK];
      uint8_t z[kQK];
      for (int j = 0; j < kQK; ++j) r[j] = y[j] - c[j];
      const float rn = std::sqrt(tree_sum_squares(r, kQK));
      // p = Q2·H·Q1·r (unnormalised H: S has ±1 entries). RandomizedHadamard
      // applies the 1/√128 too, which does not change signs.
      qjl_->apply(r);
      for (int j = 0; j < kQK; ++j) z[j] = r[j] >= 0.f ? 1 : 0;
      detail::put_f16(blk, n);
      detail::put_f16(blk + 2, rn);
      pack_bits(idx, kQK, 3, blk + 4);
      pack_bits(z, kQK, 1, blk + 4 + 48);
      break;
    }
  }
}

void TurboCodec::block_centroids(const uint8_t* blk, float* c) const {
  uint8_t idx[kQK];
  const auto& cen = cb_->centroids();
  switch (kind_) {
    case TurboKind::turbo4: unpack_bits(blk + 2, kQK, 4, idx); break;
    case TurboKind::turbo2:
    case TurboKind::turbo3: {
      unpack_bits(blk + 2, kQK, 2, idx);
      if (kind_ == TurboKind::turbo3) {
        uint8_t high[kQK];
        unpack_bits(blk + 2 + 32, kQK, 1, high);
        for (int j = 0; j < kQK; ++j) idx[j] = uint8_t(idx[j] | (high[j] << 2));
      }
      break;
    }
    case TurboKind::turbo4_qjl: unpack_bits(blk + 4, kQK, 3, idx); break;
  }
  for (int j = 0; j < kQK; ++j) c[j] = cen[idx[j]];
  if (kind_ == TurboKind::turbo4_qjl) {
    uint8_t z[kQK];
    float st[kQK];
    unpack_bits(blk + 4 + 48, kQK, 1, z);
    for (int j = 0; j < kQK; ++j) st[j] = z[j] ? 1.f : -1.f;
    // Sᵀz = Q1·H·Q2·z = √128 · (inverse of the normalised rotation)(z).
    qjl_->apply_inverse(st);
    const float k = qjl_scale() * detail::get_f16(blk + 2);
    for (int j = 0; j < kQK; ++j) c[j] += k * st[j];
  }
}

float TurboCodec::qjl_scale() const { return float(kSqrtHalfPi / kQK * std::sqrt(double(kQK))); }

void TurboCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim();
  float buf[kQK];
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + size_t(r) * size_t(d);
    uint8_t* rec = out + size_t(r) * row_bytes();
    for (int b = 0; b < blocks_; ++b) {
      for (int j = 0; j < kQK; ++j) buf[j] = b * kQK + j < d ? xr[b * kQK + j] : 0.f;
      TQ_CHECK(std::sqrt(tree_sum_squares(buf, kQK)) <= kFp16Max, "{}: row {} block {} norm beyond the fp16 range",
               name(), r, b);
      encode_block(buf, rec + size_t(b) * block_bytes_);
    }
  }
}

void TurboCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  float c[kQK];
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    float* o = out + size_t(r) * size_t(d);
    for (int b = 0; b < blocks_; ++b) {
      const uint8_t* blk = rec + size_t(b) * block_bytes_;
      block_centroids(blk, c);
      const float norm = detail::get_f16(blk);
      for (int j = 0; j < kQK; ++j) c[j] *= norm;
      rot_->apply_inverse(c);
      for (int j = 0; j < kQK && b * kQK + j < d; ++j) o[b * kQK + j] = c[j];
    }
  }
}

void TurboCodec::prepare_query(const float* q, float* prepared) const {
  const int d = dim();
  for (int b = 0; b < blocks_; ++b) {
    float* p = prepared + size_t(b) * kQK;
    for (int j = 0; j < kQK; ++j) p[j] = b * kQK + j < d ? q[b * kQK + j] : 0.f;
    rot_->apply(p);
  }
}

void TurboCodec::score(const float* qr, const uint8_t* in, int64_t n, float* out) const {
  float c[kQK];
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    float total = 0.f;
    for (int b = 0; b < blocks_; ++b) {
      const uint8_t* blk = rec + size_t(b) * block_bytes_;
      block_centroids(blk, c);
      const float* p = qr + size_t(b) * kQK;
      float acc = 0.f;
      for (int j = 0; j < kQK; ++j) acc += p[j] * c[j];
      total += detail::get_f16(blk) * acc;
    }
    out[r] = total;
  }
}

}  // namespace tq

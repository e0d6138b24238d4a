#include "tq/formats/kivi.h"

#include <algorithm>
#include <cmath>

#include "bytes.h"
#include "tq/bitpack.h"
#include "tq/error.h"

namespace tq {

namespace {
uint8_t kivi_code(float x, float mn, float scale, int qmax) {
  if (!(scale > 0.f)) return 0;
  const float t = std::clamp((x - mn) / scale, 0.0f, float(qmax));
  return uint8_t(std::nearbyint(t));  // default rounding mode: half to even
}
}  // namespace

namespace {
double kivi_bound(int bits, int group) {
  const double step = 2 * Codec::gaussian_max_envelope(group) / ((1 << bits) - 1);
  return 1.2 * step * step / 12;
}
}  // namespace

double KiviKeyCodec::gaussian_nmse_bound() const { return kivi_bound(bits_, group_); }
double KiviValueCodec::gaussian_nmse_bound() const { return kivi_bound(bits_, group_); }

KiviKeyCodec::KiviKeyCodec(int bits, int d, int group) : Codec(fmt::format("kivi{}", bits), d), bits_(bits), group_(group) {
  TQ_CHECK(bits == 2 || bits == 4, "kivi{}: bits must be 2 or 4", bits);
  TQ_CHECK(d >= 1 && group >= 1 && (size_t(group) * size_t(d) * size_t(bits)) % 8 == 0,
           "kivi{}: head_dim {} with group {} does not pack into whole bytes", bits, d, group);
  group_bytes_ = 4 * size_t(d) + packed_bytes(size_t(group) * size_t(d), bits);
  TQ_CHECK(group_bytes_ % size_t(group) == 0, "kivi{}: head_dim {} not supported (group record of {} bytes is not a whole number of bytes per token)",
           bits, d, group_bytes_);
}

size_t KiviKeyCodec::encoded_bytes(int64_t n) const {
  return size_t(n / group_) * group_bytes_ + size_t(n % group_) * 2 * size_t(dim());
}

void KiviKeyCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim(), G = group_, qmax = (1 << bits_) - 1;
  const int64_t full = n / G;
  std::vector<uint8_t> codes(size_t(G) * size_t(d));
  for (int64_t g = 0; g < full; ++g) {
    const float* xg = x + size_t(g) * size_t(G) * size_t(d);
    uint8_t* rec = out + size_t(g) * group_bytes_;
    for (int c = 0; c < d; ++c) {
      float mn = xg[c], mx = xg[c];
      for (int t = 1; t < G; ++t) { mn = std::min(mn, xg[size_t(t) * d + c]); mx = std::max(mx, xg[size_t(t) * d + c]); }
      const float scale = (mx - mn) / float(qmax);
      detail::put_f16(rec + 2 * size_t(c), scale);
      detail::put_f16(rec + 2 * size_t(d) + 2 * size_t(c), mn);
      for (int t = 0; t < G; ++t) codes[size_t(c) * G + t] = kivi_code(xg[size_t(t) * d + c], mn, scale, qmax);
    }
    pack_bits(codes.data(), codes.size(), bits_, rec + 4 * size_t(d));
  }
  uint8_t* tail = out + size_t(full) * group_bytes_;
  for (size_t i = 0; i < size_t(n % G) * size_t(d); ++i) detail::put_f16(tail + 2 * i, x[size_t(full) * G * d + i]);
}

void KiviKeyCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim(), G = group_;
  const int64_t full = n / G;
  std::vector<uint8_t> codes(size_t(G) * size_t(d));
  for (int64_t g = 0; g < full; ++g) {
    const uint8_t* rec = in + size_t(g) * group_bytes_;
    unpack_bits(rec + 4 * size_t(d), codes.size(), bits_, codes.data());
    float* o = out + size_t(g) * size_t(G) * size_t(d);
    for (int c = 0; c < d; ++c) {
      const float s = detail::get_f16(rec + 2 * size_t(c)), mn = detail::get_f16(rec + 2 * size_t(d) + 2 * size_t(c));
      for (int t = 0; t < G; ++t) o[size_t(t) * d + c] = float(codes[size_t(c) * G + t]) * s + mn;
    }
  }
  const uint8_t* tail = in + size_t(full) * group_bytes_;
  for (size_t i = 0; i < size_t(n % G) * size_t(d); ++i) out[size_t(full) * G * d + i] = detail::get_f16(tail + 2 * i);
}

KiviValueCodec::KiviValueCodec(int bits, int d, int group)
    : Codec(fmt::format("kivi{}", bits), d), bits_(bits), group_(group) {
  TQ_CHECK(bits == 2 || bits == 4, "kivi{}: bits must be 2 or 4", bits);
  TQ_CHECK(group >= 8 && d % group == 0, "kivi{}: head_dim {} not supported: value groups of {} need head_dim % {} == 0",
           bits, d, group, group);
}

size_t KiviValueCodec::row_bytes() const {
  return size_t(dim() / group_) * (4 + packed_bytes(size_t(group_), bits_));
}

void KiviValueCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim(), G = group_, qmax = (1 << bits_) - 1;
  const size_t gb = 4 + packed_bytes(size_t(G), bits_);
  std::vector<uint8_t> codes(static_cast<size_t>(G));
  for (int64_t r = 0; r < n; ++r) {
    for (int g = 0; g < d / G; ++g) {
      const float* v = x + size_t(r) * d + size_t(g) * G;
      uint8_t* rec = out + size_t(r) * row_bytes() + size_t(g) * gb;
      float mn = v[0], mx = v[0];
      for (int j = 1; j < G; ++j) { mn = std::min(mn, v[j]); mx = std::max(mx, v[j]); }
      const float scale = (mx - mn) / float(qmax);
      for (int j = 0; j < G; ++j) codes[size_t(j)] = kivi_code(v[j], mn, scale, qmax);
      detail::put_f16(rec, scale);
      detail::put_f16(rec + 2, mn);
      pack_bits(codes.data(), size_t(G), bits_, rec + 4);
    }
  }
}

void KiviValueCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim(), G = group_;
  const size_t gb = 4 + packed_bytes(size_t(G), bits_);
  std::vector<uint8_t> codes(static_cast<size_t>(G));
  for (int64_t r = 0; r < n; ++r) {
    for (int g = 0; g < d / G; ++g) {
      const uint8_t* rec = in + size_t(r) * row_bytes() + size_t(g) * gb;
      const float s = detail::get_f16(rec), mn = detail::get_f16(rec + 2);
      unpack_bits(rec + 4, size_t(G), bits_, codes.data());
      for (int j = 0; j < G; ++j) out[size_t(r) * d + size_t(g) * G + j] = float(codes[size_t(j)]) * s + mn;
    }
  }
}

}  // namespace tq

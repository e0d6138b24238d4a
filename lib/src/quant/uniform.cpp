#include "tq/formats/uniform.h"

#include <algorithm>
#include <cmath>

#include "bytes.h"
#include "tq/bitpack.h"
#include "tq/error.h"
#include "tq/formats/layouts.h"

namespace tq {

UniformCodec::UniformCodec(int bits, int d) : Codec(fmt::format("u{}", bits), d), bits_(bits) {
  TQ_CHECK(bits == 2 || bits == 3 || bits == 4 || bits == 8, "u{}: value bits must be 2, 3, 4 or 8", bits);
  TQ_CHECK(d >= 1, "u{}: head_dim {} must be positive", bits, d);
  TQ_CHECK(bits != 3 || d % 8 == 0, "u3: head_dim {} not supported: 3-bit packing needs head_dim % 8 == 0", d);
  code_bytes_ = packed_bytes(size_t(d), bits);
}

size_t UniformCodec::row_bytes() const { return size_t(layout::uniform_record_bytes(dim(), bits_)); }

double UniformCodec::gaussian_nmse_bound() const {
  const double step = 2 * gaussian_max_envelope(dim()) / ((1 << bits_) - 1);
  return 1.1 * step * step / 12 + 0x1p-20;
}

void UniformCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim();
  const int qmax = (1 << bits_) - 1;
  std::vector<uint8_t> codes(static_cast<size_t>(d));
  for (int64_t r = 0; r < n; ++r) {
    const float* v = x + size_t(r) * size_t(d);
    uint8_t* rec = out + size_t(r) * row_bytes();
    float mn = v[0], mx = v[0];
    for (int j = 1; j < d; ++j) { mn = std::min(mn, v[j]); mx = std::max(mx, v[j]); }
    float scale = (mx - mn) / float(qmax);
    if (!(scale > 1e-8f)) scale = 1e-8f;
    for (int j = 0; j < d; ++j) {
      const float t = std::floor((v[j] - mn) / scale + 0.5f);
      codes[size_t(j)] = uint8_t(std::clamp(int(t), 0, qmax));
    }
    pack_bits(codes.data(), size_t(d), bits_, rec);
    detail::put_f16(rec + code_bytes_, scale);
    detail::put_f16(rec + code_bytes_ + 2, mn);
  }
}

void UniformCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  std::vector<uint8_t> codes(static_cast<size_t>(d));
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    unpack_bits(rec, size_t(d), bits_, codes.data());
    const float scale = detail::get_f16(rec + code_bytes_), zero = detail::get_f16(rec + code_bytes_ + 2);
    float* o = out + size_t(r) * size_t(d);
    for (int j = 0; j < d; ++j) o[j] = float(codes[size_t(j)]) * scale + zero;
  }
}

void UniformCodec::score(const float* q, const uint8_t* in, int64_t n, float* out) const {
  // Σ q_j (c_j·s + z) = s·Σ q_j c_j + z·Σ q_j
  const int d = dim();
  float qsum = 0.f;
  for (int j = 0; j < d; ++j) qsum += q[j];
  std::vector<uint8_t> codes(static_cast<size_t>(d));
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    unpack_bits(rec, size_t(d), bits_, codes.data());
    float acc = 0.f;
    for (int j = 0; j < d; ++j) acc += q[j] * float(codes[size_t(j)]);
    out[r] = detail::get_f16(rec + code_bytes_) * acc + detail::get_f16(rec + code_bytes_ + 2) * qsum;
  }
}

}  // namespace tq

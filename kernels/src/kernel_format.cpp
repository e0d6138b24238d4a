// KvFormat → KernelFormat: read the CPU codecs' own parameters (codebook,
// rotation, sign tables) so the kernels never restate them.
#include "tq/cuda/kernel_format.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tq/error.h"
#include "tq/float_formats.h"
#include "tq/format.h"
#include "tq/formats/mse.h"
#include "tq/formats/plain.h"
#include "tq/formats/turbo.h"
#include "tq/formats/uniform.h"

namespace tq::cuda {

namespace {

void copy_codebook(const ScalarCodebook& cb, KernelFormat& k) {
  k.levels = cb.levels();
  for (int i = 0; i < cb.levels(); ++i) k.centroids[i] = cb.centroids()[size_t(i)];
  for (int i = 0; i + 1 < cb.levels(); ++i) k.midpoints[i] = cb.midpoints()[size_t(i)];
}

// α = 1 + j/2^17 minimising max_i |half(α·c_i) − α·c_i| / |α·c_i| (see lut_scale).
float fp16_friendly_scale(const float* c, int n) {
  std::vector<double> mags;
  for (int i = 0; i < n; ++i)
    if (c[i] != 0.f && std::find(mags.begin(), mags.end(), std::fabs(double(c[i]))) == mags.end())
      mags.push_back(std::fabs(double(c[i])));
  constexpr int kSteps = 1 << 17;
  double best = 1e9, best_a = 1.0;
  for (int j = 0; j < kSteps; ++j) {
    const double a = 1.0 + double(j) / kSteps;
    double worst = 0;
    for (double m : mags) {
      const double x = float(a * m);
      worst = std::max(worst, std::fabs(double(half_to_float(float_to_half(float(x)))) - x) / x);
      if (worst >= best) break;
    }
    if (worst < best) {
      best = worst;
      best_a = a;
    }
  }
  return float(best_a);
}

uint32_t sign_mask(const std::vector<float>& s, int word) {
  uint32_t m = 0;
  for (int i = 0; i < 32; ++i)
    if (s[size_t(word * 32 + i)] < 0.f) m |= 1u << i;
  return m;
}

// Whether a row of the GPU codec table has these keys (before their codebook is copied: at most 16 levels).
bool key_row(KeyKind key, int bits) {
  for (const GpuCodec& c : kGpuCodecs)
    if (c.key == key && c.key_bits == bits) return true;
  return false;
}

// The record sizes of f's codecs (the table's layout), and its slot without and with vLLM's pad byte.
struct RecordSizes {
  int key, value, plain, vllm;
};
RecordSizes record_sizes(const KernelFormat& f) {
  const int kb = key_record_bytes(f.key, f.key_bits, f.head_dim), vb = value_record_bytes(f.value, f.value_bits, f.head_dim);
  return {kb, vb, kb + vb, layout::vllm_slot_bytes(kb, vb)};
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

const GpuCodec* gpu_codec(const KernelFormat& f) {
  for (const GpuCodec& c : kGpuCodecs)
    if (c.key == f.key && c.key_bits == f.key_bits && c.value == f.value && c.value_bits == f.value_bits) return &c;
  return nullptr;
}

std::vector<std::string> gpu_formats(bool decode_only) {
  std::vector<std::string> names;
  for (const GpuCodec& c : kGpuCodecs)
    if (c.decode || !decode_only) names.emplace_back(c.format);
  return names;
}

KernelFormat kernel_format(const KvFormat& f) {
  KernelFormat k;
  k.name = f.name;
  k.head_dim = f.head_dim;
  const int d = f.head_dim;
  TQ_CHECK(d == 64 || d == 128 || d == 256, "GPU kernels: format '{}': head_dim {} not supported (64, 128 or 256)",
           f.name, d);
  auto unsupported = [&](const std::string& why) -> Error {
    return Error(fmt::format("GPU kernels: format '{}' at head_dim {} not supported: {} (supported: {}; mse specs "
                             "with rot=hadamard, with or without +nc)",
                             f.name, d, why, join(gpu_formats())));
  };
  // the mapped kinds and bits must be a row of the GPU codec table; the record sizes are the table's
  // (tq/formats/layouts.h: the expressions the CPU codecs' row_bytes use too)
  auto in_table = [&](KernelFormat k) -> KernelFormat {
    if (!gpu_codec(k)) throw unsupported("no GPU codec row for these key/value codecs and bits");
    const RecordSizes r = record_sizes(k);
    k.key_bytes = r.key;
    k.value_bytes = r.value;
    k.slot_bytes = f.vllm_slot ? r.vllm : r.plain;
    return k;
  };

  if (const auto* mse = dynamic_cast<const MseCodec*>(f.key.get())) {
    k.key = KeyKind::mse;
    k.key_bits = mse->bits();
    if (!key_row(KeyKind::mse, k.key_bits)) throw unsupported(fmt::format("{}-bit mse keys", k.key_bits));
    if (mse->norm_mode() == NormMode::fold) throw unsupported("mse +fold norms");
    if (!dynamic_cast<const HadamardRotation*>(&mse->rotation()))
      throw unsupported(fmt::format("rotation '{}' (the kernels implement rot=hadamard)", mse->rotation().name()));
    k.norm_correction = mse->norm_mode() == NormMode::nc;
    copy_codebook(mse->codebook(), k);
    k.lut_scale = fp16_friendly_scale(k.centroids, k.levels);
    k.rot_scale = float(1.0 / std::sqrt(double(d)));
  } else if (const auto* pl = dynamic_cast<const PlainCodec*>(f.key.get());
             pl && pl->name() == "fp8") {
    k.key = KeyKind::fp8;
    k.key_bits = 8;
  } else if (const auto* tb = dynamic_cast<const TurboCodec*>(f.key.get())) {
    const bool qjl = tb->kind() == TurboKind::turbo4_qjl;
    k.key = qjl ? KeyKind::turbo_qjl : KeyKind::turbo;
    k.key_bits = tb->kind() == TurboKind::turbo2 ? 2 : tb->kind() == TurboKind::turbo4 ? 4 : 3;
    copy_codebook(tb->codebook(), k);
    const auto& rot = tb->rotation();
    for (int w = 0; w < 4; ++w) {
      k.turbo_s1[w] = sign_mask(rot.signs1(), w);
      k.turbo_s2[w] = sign_mask(rot.signs2(), w);
    }
    k.rot_scale = float(1.0 / std::sqrt(128.0));
    k.lut_scale = fp16_friendly_scale(k.centroids, k.levels);  // the decode kernel's LUT
    if (qjl) {
      // the kernels scale the QJL rotation by rot_scale, its float(1/√128) too (both are 128-point)
      const RandomizedHadamard* r = tb->qjl_rotation();
      if (!r || r->dim() != 128) throw unsupported("no 128-point QJL rotation (internal error)");
      for (int w = 0; w < 4; ++w) {
        k.qjl_s1[w] = sign_mask(r->signs1(), w);
        k.qjl_s2[w] = sign_mask(r->signs2(), w);
      }
      k.qjl_scale = tb->qjl_scale();
    }
    const auto* tv = dynamic_cast<const TurboCodec*>(f.value.get());
    if (!tv || tv->kind() != tb->kind()) throw unsupported("turbo keys need turbo values of the same kind");
    k.value = qjl ? ValueKind::turbo_qjl : ValueKind::turbo;
    k.value_bits = k.key_bits;
    return in_table(k);
  } else {
    throw unsupported(fmt::format("key codec '{}'", f.key->name()));
  }

  if (const auto* u = dynamic_cast<const UniformCodec*>(f.value.get())) {
    k.value = ValueKind::uniform;
    k.value_bits = u->bits();
  } else {
    throw unsupported(fmt::format("value codec '{}'", f.value->name()));
  }
  if (!gpu_codec(k))
    throw unsupported(fmt::format("{}-bit {} keys with u{} values", k.key_bits, k.key == KeyKind::mse ? "mse" : "fp8",
                                  k.value_bits));
  return in_table(k);
}

std::string layout_support(const KernelFormat& f) {
  const RecordSizes r = record_sizes(f);
  if (f.key_bytes != r.key || f.value_bytes != r.value || (f.slot_bytes != r.plain && f.slot_bytes != r.vllm))
    return fmt::format("format '{}': record sizes key {} / value {} / slot {} bytes do not match its codecs' layout at "
                       "head_dim {} (key {} / value {} / slot {} or {}: use kernel_format)",
                       f.name, f.key_bytes, f.value_bytes, f.slot_bytes, f.head_dim, r.key, r.value, r.plain, r.vllm);
  return {};
}

std::string decode_support(const KernelFormat& f) {
  // (turbo2/3/4 and turbo4-qjl: one block of 128 per head at d = 64, 128, two at 256)
  if (const GpuCodec* c = gpu_codec(f); c && c->decode) return {};
  return fmt::format("format '{}': the paged decode kernel implements {}", f.name, join(gpu_formats(true)));
}

}  // namespace tq::cuda

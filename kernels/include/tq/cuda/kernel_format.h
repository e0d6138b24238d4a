// The GPU view of a tq::KvFormat: which key/value codecs a slot holds, their
// byte offsets and the constant tables (codebook, sign tables) the kernels
// need. Built from the CPU format object (reusing its parameters, never
// redefining them), so the CPU encoder stays the single source of truth.
//
// Slot layout (one token-head), as KvFormat::slot_bytes():
//   [0, key_bytes)                 key record
//   [key_bytes, key+value_bytes)   value record
//   [.., slot_bytes)               pad to even (vLLM presets), written as 0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tq/formats/layouts.h"

namespace tq {
struct KvFormat;
}

namespace tq::cuda {

enum class KeyKind : int {
  mse = 0,    // Hadamard (Sylvester, 1/sqrt(d)) + scalar codebook, b-bit LSB-first indices, fp16 norm
  fp8 = 1,    // FP8 E4M3 bytes, no rotation, no scale (turboquant_k8v4)
  turbo = 2,      // turboquant_plus blocks of 128 (turbo2 / turbo3 / turbo4), corrected norm
  turbo_qjl = 3,  // turbo4-qjl blocks of 128: raw norm, residual norm, 3-bit indices, 1-bit QJL signs
};
enum class ValueKind : int {
  uniform = 0,  // per-vector min/max, b-bit codes, fp16 scale then fp16 zero
  turbo = 1,      // the same turbo block codec as the key
  turbo_qjl = 2,  // turbo4-qjl blocks, as the key
};

// Bytes of a key / value record of these kinds and bits at head_dim d (tq/formats/layouts.h, the
// expressions the CPU codecs' row_bytes use): the kernels' compile-time sizes (FormatCfg) and
// kernel_format's come from here, so they cannot disagree.
constexpr int key_record_bytes(KeyKind k, int bits, int d) {
  return k == KeyKind::mse   ? layout::mse_record_bytes(d, bits)
         : k == KeyKind::fp8 ? layout::fp8_record_bytes(d)
                             : layout::turbo_record_bytes(d, bits, k == KeyKind::turbo_qjl);
}
constexpr int value_record_bytes(ValueKind v, int bits, int d) {
  return v == ValueKind::uniform ? layout::uniform_record_bytes(d, bits)
                                 : layout::turbo_record_bytes(d, bits, v == ValueKind::turbo_qjl);
}

struct KernelFormat {
  std::string name;
  int head_dim = 0;
  KeyKind key = KeyKind::mse;
  ValueKind value = ValueKind::uniform;
  int key_bits = 0, value_bits = 0;        // mse/turbo index bits; u value bits; fp8: 8
  int key_bytes = 0, value_bytes = 0, slot_bytes = 0;
  bool norm_correction = false;            // mse "+nc": c ·= 1/sqrt(Σc² + 1e-16) on read
  int levels = 0;                          // codebook size (2^bits)
  float centroids[16] = {};                // ascending, float32 as the CPU codec holds them
  float midpoints[15] = {};                // index = #{i : y >= m_i}
  float rot_scale = 0.f;                   // float(1/sqrt(double(d))) (turbo: of 128)
  // α ∈ [1, 2) making every α·c_i as close as possible to an fp16 value (max
  // relative rounding error: 7.4e-5 for vLLM's 4-bit codebook at d = 128,
  // against 4.0e-4 at α = 1). The decode kernel's tensor-core LUT holds
  // half(α·c); the norm correction divides α out (raw norms: the launcher does).
  float lut_scale = 1.f;
  uint32_t turbo_s1[4] = {}, turbo_s2[4] = {};  // turbo sign tables, bit i set = sign −1
  // turbo4-qjl: the QJL rotation's sign tables (as turbo_s1/s2; its scale is rot_scale) and
  // TurboCodec::qjl_scale() (the decode's k = qjl_scale·rnorm)
  uint32_t qjl_s1[4] = {}, qjl_s2[4] = {};
  float qjl_scale = 0.f;
};

// The GPU codec table: one row per key/value codec pair the kernels implement,
//   X(KEY_KIND, KEY_BITS, VALUE_KIND, VALUE_BITS, DECODE, FORMAT)
// The store and dequant kernels take every row (formats.cuh: dispatch_format); the paged decode
// the rows with DECODE = 1 (dispatch_decode_format; the build generates one translation unit per
// such row that instantiates it: kernels/CMakeLists.txt, python/setup.py — they parse the rows
// below, one per line, as written). FORMAT is a format name that selects the row (a preset, a turbo
// block format or a research spec). kernel_format, decode_support, their messages and the GPU
// tests' format loops all read this table. A new GPU codec pair: one row, its paths in the store and
// dequant kernels, and (DECODE = 1) the decode's KeyCodec / ValueCodec specializations of its kinds
// and bits (kernels/src/decode_key_codecs.cuh, decode_value_codecs.cuh).
#define TQ_GPU_CODECS(X)                              \
  X(mse, 4, uniform, 4, 1, "turboquant_4bit_nc")      \
  X(mse, 3, uniform, 4, 1, "turboquant_k3v4_nc")      \
  X(mse, 3, uniform, 3, 1, "turboquant_3bit_nc")      \
  X(mse, 4, uniform, 3, 0, "k=mse4+nc,v=u3")          \
  X(fp8, 8, uniform, 4, 1, "turboquant_k8v4")         \
  X(fp8, 8, uniform, 3, 0, "k=fp8,v=u3")              \
  X(turbo, 2, turbo, 2, 1, "turbo2")                  \
  X(turbo, 3, turbo, 3, 1, "turbo3")                  \
  X(turbo, 4, turbo, 4, 1, "turbo4")                  \
  X(turbo_qjl, 3, turbo_qjl, 3, 1, "turbo4-qjl")

struct GpuCodec {
  KeyKind key;
  int key_bits;
  ValueKind value;
  int value_bits;
  bool decode;         // the paged decode implements it
  const char* format;  // a format name selecting it
};
#define TQ_GPU_CODEC_ROW(KK, KB, VK, VB, DEC, NAME) GpuCodec{KeyKind::KK, KB, ValueKind::VK, VB, (DEC) != 0, NAME},
inline constexpr GpuCodec kGpuCodecs[] = {TQ_GPU_CODECS(TQ_GPU_CODEC_ROW)};
#undef TQ_GPU_CODEC_ROW

// The table row of f's key/value codecs and bits (null: no kernel implements them).
const GpuCodec* gpu_codec(const KernelFormat& f);
// The FORMAT names of the table's rows (decode_only: of the rows the paged decode implements).
std::vector<std::string> gpu_formats(bool decode_only = false);

// Throws tq::Error naming the format when the store and dequant kernels have no
// path for it (e.g. rot=haar, k=prod3, q8_0 values). Supported: turboquant_4bit_nc,
// turboquant_k3v4_nc, turboquant_3bit_nc, turboquant_k8v4 (and specs
// k=mse3|mse4[+nc],v=u3|u4,rot=hadamard / k=fp8,v=u3|u4), turbo2, turbo3,
// turbo4, turbo4-qjl; head_dim 64, 128 or 256. The paged decode takes fewer
// (decode_support).
KernelFormat kernel_format(const KvFormat& format);

// Whether the paged decode kernel handles this format (the presets and mse/fp8 +
// u3/u4 specs it instantiates; turbo2/turbo3/turbo4, turbo4-qjl). Empty string = yes;
// otherwise the reason.
std::string decode_support(const KernelFormat& f);
// Empty when f's key_bytes / value_bytes / slot_bytes are its codecs' layout (as kernel_format sets
// them; the slot with or without vLLM's pad byte), else why not (a hand-built KernelFormat).
std::string layout_support(const KernelFormat& f);

// Whether the store and decode kernels handle this format in the plane layout
// (CacheLayout::planes: mse keys + 4-bit uniform values). Empty = yes.
std::string planes_support(const KernelFormat& f);

}  // namespace tq::cuda

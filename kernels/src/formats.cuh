// Compile-time format descriptions and the one runtime → compile-time dispatch
// (internal). The default case of every switch is an error, never a no-op.
#pragma once

#include <type_traits>

#include "tq/cuda/check.h"
#include "tq/cuda/kernel_format.h"

namespace tq::cuda {

template <KeyKind KK, int KB, ValueKind VK, int VB, int D>
struct FormatCfg {
  static constexpr KeyKind kKey = KK;
  static constexpr ValueKind kValue = VK;
  static constexpr int kKeyBits = KB, kValueBits = VB, kD = D;
  static constexpr int kIdxBytes = (D * KB + 7) / 8;             // mse index stream
  static constexpr int kTurboBlocks = (D + 127) / 128;           // turbo: zero-padded blocks of 128
  static constexpr int kTurboBlockBytes = KK == KeyKind::turbo_qjl ? 68  // BlockTurbo4Qjl
                                          : KB == 2 ? 34 : KB == 3 ? 50 : 66;  // BlockTurbo2 / 3 / 4
  static constexpr int kKeyBytes = KK == KeyKind::mse ? kIdxBytes + 2
                                   : KK == KeyKind::fp8 ? D
                                                        : kTurboBlocks * kTurboBlockBytes;
  static constexpr int kValueCodeBytes = (D * VB + 7) / 8;
  static constexpr int kValueBytes = VK == ValueKind::uniform ? kValueCodeBytes + 4 : kKeyBytes;
  static constexpr int kLevels = 1 << KB;
  // blocks of 128 (keys and values alike): turbo2/3/4, or turbo4-qjl (kQjl)
  static constexpr bool kTurbo = KK == KeyKind::turbo || KK == KeyKind::turbo_qjl;
  static constexpr bool kQjl = KK == KeyKind::turbo_qjl;
};

template <KeyKind KK, int KB, ValueKind VK, int VB, class Fn>
inline void dispatch_head_dim(int d, Fn&& fn) {
  switch (d) {
    case 64: fn(FormatCfg<KK, KB, VK, VB, 64>{}); break;
    case 128: fn(FormatCfg<KK, KB, VK, VB, 128>{}); break;
    case 256: fn(FormatCfg<KK, KB, VK, VB, 256>{}); break;
    default: throw_error("GPU kernels: head_dim must be 64, 128 or 256");
  }
}

// All formats the store and dequant kernels implement.
template <class Fn>
inline void dispatch_format(const KernelFormat& f, Fn&& fn) {
  const int d = f.head_dim;
  if (f.key == KeyKind::mse && f.value == ValueKind::uniform) {
    if (f.key_bits == 4 && f.value_bits == 4) return dispatch_head_dim<KeyKind::mse, 4, ValueKind::uniform, 4>(d, fn);
    if (f.key_bits == 3 && f.value_bits == 4) return dispatch_head_dim<KeyKind::mse, 3, ValueKind::uniform, 4>(d, fn);
    if (f.key_bits == 3 && f.value_bits == 3) return dispatch_head_dim<KeyKind::mse, 3, ValueKind::uniform, 3>(d, fn);
    if (f.key_bits == 4 && f.value_bits == 3) return dispatch_head_dim<KeyKind::mse, 4, ValueKind::uniform, 3>(d, fn);
  }
  if (f.key == KeyKind::fp8 && f.value == ValueKind::uniform) {
    if (f.value_bits == 4) return dispatch_head_dim<KeyKind::fp8, 8, ValueKind::uniform, 4>(d, fn);
    if (f.value_bits == 3) return dispatch_head_dim<KeyKind::fp8, 8, ValueKind::uniform, 3>(d, fn);
  }
  if (f.key == KeyKind::turbo && f.value == ValueKind::turbo) {
    if (f.key_bits == 2) return dispatch_head_dim<KeyKind::turbo, 2, ValueKind::turbo, 2>(d, fn);
    if (f.key_bits == 3) return dispatch_head_dim<KeyKind::turbo, 3, ValueKind::turbo, 3>(d, fn);
    if (f.key_bits == 4) return dispatch_head_dim<KeyKind::turbo, 4, ValueKind::turbo, 4>(d, fn);
  }
  if (f.key == KeyKind::turbo_qjl && f.value == ValueKind::turbo_qjl && f.key_bits == 3)
    return dispatch_head_dim<KeyKind::turbo_qjl, 3, ValueKind::turbo_qjl, 3>(d, fn);
  throw_error("GPU kernels: no kernel instantiated for this key/value codec combination");
}

// The subset the paged decode kernel implements (the vLLM presets, turbo2/3/4, turbo4-qjl).
template <class Fn>
inline void dispatch_decode_format(const KernelFormat& f, Fn&& fn) {
  const int d = f.head_dim;
  if (f.key == KeyKind::mse && f.value == ValueKind::uniform) {
    if (f.key_bits == 4 && f.value_bits == 4) return dispatch_head_dim<KeyKind::mse, 4, ValueKind::uniform, 4>(d, fn);
    if (f.key_bits == 3 && f.value_bits == 4) return dispatch_head_dim<KeyKind::mse, 3, ValueKind::uniform, 4>(d, fn);
    if (f.key_bits == 3 && f.value_bits == 3) return dispatch_head_dim<KeyKind::mse, 3, ValueKind::uniform, 3>(d, fn);
  }
  if (f.key == KeyKind::fp8 && f.value == ValueKind::uniform && f.value_bits == 4)
    return dispatch_head_dim<KeyKind::fp8, 8, ValueKind::uniform, 4>(d, fn);
  if (f.key == KeyKind::turbo && f.value == ValueKind::turbo) {
    if (f.key_bits == 4) return dispatch_head_dim<KeyKind::turbo, 4, ValueKind::turbo, 4>(d, fn);
    if (f.key_bits == 3) return dispatch_head_dim<KeyKind::turbo, 3, ValueKind::turbo, 3>(d, fn);
    if (f.key_bits == 2) return dispatch_head_dim<KeyKind::turbo, 2, ValueKind::turbo, 2>(d, fn);
  }
  if (f.key == KeyKind::turbo_qjl && f.value == ValueKind::turbo_qjl && f.key_bits == 3)
    return dispatch_head_dim<KeyKind::turbo_qjl, 3, ValueKind::turbo_qjl, 3>(d, fn);
  throw_error("paged decode: no kernel for this key/value codec combination (decode implements mse4+u4, mse3+u4, "
              "mse3+u3 and fp8+u4 — the turboquant_* presets — and turbo2/turbo3/turbo4/turbo4-qjl)");
}

}  // namespace tq::cuda

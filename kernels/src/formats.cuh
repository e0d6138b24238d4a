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
  // (sizes: tq/formats/layouts.h, the CPU codecs' own expressions and block structs)
  static constexpr int kIdxBytes = int(packed_bytes(D, KB));  // mse index stream
  static constexpr int kTurboBlocks = layout::turbo_blocks(D);   // turbo: zero-padded blocks of 128
  static constexpr int kTurboBlockBytes = layout::turbo_block_bytes(KB, KK == KeyKind::turbo_qjl);  // sizeof(BlockTurbo*)
  static constexpr int kKeyBytes = key_record_bytes(KK, KB, D);
  static constexpr int kValueCodeBytes = int(packed_bytes(D, VB));
  static constexpr int kValueBytes = value_record_bytes(VK, VB, D);
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

// f's row of the GPU codec table (TQ_GPU_CODECS) as its FormatCfg at f.head_dim: fn(FormatCfg<…>{}).
// kDecode: only the rows the paged decode implements (the others are not instantiated here).
// Returns false when no row matches.
template <bool kDecode, class Fn>
inline bool dispatch_codec_row(const KernelFormat& f, Fn&& fn) {
  bool found = false;
#define TQ_DISPATCH_ROW(KK, KB, VK, VB, DEC, NAME)                                                                \
  if constexpr (!kDecode || (DEC) != 0) {                                                                          \
    if (!found && f.key == KeyKind::KK && f.key_bits == KB && f.value == ValueKind::VK && f.value_bits == VB) {   \
      found = true;                                                                                                \
      dispatch_head_dim<KeyKind::KK, KB, ValueKind::VK, VB>(f.head_dim, fn);                                       \
    }                                                                                                              \
  }
  TQ_GPU_CODECS(TQ_DISPATCH_ROW)
#undef TQ_DISPATCH_ROW
  return found;
}

// All formats the store and dequant kernels implement (every row of the table).
template <class Fn>
inline void dispatch_format(const KernelFormat& f, Fn&& fn) {
  if (!dispatch_codec_row<false>(f, fn))
    throw_error("GPU kernels: no kernel instantiated for this key/value codec combination");
}

// The rows the paged decode kernel implements (each instantiated in its generated decode_<format>.cu).
template <class Fn>
inline void dispatch_decode_format(const KernelFormat& f, Fn&& fn) {
  if (!dispatch_codec_row<true>(f, fn))
    throw_error("paged decode: no kernel for this key/value codec combination (decode_support names the ones "
                "implemented)");
}

}  // namespace tq::cuda

// The byte layouts the CPU codecs write and the GPU kernels read, in one header compiled by g++
// and nvcc (as ggml-common.h): the turboquant_plus block structs and the record sizes of the codecs
// both sides implement. Every size on either side comes from these expressions (GPU: FormatCfg in
// kernels/src/formats.cuh and tq::cuda::key_record_bytes / value_record_bytes), so they cannot
// disagree. Field meanings: tq/formats/turbo.h (turbo blocks), tq/formats/mse.h, tq/formats/uniform.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tq {

// Bytes of n codes of b bits packed LSB-first (tq/bitpack.h packs them).
constexpr size_t packed_bytes(size_t n_codes, int bits) { return (n_codes * size_t(bits) + 7) / 8; }

// turboquant_plus / llama.cpp-fork blocks of 128 values (ggml-common.h of TheTom/llama-cpp-turboquant)
struct BlockTurbo2 {
  uint16_t norm;
  uint8_t qs[32];
};
static_assert(sizeof(BlockTurbo2) == 34, "turbo2 block is 34 bytes");

struct BlockTurbo3 {
  uint16_t norm;
  uint8_t qs[32];
  uint8_t signs[16];
};
static_assert(sizeof(BlockTurbo3) == 50, "turbo3 block is 50 bytes");

struct BlockTurbo4 {
  uint16_t norm;
  uint8_t qs[64];
};
static_assert(sizeof(BlockTurbo4) == 66, "turbo4 block is 66 bytes");

struct BlockTurbo4Qjl {
  uint16_t norm;
  uint16_t rnorm;
  uint8_t qs[48];
  uint8_t signs[16];
};
static_assert(sizeof(BlockTurbo4Qjl) == 68, "turbo4-qjl block is 68 bytes");

namespace layout {

// mse keys: the indices, then the fp16 norm
constexpr int mse_record_bytes(int d, int bits) { return int(packed_bytes(size_t(d), bits)) + 2; }
// uniform (min/max) values: the codes, then fp16 scale and fp16 zero
constexpr int uniform_record_bytes(int d, int bits) { return int(packed_bytes(size_t(d), bits)) + 4; }
// turbo blocks: a head of d values zero-padded to whole blocks of 128
constexpr int turbo_blocks(int d) { return (d + 127) / 128; }
// the turbo block of `bits` (2, 3, 4; qjl: turbo4-qjl)
constexpr int turbo_block_bytes(int bits, bool qjl) {
  return qjl ? int(sizeof(BlockTurbo4Qjl))
             : bits == 2 ? int(sizeof(BlockTurbo2)) : bits == 3 ? int(sizeof(BlockTurbo3)) : int(sizeof(BlockTurbo4));
}
constexpr int turbo_record_bytes(int d, int bits, bool qjl) { return turbo_blocks(d) * turbo_block_bytes(bits, qjl); }
// fp8 keys: one byte per value, no scale
constexpr int fp8_record_bytes(int d) { return d; }
// vLLM's slot: key record, value record, one pad byte to an even size
constexpr int vllm_slot_bytes(int key_bytes, int value_bytes) { return (key_bytes + value_bytes + 1) & ~1; }

}  // namespace layout

}  // namespace tq

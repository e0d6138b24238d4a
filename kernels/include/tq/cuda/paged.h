// Paged KV cache views shared by the store, decode and dequant launchers.
//
// Quantized cache (vLLM TurboQuant layout):
//   cache       uint8 [num_blocks, block_size, n_kv_heads, slot_bytes]
//               slot (token t, head h) of block b at
//               ((b·block_size + t)·n_kv_heads + h)·slot_bytes
//   block_table int32 [batch, block_table_stride]  physical block of page p of sequence i
//   seq_lens    int32 [batch]                      tokens of sequence i (positions 0..len-1)
//   slot_mapping int64 [num_tokens]                block·block_size + offset; negative = skip
// Plane layout (CacheLayout::planes; our own, not vLLM's; mse keys + 4-bit
// uniform values: turboquant_4bit_nc, turboquant_k3v4_nc): the same bytes as
// the vLLM layout, each group of 16 consecutive slots of a block (all heads;
// block_size / 16 groups per block) rearranged into three planes, each 16-byte
// aligned:
//   key-index plane  [n_kv_heads][16][IB]   IB = key index bytes (D·kb/8)
//   value-code plane [n_kv_heads][16][VB]   VB = value code bytes (D·vb/8)
//   metadata plane   [n_kv_heads][16][6]    {fp16 key norm, fp16 scale, fp16 zero}
//   slot s (= block·block_size + t), head h: group = data + (s & ~15)·n_kv_heads·slot_bytes,
//   i = s & 15; key at group + (h·16 + i)·IB, codes at group + 16·H·IB + (h·16 + i)·VB,
//   metadata at group + 16·H·(IB + VB) + (h·16 + i)·6.
// For block_size 16 (vLLM's default) a group is the whole page. 16 tokens is the
// decode's MMA tile (M = 16 tokens), so a tile's bytes are one contiguous run and
// the copy offsets do not depend on the block size. slot_bytes = IB + 2 + VB + 4
// exactly (no pad byte in these formats), so a page has the vLLM page's size.
// FP16 baseline cache (two tensors, same paging):
//   k, v        fp16 [num_blocks, block_size, n_kv_heads, head_dim]
#pragma once

#include <cstdint>

namespace tq::cuda {

enum class CacheLayout : int { vllm = 0, planes = 1 };

// The 16-bit float type of the activations a kernel reads or writes: the store's keys and values,
// the decode's queries and outputs, the dequant's rows (vLLM serves bf16 models with bf16
// activations). Reading one is exact; writing one rounds to nearest even.
enum class Dtype16 : int { f16 = 0, bf16 = 1 };
inline const char* dtype16_name(Dtype16 t) { return t == Dtype16::bf16 ? "bf16" : "fp16"; }

// The page sizes (tokens per block) the kernels take.
inline constexpr int kBlockSizes[] = {16, 32, 64, 128};

struct PagedCache {
  uint8_t* data = nullptr;  // 16-byte aligned
  int64_t num_blocks = 0;
  int block_size = 0;       // one of kBlockSizes
  int n_kv_heads = 0;
  int slot_bytes = 0;       // KernelFormat::slot_bytes
  CacheLayout layout = CacheLayout::vllm;  // planes: store and decode only (dequant: vllm)
};

struct PagedCacheF16 {
  void* k = nullptr;        // fp16 [num_blocks, block_size, n_kv_heads, head_dim], 16-byte aligned
  void* v = nullptr;
  int64_t num_blocks = 0;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

struct BlockTable {
  const int32_t* table = nullptr;   // [batch, stride]
  int stride = 0;                   // max_blocks_per_seq
  const int32_t* seq_lens = nullptr;  // [batch]
  int batch = 0;
};

}  // namespace tq::cuda

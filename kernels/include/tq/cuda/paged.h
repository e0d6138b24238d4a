// Paged KV cache views shared by the store, decode and dequant launchers.
//
// Quantized cache (vLLM TurboQuant layout):
//   cache       uint8 [num_blocks, block_size, n_kv_heads, slot_bytes]
//               slot (token t, head h) of block b at
//               ((b·block_size + t)·n_kv_heads + h)·slot_bytes
//   block_table int32 [batch, block_table_stride]  physical block of page p of sequence i
//   seq_lens    int32 [batch]                      tokens of sequence i (positions 0..len-1)
//   slot_mapping int64 [num_tokens]                block·block_size + offset; negative = skip
// FP16 baseline cache (two tensors, same paging):
//   k, v        fp16 [num_blocks, block_size, n_kv_heads, head_dim]
#pragma once

#include <cstdint>

namespace tq::cuda {

struct PagedCache {
  uint8_t* data = nullptr;  // 16-byte aligned
  int64_t num_blocks = 0;
  int block_size = 0;       // 16, 32, 64 or 128
  int n_kv_heads = 0;
  int slot_bytes = 0;       // KernelFormat::slot_bytes
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

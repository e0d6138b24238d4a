// The fused store kernels' argument block and tables (store.cu, store_quad.cuh) and
// their 2-byte store (internal).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

namespace tq::cuda {

namespace {

struct StoreTables {
  float centroids[16];
  float midpoints[16];
  float rot_scale;
  uint32_t s1[4], s2[4];
  uint32_t q1[4], q2[4];  // turbo4-qjl: the QJL rotation's signs (its scale: rot_scale too)
};

struct StoreArgs {
  const uint16_t* key;    // fp16 or bf16 bits (the kernels' BF)
  const uint16_t* value;
  int64_t ks_tok, ks_head, vs_tok, vs_head;
  const int64_t* slot_mapping;
  int64_t total;  // num_tokens · n_kv_heads
  int n_kv_heads;
  uint8_t* cache;
  int slot_bytes;
  int planes;  // CacheLayout::planes (mse keys + uniform values only; see paged.h)
};

__device__ __forceinline__ void store_u16(uint8_t* p, uint32_t v) { *reinterpret_cast<uint16_t*>(p) = uint16_t(v); }

}  // namespace

}  // namespace tq::cuda

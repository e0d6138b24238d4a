// Fused store: quantize fp16 or bf16 keys/values of new tokens into their cache slots.
// One kernel per family (mse+u, fp8+u, turbo blocks); bytes identical to
// KvFormat::encode_slots on float(k), float(v) (exact: every fp16 and bf16 value is a float).
//
//   key, value  fp16 or bf16 (dtype) [num_tokens, n_kv_heads, head_dim]; element (t, h, j) at
//               t·stride_token + h·stride_head + j (elements)
//   slot_mapping int64 [num_tokens]; token t goes to cache slot
//               (slot_mapping[t]·n_kv_heads + h)·slot_bytes; negative = skip
// Inputs the CPU encoder refuses (NaN/Inf, a key norm beyond the fp16 range)
// are not checked here: such slots get inf/NaN fp16 fields.
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "tq/cuda/kernel_format.h"
#include "tq/cuda/paged.h"

namespace tq::cuda {

struct StoreParams {
  const void* key = nullptr;    // dtype
  const void* value = nullptr;  // dtype
  Dtype16 dtype = Dtype16::f16;
  int64_t key_stride_token = 0, key_stride_head = 0;
  int64_t value_stride_token = 0, value_stride_head = 0;
  const int64_t* slot_mapping = nullptr;
  int num_tokens = 0;
  PagedCache cache;

  // Contiguous key/value [num_tokens, cache.n_kv_heads, head_dim] of type dtype.
  static StoreParams contiguous(const void* key, const void* value, const int64_t* slot_mapping, int num_tokens,
                                int head_dim, const PagedCache& cache, Dtype16 dtype = Dtype16::f16) {
    StoreParams p;
    p.key = key;
    p.value = value;
    p.dtype = dtype;
    p.key_stride_token = p.value_stride_token = int64_t(cache.n_kv_heads) * head_dim;
    p.key_stride_head = p.value_stride_head = head_dim;
    p.slot_mapping = slot_mapping;
    p.num_tokens = num_tokens;
    p.cache = cache;
    return p;
  }
};

// Empty when store_kv can run these arguments, else the reason.
std::string store_can_implement(const KernelFormat& f, const StoreParams& p);
// Throws tq::Error on invalid arguments (the can_implement reason) or CUDA errors.
void store_kv(const KernelFormat& f, const StoreParams& p, cudaStream_t stream = nullptr);

}  // namespace tq::cuda

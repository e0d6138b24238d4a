// Full dequantization of paged sequences to fp16 or bf16 (for long prefill
// continuations that run a dense attention kernel over the cached prefix).
// K comes back in the ORIGINAL basis (inverse rotation applied), so each value
// equals half(CPU KvFormat::decode_slots) — or bf16(…), both round to nearest
// even — of the same slot; V = code·scale16 + zero16, rounded the same way.
//
//   sequence i, positions [0, seq_lens[i]) → rows out_offsets[i] + pos of
//   k_out, v_out  fp16 or bf16 [rows, n_kv_heads, head_dim] (contiguous)
#pragma once

#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "tq/cuda/kernel_format.h"
#include "tq/cuda/paged.h"

namespace tq::cuda {

using DequantDtype = Dtype16;  // the output rows' type

struct DequantParams {
  PagedCache cache;
  BlockTable blocks;
  const int32_t* out_offsets = nullptr;  // [batch]: first output row of each sequence
  void* k_out = nullptr;                 // dtype
  void* v_out = nullptr;                 // dtype
  DequantDtype dtype = DequantDtype::f16;
  int max_seq_len = 0;                   // ≥ every seq_lens[i] (sizes the grid)
};

std::string dequant_can_implement(const KernelFormat& f, const DequantParams& p);
void dequant_paged(const KernelFormat& f, const DequantParams& p, cudaStream_t stream = nullptr);

}  // namespace tq::cuda

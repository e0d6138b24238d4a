// can_implement checks of the launchers (host, g++: messages via fmt). Each
// returns "" when the kernel can run the arguments, else what is wrong, naming
// the field and its value.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "align.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/dequant.h"
#include "tq/cuda/store.h"

namespace tq::cuda {

// decode.cu: warps per CTA of the format's quantized decode kernel (QCfg::kCtaWarps, decode_cfg.cuh), and the
// heads per CTA it streams n_kv_heads with (0: none)
int decode_cta_warps(const KernelFormat& f);
int decode_heads_per_cta(const KernelFormat& f, int n_kv_heads);

namespace {

bool valid_block_size(int b) {
  return std::find(std::begin(kBlockSizes), std::end(kBlockSizes), b) != std::end(kBlockSizes);
}
bool valid_dtype(Dtype16 t) { return t == Dtype16::f16 || t == Dtype16::bf16; }

std::string check_cache(const char* who, const KernelFormat& f, const PagedCache& c) {
  if (!c.data) return fmt::format("{}: cache.data is null", who);
  if (!is_aligned(c.data, 16)) return fmt::format("{}: cache.data must be 16-byte aligned", who);
  if (auto e = layout_support(f); !e.empty()) return fmt::format("{}: {}", who, e);
  if (c.slot_bytes != f.slot_bytes)
    return fmt::format("{}: cache.slot_bytes {} != format '{}' slot_bytes {}", who, c.slot_bytes, f.name, f.slot_bytes);
  if (f.slot_bytes % 2) return fmt::format("{}: format '{}' has an odd slot size {}", who, f.name, f.slot_bytes);
  if (!valid_block_size(c.block_size))
    return fmt::format("{}: cache.block_size {} not supported (16, 32, 64 or 128)", who, c.block_size);
  if (c.n_kv_heads < 1) return fmt::format("{}: cache.n_kv_heads {} must be ≥ 1", who, c.n_kv_heads);
  if (c.num_blocks < 1) return fmt::format("{}: cache.num_blocks {} must be ≥ 1", who, c.num_blocks);
  if (c.layout == CacheLayout::planes) {
    if (auto e = planes_support(f); !e.empty()) return fmt::format("{}: {}", who, e);
  } else if (c.layout != CacheLayout::vllm) {
    return fmt::format("{}: unknown cache.layout {}", who, int(c.layout));
  }
  return {};
}

std::string check_blocks(const char* who, const BlockTable& b) {
  if (b.batch < 1) return fmt::format("{}: batch {} must be ≥ 1", who, b.batch);
  if (!b.table || !b.seq_lens) return fmt::format("{}: block table or seq_lens is null", who);
  if (b.stride < 1) return fmt::format("{}: block table stride {} must be ≥ 1", who, b.stride);
  return {};
}

std::string check_decode_common(const char* who, int head_dim, int n_kv_heads, const DecodeParams& p) {
  if (auto e = check_blocks(who, p.blocks); !e.empty()) return e;
  if (!p.query || !p.out) return fmt::format("{}: query or out is null", who);
  if (!valid_dtype(p.dtype)) return fmt::format("{}: unknown query/out dtype {} (f16 or bf16)", who, int(p.dtype));
  if (p.n_q_heads < 1 || p.n_q_heads % n_kv_heads)
    return fmt::format("{}: n_q_heads {} must be a positive multiple of n_kv_heads {}", who, p.n_q_heads, n_kv_heads);
  if (!is_aligned(p.query, 4) || p.q_stride_batch % 2 || p.q_stride_head % 2 || p.q_stride_head < head_dim)
    return fmt::format("{}: query must be 4-byte aligned with even strides ≥ head_dim (got {}, {})", who,
                       p.q_stride_batch, p.q_stride_head);
  if (!is_aligned(p.out, 4) || p.o_stride_batch % 2 || p.o_stride_head % 2 || p.o_stride_head < head_dim)
    return fmt::format("{}: out must be 4-byte aligned with even strides ≥ head_dim (got {}, {})", who,
                       p.o_stride_batch, p.o_stride_head);
  if (!(p.attn_scale == p.attn_scale) || p.attn_scale == 0.f)
    return fmt::format("{}: attn_scale {} must be finite and non-zero", who, p.attn_scale);
  if (p.num_splits < 0 || p.num_splits > 256) return fmt::format("{}: num_splits {} must be 0 (auto) or 1..256", who, p.num_splits);
  if (p.column_tiles < 0 || p.column_tiles > 2)
    return fmt::format("{}: column_tiles {} must be 0 (auto), 1 or 2", who, p.column_tiles);
  if (p.max_seq_len < 0) return fmt::format("{}: max_seq_len {} must be ≥ 0", who, p.max_seq_len);
  if (p.q_len < 1 || p.q_len > kMaxQueryLen)
    return fmt::format("{}: q_len {} must be 1 … {} (longer chunks: dequant the cache and run a dense attention)", who,
                       p.q_len, kMaxQueryLen);
  if (p.q_len > 1) {
    if (p.q_stride_token == 0 || p.q_stride_token % 2 || p.o_stride_token == 0 || p.o_stride_token % 2)
      return fmt::format("{}: q_len {} > 1 needs even, non-zero q_stride_token and o_stride_token (got {}, {})", who,
                         p.q_len, p.q_stride_token, p.o_stride_token);
    if (p.q_start && (p.q_rows < 1 || p.q_rows > int64_t(p.blocks.batch) * p.q_len))
      return fmt::format("{}: q_rows {} must be 1 … batch {} · q_len {} (the rows q_start counts)", who, p.q_rows,
                         p.blocks.batch, p.q_len);
    if (p.q_start && !is_aligned(p.q_start, 4)) return fmt::format("{}: q_start must be 4-byte aligned", who);
    if (int64_t(p.blocks.batch) * p.q_len * p.n_q_heads > (int64_t(1) << 31) - 1)
      return fmt::format("{}: batch {} · q_len {} · n_q_heads {} query rows exceed 2^31", who, p.blocks.batch, p.q_len,
                         p.n_q_heads);
  }
  return {};
}

}  // namespace

std::string store_can_implement(const KernelFormat& f, const StoreParams& p) {
  if (auto e = check_cache("store_kv", f, p.cache); !e.empty()) return e;
  if (p.num_tokens < 0) return fmt::format("store_kv: num_tokens {} must be ≥ 0", p.num_tokens);
  if (p.num_tokens == 0) return {};
  if (!p.key || !p.value || !p.slot_mapping) return "store_kv: key, value or slot_mapping is null";
  if (!valid_dtype(p.dtype)) return fmt::format("store_kv: unknown key/value dtype {} (f16 or bf16)", int(p.dtype));
  if (!is_aligned(p.key, 2) || !is_aligned(p.value, 2)) return "store_kv: key/value must be 2-byte aligned";
  if (p.key_stride_head < f.head_dim || p.key_stride_token < p.key_stride_head * p.cache.n_kv_heads)
    return fmt::format("store_kv: key strides (token {}, head {}) overlap rows of head_dim {} × {} heads",
                       p.key_stride_token, p.key_stride_head, f.head_dim, p.cache.n_kv_heads);
  if (p.value_stride_head < f.head_dim || p.value_stride_token < p.value_stride_head * p.cache.n_kv_heads)
    return fmt::format("store_kv: value strides (token {}, head {}) overlap rows of head_dim {} × {} heads",
                       p.value_stride_token, p.value_stride_head, f.head_dim, p.cache.n_kv_heads);
  return {};
}

std::string planes_support(const KernelFormat& f) {
  if (f.key != KeyKind::mse || f.value != ValueKind::uniform || f.value_bits != 4 ||
      f.key_bytes + f.value_bytes != f.slot_bytes)
    return fmt::format("format '{}' has no plane-layout kernels (mse keys + 4-bit uniform values only)", f.name);
  return {};
}

std::string dequant_can_implement(const KernelFormat& f, const DequantParams& p) {
  if (auto e = check_cache("dequant_paged", f, p.cache); !e.empty()) return e;
  if (p.cache.layout != CacheLayout::vllm) return "dequant_paged: only the vLLM cache layout is supported";
  if (auto e = check_blocks("dequant_paged", p.blocks); !e.empty()) return e;
  if (!p.out_offsets || !p.k_out || !p.v_out) return "dequant_paged: out_offsets, k_out or v_out is null";
  if (!is_aligned(p.k_out, 2) || !is_aligned(p.v_out, 2)) return "dequant_paged: k_out/v_out must be 2-byte aligned";
  if (p.max_seq_len < 0) return fmt::format("dequant_paged: max_seq_len {} must be ≥ 0", p.max_seq_len);
  if (!valid_dtype(p.dtype))
    return fmt::format("dequant_paged: unknown output dtype {} (f16 or bf16)", int(p.dtype));
  return {};
}

std::string decode_heads_support(const KernelFormat& f, int n_kv_heads) {
  if (n_kv_heads < 1 || decode_heads_per_cta(f, n_kv_heads)) return {};  // (< 1: check_cache's message)
  return fmt::format("paged_decode: n_kv_heads {} not supported for '{}': no divisor of it ≤ {} (the kernel's warps) "
                     "has {}-byte slots that lie in the cache as 16-byte runs, and two ring stages of whole token rows "
                     "({} bytes each) do not fit in shared memory", n_kv_heads, f.name, decode_cta_warps(f), f.slot_bytes,
                     int64_t(n_kv_heads) * f.slot_bytes);
}

std::string decode_can_implement(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p) {
  if (auto e = decode_support(f); !e.empty()) return "paged_decode: " + e;
  if (auto e = check_cache("paged_decode", f, cache); !e.empty()) return e;
  if (auto e = decode_heads_support(f, cache.n_kv_heads); !e.empty()) return e;
  if (auto e = check_decode_common("paged_decode", f.head_dim, cache.n_kv_heads, p); !e.empty()) return e;
  if (p.q_len > 1 && cache.layout != CacheLayout::vllm)
    return fmt::format("paged_decode: q_len {} > 1 needs the vLLM cache layout (no multi-query kernel for the plane "
                       "layout)", p.q_len);
  return {};
}

std::string decode_f16_can_implement(const PagedCacheF16& c, const DecodeParams& p) {
  const char* who = "paged_decode_f16";
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    return fmt::format("{}: head_dim {} not supported (64, 128 or 256)", who, c.head_dim);
  if (!c.k || !c.v || !is_aligned(c.k, 16) || !is_aligned(c.v, 16)) return fmt::format("{}: k/v must be 16-byte aligned", who);
  if (!valid_block_size(c.block_size))
    return fmt::format("{}: block_size {} not supported (16, 32, 64 or 128)", who, c.block_size);
  if (c.n_kv_heads < 1 || c.num_blocks < 1) return fmt::format("{}: n_kv_heads and num_blocks must be ≥ 1", who);
  if (auto e = check_decode_common(who, c.head_dim, c.n_kv_heads, p); !e.empty()) return e;
  if (p.dtype != Dtype16::f16)
    return fmt::format("{}: query/out dtype {}: the FP16 baseline takes fp16 only", who, dtype16_name(p.dtype));
  return {};
}

}  // namespace tq::cuda

// PyTorch operators over tqkit's CUDA kernels, on vLLM's TurboQuant cache
// tensor and argument conventions (torch.ops.tqkit.*):
//
//   kv_cache      uint8 [num_blocks, block_size, num_kv_heads, slot_bytes], contiguous
//   slot_mapping  int64 [num_tokens]: block · block_size + offset; negative = skip
//   block_table   int32 [num_seqs, max_blocks_per_seq] (last dim contiguous)
//   seq_lens      int32 [num_seqs]: tokens of each sequence, the new ones included
//   key, value    fp16  [num_tokens, num_kv_heads, head_dim] (last dim contiguous)
//   query, out    fp16  [num_seqs, num_heads, head_dim] or [num_seqs, q_len, num_heads, head_dim], or
//                 [num_tokens, num_heads, head_dim] with query_start_loc int32 [num_seqs + 1] (sequence i's
//                 queries: rows query_start_loc[i] … query_start_loc[i+1] − 1, at most max_query_len ≤ 128)
//
// Query j of a sequence with q_len queries attends to positions [0, seq_len −
// q_len + j] (causal within the chunk; with query_start_loc, q_len is the
// sequence's own count). 1 < q_len ≤ 128 runs the fused
// multi-query decode (one launch: every page read once per 16 query columns);
// longer chunks run one single-query decode per query position, with each
// launch's sequence lengths written into the workspace (tqkit_torch.decode
// routes those to dequant + torch SDPA instead).
// Nothing here allocates device memory: out, the workspace and the dequant
// outputs come from the caller, so every op can be captured in a CUDA graph.
// Argument checks name the argument and raise RuntimeError; the contents of
// slot_mapping / block_table are not read on the host (that would synchronise):
// tqkit_torch's Python wrappers check them when asked (validate=True).
//
// Reference ops on the CPU (the oracle the GPU ops are tested against):
// encode_cpu (the CPU encoder's slot bytes) and decode_cpu (its decode).
#include <algorithm>
#include <cmath>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "tq/cuda/decode.h"
#include "tq/cuda/dequant.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/store.h"
#include "tq/error.h"
#include "tq/format.h"

namespace {

using at::Tensor;

struct Formats {
  tq::KvFormat cpu;
  tq::cuda::KernelFormat gpu;
};

// make_format solves no codebook for the presets, but building the GPU view
// still costs microseconds: cache per (name, head_dim).
const Formats& formats_for(const std::string& name, int64_t head_dim, const char* op) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<Formats>> cache;
  const std::string key = name + "@" + std::to_string(head_dim);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  TORCH_CHECK(head_dim > 0 && head_dim <= 4096, "tqkit.", op, ": head_dim ", head_dim, " is not supported");
  auto f = std::make_unique<Formats>();
  try {
    f->cpu = tq::make_format(name, int(head_dim));
    f->gpu = tq::cuda::kernel_format(f->cpu);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "tqkit.", op, ": ", e.what());  // names the format and the head_dim
  }
  return *cache.emplace(key, std::move(f)).first->second;
}

void check_cuda(const Tensor& t, const char* op, const char* arg, at::ScalarType dtype, const Tensor& ref) {
  TORCH_CHECK(t.defined(), "tqkit.", op, ": ", arg, " is undefined");
  TORCH_CHECK(t.is_cuda(), "tqkit.", op, ": ", arg, " must be a CUDA tensor (got ", t.device(), ")");
  TORCH_CHECK(t.device() == ref.device(), "tqkit.", op, ": ", arg, " is on ", t.device(), ", the cache on ",
              ref.device());
  TORCH_CHECK(t.scalar_type() == dtype, "tqkit.", op, ": ", arg, " must be ", dtype, " (got ", t.scalar_type(), ")");
}

// The 16-bit activation type of t (key, query, k_out): fp16 or bf16, else an error naming arg.
tq::cuda::Dtype16 act_dtype(const Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, "tqkit.", op, ": ", arg,
              " must be Half or BFloat16 (got ", t.scalar_type(), ")");
  return t.scalar_type() == at::kBFloat16 ? tq::cuda::Dtype16::bf16 : tq::cuda::Dtype16::f16;
}

// Runs fn, turning tqkit's exceptions (launcher checks, CUDA errors) into RuntimeError.
template <class Fn>
void guarded(const char* op, Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "tqkit.", op, ": ", e.what());
  }
}

tq::cuda::PagedCache cache_view(const Tensor& kv_cache, const Formats& f, const char* op) {
  TORCH_CHECK(kv_cache.dim() == 4, "tqkit.", op, ": kv_cache must be [num_blocks, block_size, num_kv_heads, ",
              "slot_bytes] (got ", kv_cache.dim(), " dims)");
  TORCH_CHECK(kv_cache.scalar_type() == at::kByte, "tqkit.", op, ": kv_cache must be uint8 (got ",
              kv_cache.scalar_type(), ")");
  TORCH_CHECK(kv_cache.is_cuda(), "tqkit.", op, ": kv_cache must be a CUDA tensor");
  TORCH_CHECK(kv_cache.is_contiguous(), "tqkit.", op, ": kv_cache must be contiguous");
  TORCH_CHECK(kv_cache.size(3) == f.gpu.slot_bytes, "tqkit.", op, ": kv_cache's last dim is ", kv_cache.size(3),
              " bytes but a ", f.gpu.name, " slot at head_dim ", f.gpu.head_dim, " is ", f.gpu.slot_bytes);
  tq::cuda::PagedCache c;
  c.data = kv_cache.data_ptr<uint8_t>();
  c.num_blocks = kv_cache.size(0);
  c.block_size = int(kv_cache.size(1));
  c.n_kv_heads = int(kv_cache.size(2));
  c.slot_bytes = int(kv_cache.size(3));
  return c;
}

tq::cuda::BlockTable table_view(const Tensor& block_table, const Tensor& seq_lens, const Tensor& kv_cache,
                                const char* op) {
  check_cuda(block_table, op, "block_table", at::kInt, kv_cache);
  check_cuda(seq_lens, op, "seq_lens", at::kInt, kv_cache);
  TORCH_CHECK(block_table.dim() == 2 && block_table.stride(1) == 1, "tqkit.", op,
              ": block_table must be [num_seqs, max_blocks] with a contiguous last dim");
  TORCH_CHECK(seq_lens.dim() == 1 && seq_lens.is_contiguous() && seq_lens.size(0) == block_table.size(0), "tqkit.",
              op, ": seq_lens must be a contiguous [num_seqs] with num_seqs = block_table.size(0) = ",
              block_table.size(0), " (got ", seq_lens.sizes(), ")");
  tq::cuda::BlockTable b;
  b.table = block_table.data_ptr<int32_t>();
  b.stride = int(block_table.stride(0));
  b.seq_lens = seq_lens.data_ptr<int32_t>();
  b.batch = int(block_table.size(0));
  return b;
}

int64_t slot_bytes(const std::string& format, int64_t head_dim) {
  return formats_for(format, head_dim, "slot_bytes").gpu.slot_bytes;
}

void store(const Tensor& key, const Tensor& value, Tensor& kv_cache, const Tensor& slot_mapping,
           const std::string& format) {
  const char* op = "store";
  TORCH_CHECK(key.dim() == 3, "tqkit.store: key must be [num_tokens, num_kv_heads, head_dim] (got ", key.sizes(),
              ")");
  const Formats& f = formats_for(format, key.size(2), op);
  const tq::cuda::PagedCache c = cache_view(kv_cache, f, op);
  const tq::cuda::Dtype16 dtype = act_dtype(key, op, "key");
  check_cuda(key, op, "key", key.scalar_type(), kv_cache);
  check_cuda(value, op, "value", key.scalar_type(), kv_cache);  // the key's type
  check_cuda(slot_mapping, op, "slot_mapping", at::kLong, kv_cache);
  TORCH_CHECK(value.sizes() == key.sizes(), "tqkit.store: value ", value.sizes(), " must match key ", key.sizes());
  TORCH_CHECK(key.size(1) == c.n_kv_heads, "tqkit.store: key has ", key.size(1), " kv heads, kv_cache ",
              c.n_kv_heads);
  TORCH_CHECK(key.stride(2) == 1 && value.stride(2) == 1, "tqkit.store: key and value need a contiguous last dim");
  TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.is_contiguous() && slot_mapping.size(0) == key.size(0),
              "tqkit.store: slot_mapping must be a contiguous [num_tokens] = [", key.size(0), "] (got ",
              slot_mapping.sizes(), ")");
  if (key.size(0) == 0) return;
  const c10::cuda::CUDAGuard guard(kv_cache.device());
  tq::cuda::StoreParams p;
  p.key = key.data_ptr();
  p.value = value.data_ptr();
  p.key_stride_token = key.stride(0);
  p.key_stride_head = key.stride(1);
  p.value_stride_token = value.stride(0);
  p.value_stride_head = value.stride(1);
  p.slot_mapping = slot_mapping.data_ptr<int64_t>();
  p.num_tokens = int(key.size(0));
  p.cache = c;
  p.dtype = dtype;
  guarded(op, [&] {
    const std::string why = tq::cuda::store_can_implement(f.gpu, p);
    TORCH_CHECK(why.empty(), "tqkit.store: ", why);
    tq::cuda::store_kv(f.gpu, p, at::cuda::getCurrentCUDAStream());
  });
}

// Shapes of one decode call: query [B, H, D] is q_len 1.
struct DecodeShape {
  int64_t batch, q_len, heads, head_dim;
};
DecodeShape decode_shape(const Tensor& query, const char* op) {
  TORCH_CHECK(query.dim() == 3 || query.dim() == 4, "tqkit.", op,
              ": query must be [num_seqs, num_heads, head_dim] or [num_seqs, q_len, num_heads, head_dim] (got ",
              query.sizes(), ")");
  if (query.dim() == 3) return {query.size(0), 1, query.size(1), query.size(2)};
  return {query.size(0), query.size(1), query.size(2), query.size(3)};
}

constexpr int64_t kLensAlign = 256;  // the per-launch seq_lens sit after the plan's workspace

// Whether a call of q_len queries takes the fused multi-query decode (else q_len single-query decodes).
bool fused_multi_query(int64_t q_len) { return q_len > 1 && q_len <= tq::cuda::kMaxQueryLen; }

tq::cuda::DecodeParams decode_params(const DecodeShape& s, const tq::cuda::BlockTable& b, double scale,
                                     int64_t max_seq_len, int64_t num_splits, tq::cuda::Dtype16 dtype) {
  tq::cuda::DecodeParams p;
  p.dtype = dtype;
  p.q_len = fused_multi_query(s.q_len) ? int(s.q_len) : 1;
  p.n_q_heads = int(s.heads);
  p.attn_scale = float(scale);
  p.blocks = b;
  p.num_splits = int(num_splits);
  p.max_seq_len = int(max_seq_len);
  return p;
}

// decode's launch form with query_start_loc (q_start on the device, rows query rows): query j of sequence i at row
// q_start[i] + j (token strides q_token, o_token), no batch stride. decode_workspace_bytes plans the same form.
void set_varlen(tq::cuda::DecodeParams& p, const int32_t* q_start, int64_t rows, int64_t q_token, int64_t o_token) {
  p.q_stride_token = q_token;
  p.o_stride_token = o_token;
  p.q_stride_batch = p.o_stride_batch = 0;
  p.q_start = q_start;
  p.q_rows = rows;
}

// The workspace a decode call of num_seqs sequences and q_len queries needs with `plan`: the plan's part, aligned
// to kLensAlign, then (chunks longer than the fused kernel takes) the per-launch seq_lens.
int64_t workspace_need(const tq::cuda::DecodePlan& plan, int64_t num_seqs, int64_t q_len) {
  const int64_t bytes = (int64_t(plan.workspace_bytes) + kLensAlign - 1) / kLensAlign * kLensAlign;
  return q_len > 1 && !fused_multi_query(q_len) ? bytes + num_seqs * int64_t(sizeof(int32_t)) : bytes;
}

constexpr const char* kCountsMsg = "num_seqs, q_len, num_heads, num_kv_heads, max_seq_len must be >= 1";

int64_t decode_workspace_bytes(const std::string& format, int64_t num_seqs, int64_t q_len, int64_t num_heads,
                               int64_t num_kv_heads, int64_t head_dim, int64_t block_size, int64_t max_seq_len,
                               int64_t num_splits, bool bf16) {
  const char* op = "decode_workspace_bytes";
  const Formats& f = formats_for(format, head_dim, op);
  TORCH_CHECK(num_seqs >= 1 && q_len >= 1 && num_heads >= 1 && num_kv_heads >= 1 && max_seq_len >= 1,
              "tqkit.decode_workspace_bytes: ", kCountsMsg);
  tq::cuda::PagedCache c;
  c.data = reinterpret_cast<uint8_t*>(256);  // shapes only: the planner never reads it
  c.num_blocks = 1;
  c.block_size = int(block_size);
  c.n_kv_heads = int(num_kv_heads);
  c.slot_bytes = f.gpu.slot_bytes;
  tq::cuda::BlockTable b;
  b.table = reinterpret_cast<const int32_t*>(256);
  b.stride = int((max_seq_len + block_size - 1) / block_size);
  b.seq_lens = reinterpret_cast<const int32_t*>(256);
  b.batch = int(num_seqs);
  tq::cuda::DecodeParams p = decode_params({num_seqs, q_len, num_heads, head_dim}, b, 1.0, max_seq_len, num_splits,
                                          bf16 ? tq::cuda::Dtype16::bf16 : tq::cuda::Dtype16::f16);
  p.query = p.out = reinterpret_cast<void*>(256);
  p.q_stride_head = p.o_stride_head = head_dim;
  p.q_stride_batch = p.o_stride_batch = q_len * num_heads * head_dim;
  p.q_stride_token = p.o_stride_token = p.q_len > 1 ? num_heads * head_dim : 0;
  int64_t need = 0;
  guarded(op, [&] {
    const std::string why = tq::cuda::decode_can_implement(f.gpu, c, p);
    TORCH_CHECK(why.empty(), "tqkit.decode: ", why);
    need = workspace_need(tq::cuda::plan_decode(f.gpu, c, p), num_seqs, q_len);
    if (fused_multi_query(q_len)) {
      // the same call with query_start_loc and max_query_len = q_len (decode's varlen branch): the planner
      // deals those launches one column chunk at a time (it cannot read the counts), so its split count and
      // workspace may be larger (32/8, d 128, 8 sequences of 8192 tokens, q_len 16, automatic splits:
      // 35.9 MB against 10.6)
      set_varlen(p, reinterpret_cast<const int32_t*>(256), num_seqs * q_len, p.q_stride_token, p.o_stride_token);
      need = std::max(need, workspace_need(tq::cuda::plan_decode(f.gpu, c, p), num_seqs, q_len));
    }
  });
  return need;
}

// The shape of a call with query_start_loc (qsl): query [num_tokens, num_heads, head_dim], num_seqs = qsl's
// length − 1 sequences of at most max_query_len queries (1 … kMaxQueryLen) that fill num_tokens rows.
DecodeShape varlen_shape(const Tensor& query, const Tensor& qsl, const Tensor& kv_cache, int64_t max_query_len,
                         const char* op) {
  TORCH_CHECK(query.dim() == 3, "tqkit.", op, ": with query_start_loc, query must be [num_tokens, num_heads, ",
              "head_dim] (got ", query.sizes(), ")");
  check_cuda(qsl, op, "query_start_loc", at::kInt, kv_cache);
  TORCH_CHECK(qsl.dim() == 1 && qsl.is_contiguous() && qsl.size(0) >= 2, "tqkit.", op,
              ": query_start_loc must be a contiguous int32 [num_seqs + 1] (got ", qsl.sizes(), ")");
  TORCH_CHECK(max_query_len >= 1 && max_query_len <= tq::cuda::kMaxQueryLen, "tqkit.", op, ": max_query_len ",
              max_query_len, " must be 1 … ", tq::cuda::kMaxQueryLen, " with query_start_loc (longer chunks: ",
              "tqkit_torch.decode, which takes them to decode_dense)");
  const int64_t num_seqs = qsl.size(0) - 1, rows = query.size(0);
  TORCH_CHECK(rows >= num_seqs && rows <= num_seqs * max_query_len, "tqkit.", op, ": query has ", rows, " rows, but ",
              num_seqs, " sequences of 1 … max_query_len ", max_query_len, " queries hold ", num_seqs, " … ",
              num_seqs * max_query_len);
  return {num_seqs, max_query_len, query.size(1), query.size(2)};
}

void decode(Tensor& out, const Tensor& query, const Tensor& kv_cache, const Tensor& block_table,
            const Tensor& seq_lens, Tensor& workspace, const std::string& format, double scale, int64_t max_seq_len,
            int64_t num_splits, const std::optional<Tensor>& query_start_loc, int64_t max_query_len) {
  const char* op = "decode";
  const bool varlen = query_start_loc.has_value();
  const DecodeShape s =
      varlen ? varlen_shape(query, *query_start_loc, kv_cache, max_query_len, op) : decode_shape(query, op);
  const Formats& f = formats_for(format, s.head_dim, op);
  const tq::cuda::PagedCache c = cache_view(kv_cache, f, op);
  const tq::cuda::Dtype16 dtype = act_dtype(query, op, "query");
  check_cuda(query, op, "query", query.scalar_type(), kv_cache);
  check_cuda(out, op, "out", query.scalar_type(), kv_cache);  // the query's type
  check_cuda(workspace, op, "workspace", at::kByte, kv_cache);
  TORCH_CHECK(out.sizes() == query.sizes(), "tqkit.decode: out ", out.sizes(), " must match query ", query.sizes());
  TORCH_CHECK(query.stride(-1) == 1 && out.stride(-1) == 1, "tqkit.decode: query and out need a contiguous last dim");
  TORCH_CHECK(workspace.is_contiguous(), "tqkit.decode: workspace must be contiguous");
  TORCH_CHECK(max_seq_len >= s.q_len, "tqkit.decode: max_seq_len ", max_seq_len, " must be >= q_len ", s.q_len);
  TORCH_CHECK(num_splits >= 0, "tqkit.decode: num_splits ", num_splits, " must be >= 0 (0: automatic)");
  TORCH_CHECK(std::isfinite(scale) && scale != 0.0, "tqkit.decode: scale ", scale, " must be finite and non-zero");
  const tq::cuda::BlockTable b = table_view(block_table, seq_lens, kv_cache, op);
  TORCH_CHECK(b.batch == s.batch, "tqkit.decode: query has ", s.batch, " sequences, block_table ", b.batch);
  TORCH_CHECK(int64_t(b.stride) * c.block_size >= max_seq_len, "tqkit.decode: block_table holds ", b.stride,
              " blocks of ", c.block_size, " per sequence, fewer than max_seq_len ", max_seq_len, " tokens");
  TORCH_CHECK(s.batch >= 1 && s.q_len >= 1 && s.heads >= 1 && c.n_kv_heads >= 1 && max_seq_len >= 1,
              "tqkit.decode: ", kCountsMsg);
  const c10::cuda::CUDAGuard guard(kv_cache.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int qd = query.dim();
  tq::cuda::DecodeParams p = decode_params(s, b, scale, max_seq_len, num_splits, dtype);
  p.q_stride_batch = query.stride(0);
  p.q_stride_head = query.stride(qd - 2);
  p.o_stride_batch = out.stride(0);
  p.o_stride_head = out.stride(qd - 2);
  p.query = query.data_ptr();  // (the long-chunk loop below moves both to query position j)
  p.out = out.data_ptr();
  const bool fused = fused_multi_query(s.q_len);
  if (fused && varlen) {  // one launch; query j of sequence i at row query_start_loc[i] + j
    set_varlen(p, query_start_loc->data_ptr<int32_t>(), query.size(0), query.stride(0), out.stride(0));
  } else if (fused) {  // one launch for the chunk
    p.q_stride_token = query.stride(1);
    p.o_stride_token = out.stride(1);
  } else if (varlen) {  // max_query_len 1: one query per sequence, row i
    TORCH_CHECK(query.size(0) == s.batch, "tqkit.decode: with max_query_len 1 each of the ", s.batch,
                " sequences has one query, but query has ", query.size(0), " rows");
  }
  // One plan per call, for the workspace check and every launch: the plan depends on the shapes
  // alone (not on the strides or pointers), so it is the plan decode_workspace_bytes sizes. (plan_decode
  // refuses what decode_can_implement refuses, with its message: "tqkit.decode: <why>" through guarded.)
  tq::cuda::DecodePlan plan;
  guarded(op, [&] { plan = tq::cuda::plan_decode(f.gpu, c, p); });
  const int64_t need = workspace_need(plan, s.batch, s.q_len);
  TORCH_CHECK(workspace.numel() >= need, "tqkit.decode: workspace has ", workspace.numel(), " bytes, this call needs ",
              need, " (tqkit_torch.decode_workspace_bytes)");
  if (fused) {
    guarded(op, [&] { tq::cuda::paged_decode(f.gpu, c, p, plan, workspace.data_ptr(), stream); });
    return;
  }
  const int64_t plan_bytes =
      s.q_len > 1 ? need - s.batch * int64_t(sizeof(int32_t)) : need;  // the lens follow the aligned plan part
  Tensor lens = s.q_len > 1 ? workspace.narrow(0, plan_bytes, s.batch * 4).view(at::kInt) : Tensor();
  guarded(op, [&] {
    for (int64_t j = 0; j < s.q_len; ++j) {
      const int64_t behind = s.q_len - 1 - j;  // later queries of the chunk this one must not see
      // (2-byte elements, fp16 or bf16)
      p.query = static_cast<const int16_t*>(query.data_ptr()) + j * (qd == 4 ? query.stride(1) : 0);
      p.out = static_cast<int16_t*>(out.data_ptr()) + j * (qd == 4 ? out.stride(1) : 0);
      if (behind > 0) {
        at::sub_out(lens, seq_lens, behind);
        p.blocks.seq_lens = lens.data_ptr<int32_t>();
      } else {
        p.blocks.seq_lens = b.seq_lens;
      }
      tq::cuda::paged_decode(f.gpu, c, p, plan, plan.workspace_bytes ? workspace.data_ptr() : nullptr, stream);
    }
  });
}

void dequant(Tensor& k_out, Tensor& v_out, const Tensor& kv_cache, const Tensor& block_table, const Tensor& seq_lens,
             const Tensor& out_offsets, const std::string& format, int64_t max_seq_len) {
  const char* op = "dequant";
  TORCH_CHECK(k_out.dim() == 3, "tqkit.dequant: k_out must be [rows, num_kv_heads, head_dim] (got ", k_out.sizes(),
              ")");
  const Formats& f = formats_for(format, k_out.size(2), op);
  const tq::cuda::PagedCache c = cache_view(kv_cache, f, op);
  const tq::cuda::Dtype16 dtype = act_dtype(k_out, op, "k_out");
  check_cuda(k_out, op, "k_out", k_out.scalar_type(), kv_cache);
  check_cuda(v_out, op, "v_out", k_out.scalar_type(), kv_cache);  // k_out's type
  check_cuda(out_offsets, op, "out_offsets", at::kInt, kv_cache);
  TORCH_CHECK(k_out.is_contiguous() && v_out.is_contiguous() && v_out.sizes() == k_out.sizes(),
              "tqkit.dequant: k_out and v_out must be contiguous and of one shape (got ", k_out.sizes(), ", ",
              v_out.sizes(), ")");
  TORCH_CHECK(k_out.size(1) == c.n_kv_heads, "tqkit.dequant: k_out has ", k_out.size(1), " kv heads, kv_cache ",
              c.n_kv_heads);
  const tq::cuda::BlockTable b = table_view(block_table, seq_lens, kv_cache, op);
  TORCH_CHECK(out_offsets.dim() == 1 && out_offsets.is_contiguous() && out_offsets.size(0) == b.batch,
              "tqkit.dequant: out_offsets must be a contiguous [num_seqs] = [", b.batch, "]");
  TORCH_CHECK(max_seq_len >= 1 && int64_t(b.stride) * c.block_size >= max_seq_len, "tqkit.dequant: max_seq_len ",
              max_seq_len, " must be >= 1 and fit block_table's ", b.stride, " blocks of ", c.block_size);
  if (b.batch == 0) return;
  const c10::cuda::CUDAGuard guard(kv_cache.device());
  tq::cuda::DequantParams p;
  p.cache = c;
  p.blocks = b;
  p.out_offsets = out_offsets.data_ptr<int32_t>();
  p.k_out = k_out.data_ptr();
  p.v_out = v_out.data_ptr();
  p.dtype = dtype;
  p.max_seq_len = int(max_seq_len);
  guarded(op, [&] {
    const std::string why = tq::cuda::dequant_can_implement(f.gpu, p);
    TORCH_CHECK(why.empty(), "tqkit.dequant: ", why);
    tq::cuda::dequant_paged(f.gpu, p, at::cuda::getCurrentCUDAStream());
  });
}

// CPU oracle: the slot bytes the CPU encoder writes for float(key), float(value).
Tensor encode_cpu(const Tensor& key, const Tensor& value, const std::string& format) {
  TORCH_CHECK(key.device().is_cpu() && value.device().is_cpu(), "tqkit.encode_cpu: key and value must be CPU tensors");
  TORCH_CHECK(key.dim() == 3 && value.sizes() == key.sizes(),
              "tqkit.encode_cpu: key and value must be [num_tokens, num_kv_heads, head_dim] of one shape");
  const Formats& f = formats_for(format, key.size(2), "encode_cpu");
  const Tensor k = key.to(at::kFloat).contiguous(), v = value.to(at::kFloat).contiguous();
  Tensor out = at::empty({key.size(0), key.size(1), int64_t(f.cpu.slot_bytes())}, at::kByte);
  guarded("encode_cpu", [&] {
    f.cpu.encode_slots(k.data_ptr<float>(), v.data_ptr<float>(), key.size(0) * key.size(1), out.data_ptr<uint8_t>());
  });
  return out;
}

std::tuple<Tensor, Tensor> decode_cpu(const Tensor& slots, const std::string& format, int64_t head_dim) {
  const Formats& f = formats_for(format, head_dim, "decode_cpu");
  TORCH_CHECK(slots.device().is_cpu() && slots.scalar_type() == at::kByte && slots.is_contiguous() &&
                  slots.size(-1) == int64_t(f.cpu.slot_bytes()),
              "tqkit.decode_cpu: slots must be a contiguous CPU uint8 tensor whose last dim is ", f.cpu.slot_bytes());
  const int64_t n = slots.numel() / int64_t(f.cpu.slot_bytes());
  std::vector<int64_t> shape(slots.sizes().begin(), slots.sizes().end());
  shape.back() = head_dim;
  Tensor k = at::empty(shape, at::kFloat), v = at::empty(shape, at::kFloat);
  guarded("decode_cpu", [&] { f.cpu.decode_slots(slots.data_ptr<uint8_t>(), n, k.data_ptr<float>(), v.data_ptr<float>()); });
  return {k, v};
}

}  // namespace

TORCH_LIBRARY(tqkit, m) {
  m.def("slot_bytes(str format, int head_dim) -> int", &slot_bytes);
  m.def(
      "decode_workspace_bytes(str format, int num_seqs, int q_len, int num_heads, int num_kv_heads, int head_dim, "
      "int block_size, int max_seq_len, int num_splits, bool bf16=False) -> int",
      &decode_workspace_bytes);
  m.def("store(Tensor key, Tensor value, Tensor(a!) kv_cache, Tensor slot_mapping, str format) -> ()");
  m.def(
      "decode(Tensor(a!) out, Tensor query, Tensor kv_cache, Tensor block_table, Tensor seq_lens, "
      "Tensor(b!) workspace, str format, float scale, int max_seq_len, int num_splits, "
      "Tensor? query_start_loc=None, int max_query_len=0) -> ()");
  m.def(
      "dequant(Tensor(a!) k_out, Tensor(b!) v_out, Tensor kv_cache, Tensor block_table, Tensor seq_lens, "
      "Tensor out_offsets, str format, int max_seq_len) -> ()");
  m.def("encode_cpu(Tensor key, Tensor value, str format) -> Tensor");
  m.def("decode_cpu(Tensor slots, str format, int head_dim) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(tqkit, CUDA, m) {
  m.impl("store", &store);
  m.impl("decode", &decode);
  m.impl("dequant", &dequant);
}

// The GPU ops also answer CPU tensors, with the error that names the argument
// (rather than the dispatcher's "no CPU kernel").
TORCH_LIBRARY_IMPL(tqkit, CPU, m) {
  m.impl("store", &store);
  m.impl("decode", &decode);
  m.impl("dequant", &dequant);
  m.impl("encode_cpu", &encode_cpu);
  m.impl("decode_cpu", &decode_cpu);
}

#ifdef TORCH_EXTENSION_NAME
// Built as a Python extension module (python/setup.py): an empty module whose
// import runs the registrations above.
#include <torch/extension.h>
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.doc() = "tqkit CUDA operators: see torch.ops.tqkit"; }
#endif

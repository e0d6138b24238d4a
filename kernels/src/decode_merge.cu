// Stage 2 of the split-KV decode (quantized and FP16): the log-sum-exp merge of each sequence's
// partial outputs into the output rows (launch_decode_merge, decode_common.cuh).
#include <algorithm>

#include "decode_cfg.cuh"

namespace tq::cuda {

namespace {

// ---- stage 2: one CTA per (query head, sequence); thread (x, y): dims 2x, 2x + 1 of parts
// y, y + P, y + 2P, … (P = blockDim.y) of the sequence's parts (its work items' warps:
// dev::seq_items_of, or DecodeArgs::seq_items; part_warps parts each), the P partial sums then added in shared
// memory ----
// The parts' weights 2^(lse − max) are computed once into shared memory, then each
// thread's loads of its parts are independent, so they are in flight together (a loop
// reading lse and o part after part measured ~6 µs at 32K, 1.9% of the 4-bit decode). One
// thread per dim pair walking every part was most of a B = 1 decode with hundreds of parts
// (SmolLM2 shape, 260 parts: 0.038 ms, 0.013 with the parts split). Shared memory holds a.parts
// weights (the plan's bound); more parts (seq_lens longer than the plan's max_seq_len) take
// several passes.
// Every part was written by stage 1 (empty ones: o = 0, lse = −inf, weight 0).
// At most kMergeThreads (512) threads, so ptxas may use up to 128 registers: it uses 122, no spill.
// (Without launch bounds it used 96, too many for the 1024-thread CTAs some shapes asked for: 'too
// many resources requested for launch'; bounded to 1024 threads, it was held to 64 and spilled 156
// bytes.)
constexpr int kMergeThreads = 512;
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(DecodeArgs a, int head_dim, int tile, int balance,
                                                              MultiQuery mq, UserRows user) {
  extern __shared__ float wgt[];  // [a.parts] weights, then P partial sums [P][head_dim + 1] (den last)
  __shared__ float wmax[32];
  const int b = blockIdx.y, h = blockIdx.x, x = threadIdx.x, y = threadIdx.y, P = blockDim.y;
  // a column past sequence b's queries (mq.q_start): stage 1 skipped it, and its row is never read
  if (mq.q_start && h % (mq.q_len * mq.group) / mq.group >= dev::query_count(mq.q_start, b, mq.q_len)) return;
  const int tid = y * blockDim.x + x, nthreads = blockDim.x * P, nwarps = (nthreads + 31) >> 5;
  // sequence b's work items, from seq_lens (an input of stage 1, not its output) by the dealing
  // stage 1 used, before the wait: a CTA that starts on an SM stage 1 has left computes them
  // while the last stage-1 CTAs still run (read from stage 1's writes after the wait, they were
  // one more L2 round trip on the decode's tail). tile 0 (our FP16 decode, whose
  // stage 1 does not release the merge early): stage 1 wrote them.
  // (a multi-query decode with q_start: the dealing of the launch that computed row h's column)
  const dev::QueryCut cut = mq.q_start ? mq.cut(mq.launch_col0(h % (mq.q_len * mq.group))) : dev::QueryCut{};
  int2 si = tile > 0 ? dev::seq_items_of(a.seq_lens, a.batch, a.items, tile, balance, b, cut) : make_int2(b, 1);
  asm volatile("griddepcontrol.wait;" ::: "memory");  // stage 1 complete, its writes visible
  if (tile == 0 && a.items != a.batch) si = a.seq_items[b];
  const int n = si.y * a.part_warps;
  const int64_t row0 = (int64_t(h) * a.items + si.x) * a.part_warps;
  const int d = 2 * x;
  // U parts' loads are issued before any of them is used: from a plain unrolled loop ptxas
  // loads every part into one register, one load in flight per thread (a batch-1 Gemma 3
  // merge of 512 parts takes 2.4× as long so, under Nsight Compute). The first U
  // (parts y, y + P, …) go out here, with the lse loads: they need no weight, so the max, the
  // weights and these loads take one L2 round trip instead of two. (U = 16: the 8–16 parts of a
  // B 32 decode at 4 splits, 10 at 32K, in that one round trip; U = 8 left a second one.)
  constexpr int U = 16;
  const int64_t step = int64_t(P) * head_dim;
  float2 first[U];
  {
    const int m = min(a.parts, n);
    const float* p = a.o_part + (row0 + y) * head_dim + d;
#pragma unroll
    for (int u = 0; u < U; ++u)
      first[u] = y + u * P < m ? *reinterpret_cast<const float2*>(p + u * step) : make_float2(0.f, 0.f);
  }
  float mx = -INFINITY, lse_own = -INFINITY;  // lse_own: part tid's (the weights' first pass)
  for (int i = tid; i < n; i += nthreads) {
    const float l = a.lse_part[row0 + i];
    if (i == tid) lse_own = l;
    mx = fmaxf(mx, l);
  }
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, o));
  if ((tid & 31) == 0) wmax[tid >> 5] = mx;
  __syncthreads();
  for (int w = 0; w < nwarps; ++w) mx = fmaxf(mx, wmax[w]);
  float den = 0.f, n0 = 0.f, n1 = 0.f;
  // parts [base, base + a.parts) per pass: one pass unless seq_lens exceed the plan's max_seq_len
  for (int base = 0; base < n; base += a.parts) {
    const int m = min(a.parts, n - base);
    for (int i = tid; i < m; i += nthreads)
      wgt[i] = mx == -INFINITY ? 0.f : exp2f((base == 0 && i == tid ? lse_own : a.lse_part[row0 + base + i]) - mx);
    __syncthreads();
    const float* op = a.o_part + (row0 + base) * head_dim + d;
    const float* p = op + int64_t(y) * head_dim;
    for (int i0 = y; i0 < m; i0 += U * P, p += U * step) {
      float2 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        v[u] = base == 0 && i0 == y ? first[u]
               : i0 + u * P < m     ? *reinterpret_cast<const float2*>(p + u * step)
                                    : make_float2(0.f, 0.f);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = i0 + u * P;
        const float w = i < m ? wgt[i] : 0.f;
        n0 += w > 0.f ? w * v[u].x : 0.f;
        n1 += w > 0.f ? w * v[u].y : 0.f;
        den += w;
      }
    }
    __syncthreads();
  }
  if (P > 1) {
    float* red = wgt + a.parts;  // [P][head_dim + 1]
    red[y * (head_dim + 1) + d] = n0;
    red[y * (head_dim + 1) + d + 1] = n1;
    if (x == 0) red[y * (head_dim + 1) + head_dim] = den;
    __syncthreads();
    if (y > 0) return;
    for (int k = 1; k < P; ++k) {
      n0 += red[k * (head_dim + 1) + d];
      n1 += red[k * (head_dim + 1) + d + 1];
      den += red[k * (head_dim + 1) + head_dim];
    }
  }
  // row h of sequence b: virtual head h = (kv head, query j, head g of the group) of a multi-query decode's
  // caller rows (user.out: query j of sequence b, head kvh·G + g), else a.out's row
  int64_t at = int64_t(b) * a.o_sb + int64_t(h) * a.o_sh;
  __half* out = a.out;  // (fp16, or bf16 bits: 2-byte elements either way)
  if (user.out) {
    const int cols = mq.q_len * mq.group, c = h % cols;
    at = dev::caller_row(mq.q_start, user.rows, b, c / mq.group, int64_t(h / cols) * mq.group + c % mq.group, user.sb,
                         user.st, user.sh);
    if (at < 0) return;
    out = static_cast<__half*>(user.out);
  }
  *reinterpret_cast<uint32_t*>(out + at + d) = den > 0.f ? dev::act_pack2(n0 / den, n1 / den, a.bf16 != 0) : 0u;
}

}  // namespace

void launch_decode_merge(const DecodeArgs& a, int batch, int head_dim, int tile, int balance, const MultiQuery& mq,
                         cudaStream_t stream, const UserRows& user) {
  // P = blockDim.y threads per dim pair split the parts, ≥ 8 parts each, ≤ kMergeThreads threads (the
  // common 4–8 parts: P = 1, one thread per pair). P follows an average sequence's parts, not
  // a.parts (the bound for the longest): sized for that bound, every (sequence, head) CTA of
  // a B = 32 merge took 768–1024 threads and the merge ran in several waves.
  const int avg = std::max(1, a.items * a.part_warps / batch);
  const int pairs = head_dim / 2, P = std::max(1, std::min(kMergeThreads / pairs, avg / 8));
  // a programmatic dependent of stage 1 (which signals after its main loop; the FP16
  // kernel does not signal, so there the merge launches when stage 1 exits)
  launch_programmatic(merge_kernel, dim3(unsigned(a.n_kv_heads * a.group_stride), unsigned(batch)),  // every query head
                      dim3(unsigned(pairs), unsigned(P)),
                      (size_t(a.parts) + size_t(P) * size_t(head_dim + 1)) * sizeof(float), stream, true, a, head_dim,
                      tile, balance, mq, user);
}

}  // namespace tq::cuda

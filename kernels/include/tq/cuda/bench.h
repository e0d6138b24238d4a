// Timing harness behind tq-bench (GPU side): builds realistic paged caches
// with the store kernel, times the decode/store kernels and the FP16 baseline
// with CUDA events (warm-up, median), and measures the device-copy bandwidth
// that the results are expressed against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tq/cuda/decode.h"
#include "tq/cuda/dequant.h"

namespace tq {
struct KvFormat;
}

namespace tq::cuda {

struct BenchShape {
  int batch = 32, n_q_heads = 32, n_kv_heads = 8, head_dim = 128, ctx = 4096, block_size = 16;
  int num_splits = 0;  // 0 = auto
  int column_tiles = 0;  // DecodeParams::column_tiles (0 = the planner's choice)
  bool even_dealing = false;  // DecodeParams::even_dealing
  // The quantized paths' activations: store's keys and values, the decode's queries and outputs
  // (our FP16 decode, SDPA and the dequant keep theirs)
  Dtype16 dtype = Dtype16::f16;
  // Pages of each sequence: shuffled, a random permutation of all cache blocks (as
  // the tables of a long-running server look); sequential, consecutive blocks;
  // resident (diagnostic), every table entry in the first kResidentBlocks blocks, so
  // the cache reads hit L2 and the time shows the kernel's compute floor (not a
  // realistic workload; the reported GB/s then exceed HBM's).
  enum class Pages { shuffled, sequential, resident };
  Pages pages = Pages::shuffled;
  static constexpr int kResidentBlocks = 128;
  // Quantized cache in CacheLayout::planes instead of the vLLM slot layout
  // (bench_decode / bench_store; formats with planes_support only).
  bool planes = false;
  // Tokens of each sequence (a ragged batch: `batch` entries, 1 ≤ len ≤ ctx, ctx their
  // maximum); empty: every sequence is ctx tokens long.
  std::vector<int> seq_lens;
  int len(int b) const { return seq_lens.empty() ? ctx : seq_lens[size_t(b)]; }
  // bench_multi_query: each sequence's query count (`batch` entries, 1 … q_len, q_len their maximum) for a
  // further fused decode with those counts (DecodeParams::q_start); empty: none.
  std::vector<int> q_counts;
  int64_t total_tokens() const {
    int64_t n = 0;
    for (int b = 0; b < batch; ++b) n += len(b);
    return n;
  }
};

struct BenchOptions {
  int warmup = 5;
  int reps = 30;  // timed launches; the median is reported
};

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int reps = 0;
};

// cudaMemcpyAsync device→device of `bytes` (≥ 2 GB recommended); GB/s counts
// bytes read + written.
struct CopyBench {
  Timing t;
  size_t bytes = 0;
  double gbps = 0;
};
CopyBench bench_copy(size_t bytes, const BenchOptions& o);

struct DecodeBench {
  Timing t;
  size_t kv_bytes = 0;  // KV bytes the kernel must read: every slot of every sequence once (Σ seq_lens)
  double gbps = 0;      // kv_bytes / median time
  int copies = 0;       // cache copies rotated between launches (so L2 does not flatter)
  DecodePlan plan;
};
DecodeBench bench_decode(const KvFormat& f, const BenchShape& s, const BenchOptions& o);
DecodeBench bench_decode_f16(const BenchShape& s, const BenchOptions& o);

// Multi-query decode (DecodeParams::q_len) timed in one call against the same cache copies: the
// fused q_len decode, one single-query decode, and q_len single-query decodes in a row (what an
// engine without a multi-query kernel runs per chunk); then our FP16 decode of the same q_len.
struct MultiQueryBench {
  int q_len = 0;
  Timing fused, single, separate;
  Timing varlen;     // BenchShape::q_counts: the fused decode with those counts (reps 0: not timed)
  // BenchShape::q_counts: one single-query decode where every query is a row of its own (sequence b's query j
  // over its first len − count + 1 + j positions, at least 1): what an engine without a multi-query kernel runs for
  // a mixed batch (vLLM's decode path), in one launch (reps 0: not timed)
  Timing rows;
  Timing f16;        // our FP16 multi-query decode, same q_len, over an fp16 cache of the shape
  DecodePlan f16_plan;
  size_t kv_bytes = 0;  // as DecodeBench: every slot once
  double gbps = 0;      // kv_bytes / the fused median
  int copies = 0;
  DecodePlan plan;  // the fused decode's
};
MultiQueryBench bench_multi_query(const KvFormat& f, const BenchShape& s, int q_len, const BenchOptions& o);

struct StoreBench {
  Timing t;
  int64_t tokens = 0;
  size_t bytes = 0;  // fp16 K+V read + slots written + slot_mapping read
  double gbps = 0, tokens_per_s = 0;
};
StoreBench bench_store(const KvFormat& f, const BenchShape& s, int64_t tokens, const BenchOptions& o);

// Paged dequant of the whole shape (every token of every sequence, vLLM layout) to fp16 or bf16.
struct DequantBench {
  Timing t;
  size_t bytes = 0;  // slots read + K and V written (2 bytes per value each)
  double gbps = 0;   // bytes / median time
  int copies = 0;    // cache copies rotated between launches
};
DequantBench bench_dequant(const KvFormat& f, const BenchShape& s, DequantDtype dtype, const BenchOptions& o);

// Gaussian-ish fp16 or bf16 test data on the device (mean + sigma · N(0,1) approx.).
void fill_random_16(void* dst, size_t n, uint64_t seed, float mean, float sigma, Dtype16 dtype = Dtype16::f16,
                    cudaStream_t stream = nullptr);

}  // namespace tq::cuda

// The decode tests' fixture: a paged cache filled through the store kernel (or fp16 for our FP16
// baseline), its CPU-decoded contents, a decode launched over it and every output row checked
// against a float64 attention over those contents (within kTol relative error per query row).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu_util.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/kernel_format.h"
#include "tq/rng.h"

namespace tqtest {

using tq::cuda::DecodePlan;


constexpr double kTol = 1e-3;

struct DecodeCase {
  std::string fmt;  // a KV format, or "f16" for the FP16 baseline kernel
  int d = 128, hq = 32, hkv = 8, bs = 16;
  std::vector<int> lens;
  int splits = 0;  // 0 = auto
  int tiles = 0;   // DecodeParams::column_tiles (0 = the planner's choice)
  bool even = false;  // DecodeParams::even_dealing
  double q_sigma = 2.0;
  // > 0: key t of a sequence of length n is scaled by 1 + key_ramp·t/n, so the largest
  // logit keeps growing along the sequence and the running maxima move again and again
  double key_ramp = 0.0;
  uint64_t seed = 1;
  bool planes = false;  // quantized cache in CacheLayout::planes
  int plan_max_len = 0;  // > 0: DecodeParams::max_seq_len (else the batch's longest sequence)
  // > 0: value rows (token-heads) ≡ 0 mod special_v are constant (0.5 … 2), ≡ 1 all zeros: a uniform value
  // scale that rounds to 0 in fp16 (vLLM presets), a zero value norm (turbo)
  int special_v = 0;
  // > 0: key rows ≡ 0 mod spike_k are one-hot (3 at dim row % d): after the rotation every coordinate
  // has the same magnitude, so a token's codes all fall in one or two magnitude classes (the case
  // where a per-code rounding of squares would add up instead of averaging out)
  int spike_k = 0;
  int sm_count = 0;  // > 0: the SM count the planner assumes (plan_decode*'s sm_count)
  // query tokens per sequence: query j attends to positions [0, len − q_len + j]; the queries and
  // outputs are [batch, q_len, hq, d] with a padded token stride (q_len > 1: strided rows)
  int q_len = 1;
  // non-empty: variable query counts (DecodeParams::q_start; q_len must be their largest): sequence b has
  // q_counts[b] queries, query j at row Σ_{b' < b} q_counts[b'] + j of the flattened [rows, hq, d] queries
  // and outputs (vLLM's query_start_loc layout), one poisoned row past the last that must stay so
  std::vector<int> q_counts;
  // bf16 keys and values (stored through the store kernel), queries and outputs; the output check allows
  // each element its bf16 rounding (≤ 2^-8 of it) on top of kTol
  bool bf16 = false;
  tq::cuda::Dtype16 dtype() const { return bf16 ? tq::cuda::Dtype16::bf16 : tq::cuda::Dtype16::f16; }
  tq::cuda::CacheLayout layout() const { return planes ? tq::cuda::CacheLayout::planes : tq::cuda::CacheLayout::vllm; }
};

// A filled paged cache (GPU) plus its CPU-dequantized contents.
struct Filled {
  Paging pg;
  std::vector<float> k, v;  // [total_tokens, hkv, d] in (sequence, position) order: what the cache decodes to
  std::vector<int64_t> first;  // first token row of each sequence in k/v
  std::unique_ptr<DevMem> cache, kc, vc, table, lens;
  int slot_bytes = 0;
};

// Fills c's paged cache: random keys and values (with c's special rows), stored by the store kernel
// (quantized formats) or written as fp16, and decoded back on the CPU.
Filled fill_cache(const DecodeCase& c, tq::Rng& rng);

// float64 attention of one query row over positions [0, len) of sequence b, kv head h.
std::vector<double> reference(const Filled& F, const DecodeCase& c, const float* q, int b, int h, int len,
                              double scale);

struct DecodeRun {
  tq::cuda::DecodeParams p;
  tq::cuda::DecodePlan plan;
  std::unique_ptr<DevMem> q, out, ws, q_start;
  std::vector<float> qf;
};

// Elements between consecutive query tokens of a sequence (q_len > 1: 8 elements of padding, so a
// kernel that assumed dense rows would read the wrong ones), and between sequences.
int64_t token_stride(const DecodeCase& c);
int64_t batch_stride(const DecodeCase& c);
// Query tokens of sequence b (c.q_len, or c.q_counts[b]) and the flattened row of its first (c.q_counts)
int query_count(const DecodeCase& c, int b);
int64_t query_start(const DecodeCase& c, int b);
std::vector<int32_t> query_starts(const DecodeCase& c);  // DecodeParams::q_start of c.q_counts (batch + 1 entries)
// Offset of query / output row (b, j, h).
size_t row_offset(const DecodeCase& c, int b, int j, int h);

// Random queries, the decode's parameters and its plan (with c's splits, tiles, dealing and SM count).
DecodeRun prepare(const DecodeCase& c, Filled& F, tq::Rng& rng);
void launch(const DecodeCase& c, Filled& F, DecodeRun& R, cudaStream_t stream = nullptr);

// Compares every output row with the float64 reference for the given lengths; returns the largest
// relative error. (q_len > 1: query token qt of sequence b sees its first len − n + qt + 1
// positions, n its query count; the padding between token rows must stay poisoned.)
double check_output(const DecodeCase& c, const Filled& F, const DecodeRun& R, const std::vector<int>& lens);

// fill_cache, prepare, launch over poisoned outputs and workspace, check_output; check_plan
// (optional): assertions on the plan before the launch.
double run_decode(const DecodeCase& c,
                  const std::function<void(const DecodePlan&, const Filled&)>& check_plan = nullptr);

// Every format the paged decode implements (the GPU codec table's decode rows), plus our FP16 baseline.
inline const std::vector<std::string> kDecodeFormats = [] {
  auto f = tq::cuda::gpu_formats(/*decode_only=*/true);
  f.push_back("f16");
  return f;
}();
inline const std::vector<int> kRagged = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4097};


}  // namespace tqtest

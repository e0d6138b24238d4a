// The GPU kernels checked on a real model's keys, values and queries (one layer of a
// tq-dump file) against independent CPU oracles:
//   store   — the cache bytes of every token-head == KvFormat::encode_slots of the
//             same fp16 inputs;
//   dequant — fp16 and bf16 K and V of every token == half / bf16 of
//             KvFormat::decode_slots, bit for bit;
//   decode  — P query positions t (causal: position t attends to tokens 0 … t) as one
//             ragged batch whose block tables all point at the same shuffled pages,
//             each (position, query head) within `tolerance` relative error
//             (‖out − ref‖ / ‖ref‖) of a float64 attention over the CPU-decoded cache
//             with the layer's attn_scale. The FP16 baseline decode (format "f16") the
//             same way over the fp16 K/V.
// A layer with a sliding window W checks only its first min(T, W) tokens, where its
// attention equals global causal attention (the decode has no window).
#pragma once

#include <cstdint>
#include <string>

namespace tq {
struct KvFormat;
struct KvDumpLayer;
}  // namespace tq

namespace tq::cuda {

struct DumpCheckOptions {
  int positions = 128;      // query positions decoded (evenly spread; the last token's included)
  int block_size = 16;      // cache page
  int splits = 0;           // DecodeParams::num_splits (0 = auto)
  uint64_t seed = 1;        // page shuffle
  double tolerance = 1e-3;  // decode: largest relative error allowed per (position, q head)
};

struct DumpCheck {
  std::string format;  // KvFormat::name, or "f16" (FP16 baseline decode only)
  int layer = 0;
  int64_t tokens = 0;  // tokens stored and checked
  int64_t window = 0;  // the layer's sliding window (0 = global)
  int positions = 0;   // query positions decoded
  // store: slots (token-heads) compared, slots whose bytes differ, the first (token, head, byte)
  int64_t slots = 0, store_mismatches = 0;
  int64_t bad_token = -1;
  int bad_head = -1, bad_byte = -1;
  // dequant: fp16 + bf16 K and V values compared, values that differ
  int64_t dequant_values = 0, dequant_mismatches = 0;
  // decode
  bool decoded = false;
  double decode_rel = 0;  // largest relative error over (position, q head)
  int worst_position = -1, worst_head = -1;
  int splits = 0, parts = 0;
  // why the kernels were not run (no store/dequant kernel for this format), or — with slots > 0,
  // after the store and dequant checks — why the decode was not (no decode kernel, a shape it
  // refuses); empty if everything ran
  std::string not_run;

  bool passed(double tolerance) const {
    return not_run.empty() && store_mismatches == 0 && dequant_mismatches == 0 && decoded && decode_rel <= tolerance;
  }
};

// format: the KV format, or null for the FP16 baseline decode. n_heads / n_kv_heads /
// head_dim: the dump's. Needs a CUDA device; throws tq::Error on CUDA errors and on
// inputs the layer cannot supply (shapes, NaN/Inf keys or values).
DumpCheck check_dump_layer(const KvFormat* format, const KvDumpLayer& layer, int n_heads, int n_kv_heads,
                           int head_dim, const DumpCheckOptions& o);

// No GPU needed: the approximation the quantized decode makes of the CPU decoder — its fp16
// LUT of the codebook centroids, half(α·c) with kernel_format's α, the α undone; for mse keys
// (values' codes are exact in the MMA) and for turbo keys and values — simulated in float64 on
// a layer: attention over the CPU-decoded cache with those centroids against attention over
// the exact decode, with check_dump_layer's fp16 inputs and positions (decode_rel,
// worst_position, worst_head; decoded = true). Nothing else the kernel rounds is simulated (its
// fp16 output, the query's hi/lo split, turbo4-qjl's sign term). Other formats (fp8 keys) come
// back with not_run set; bad layers throw as check_dump_layer does.
DumpCheck simulate_lut_layer(const KvFormat& format, const KvDumpLayer& layer, int n_heads, int n_kv_heads,
                             int head_dim, const DumpCheckOptions& o);

}  // namespace tq::cuda

// tq-bench's report: the JSON object (to_json) and the table cells of each
// result — the known models' shapes, and the GPU timings (tq/cuda/bench.h) and
// kernel checks (tq/cuda/verify.h) expressed against what tq-bench measures
// them by (the device copy's bandwidth, the FP16 baseline decode, the
// tolerance). Key names and order are tq-bench --json's; experiments/ reads them.
#pragma once

#include <string>
#include <vector>

#include "tq/json.h"
#include "tq/model_shapes.h"
#ifdef TQ_HAVE_CUDA
#include "tq/cuda/bench.h"
#include "tq/cuda/verify.h"
#endif

namespace tq {

// {name, source, q_heads, kv_heads, head_dim, layers, sliding_layers, window}
void to_json(Json& j, const ModelShape& m);

}  // namespace tq

#ifdef TQ_HAVE_CUDA
namespace tq::cuda {

// {median_ms, min_ms, max_ms, reps}
void to_json(Json& j, const Timing& t);

}  // namespace tq::cuda

namespace tq::bench {

using Cells = std::vector<std::string>;

// The FP16 baseline decode's table row (it has no store or dequant).
Cells f16_baseline_cells(const cuda::DecodeBench& f16, const cuda::CopyBench& copy, int head_dim, bool dequant);

// A decode: its timing and plan, against the device copy and the FP16 baseline decode.
struct DecodeReport {
  const cuda::DecodeBench& d;
  const cuda::DecodeBench& f16;
  const cuda::CopyBench& copy;
};
void to_json(Json& j, const DecodeReport& r);
Cells table_cells(const DecodeReport& r);  // kv_MB, decode_ms, GB/s, %copy, vs_f16, splits

struct StoreReport {
  const cuda::StoreBench& st;
  const cuda::CopyBench& copy;
};
void to_json(Json& j, const StoreReport& r);
Cells table_cells(const StoreReport& r);  // store_Mtok/s, store_GB/s, store_%copy

struct DequantReport {
  const cuda::DequantBench& dq;
  const std::string& dtype;  // f16 or bf16
  const cuda::CopyBench& copy;
};
void to_json(Json& j, const DequantReport& r);
Cells table_cells(const DequantReport& r);  // dequant_ms, dequant_GB/s, dequant_%copy

// --q-len: the fused multi-query decode against one single-query decode and q_len in a row.
struct MultiQueryReport {
  const cuda::MultiQueryBench& m;
  const cuda::CopyBench& copy;
};
void to_json(Json& j, const MultiQueryReport& r);  // q_len … reps (the row's shape keys come first)
Cells table_cells(const MultiQueryReport& r);      // q_len … tiles (--q-counts: then varlen_ms, varlen/fused)

// --check-dump: one layer of one format (name "" = the FP16 baseline decode). A format whose
// store and dequant ran but whose decode did not (no kernel, a shape it refuses) is partial:
// its store and dequant results still count.
struct DumpCheckReport {
  const cuda::DumpCheck& c;
  const std::string& name;
  double tolerance;
  bool not_run() const { return !c.not_run.empty() && !partial(); }
  bool partial() const { return !c.not_run.empty() && c.slots > 0; }
  bool ok() const;
};
void to_json(Json& j, const DumpCheckReport& r);
Cells table_cells(const DumpCheckReport& r);  // layer … result

// --check-dump --simulate-lut: one layer of one format.
struct LutReport {
  const cuda::DumpCheck& c;
  const std::string& name;
  double tolerance;
  bool above() const { return c.not_run.empty() && c.decode_rel > tolerance; }
};
void to_json(Json& j, const LutReport& r);
Cells table_cells(const LutReport& r);  // layer … note

}  // namespace tq::bench
#endif

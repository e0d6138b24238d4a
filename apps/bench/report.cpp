#include "bench/report.h"

#include <fmt/format.h>

namespace tq {

void to_json(Json& j, const ModelShape& m) {
  j = Json{{"name", std::string(m.name)},
           {"source", std::string(m.source)},
           {"q_heads", m.q_heads},
           {"kv_heads", m.kv_heads},
           {"head_dim", m.head_dim},
           {"layers", m.layers},
           {"sliding_layers", m.sliding_layers},
           {"window", m.window}};
}

}  // namespace tq

#ifdef TQ_HAVE_CUDA
namespace tq::cuda {

void to_json(Json& j, const Timing& t) {
  j = Json{{"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"max_ms", t.max_ms}, {"reps", t.reps}};
}

}  // namespace tq::cuda

namespace tq::bench {

namespace {
double pct(double gbps, const cuda::CopyBench& copy) { return 100 * gbps / copy.gbps; }
}  // namespace

Cells f16_baseline_cells(const cuda::DecodeBench& f16, const cuda::CopyBench& copy, int head_dim, bool dequant) {
  Cells row = {"f16 (baseline)",
               std::to_string(4 * head_dim),
               fmt::format("{:.1f}", double(f16.kv_bytes) / 1e6),
               fmt::format("{:.4f}", f16.t.median_ms),
               fmt::format("{:.0f}", f16.gbps),
               fmt::format("{:.1f}", pct(f16.gbps, copy)),
               "1.00",
               std::to_string(f16.plan.num_splits),
               "-",
               "-",
               "-"};
  if (dequant) row.insert(row.end(), {"-", "-", "-"});
  return row;
}

void to_json(Json& j, const DecodeReport& r) {
  const cuda::DecodeBench& d = r.d;
  j = d.t;
  j["kv_bytes"] = d.kv_bytes;
  j["gbps"] = d.gbps;
  j["pct_copy"] = pct(d.gbps, r.copy);
  j["num_splits"] = d.plan.num_splits;
  j["items"] = d.plan.items;                  // CTAs per head group the batch's tokens are dealt out over
  j["balance_slots"] = d.plan.balance_slots;  // > 0: short last chunks on the CTA slots a wave leaves idle
  j["parts"] = d.plan.parts;
  j["warps_per_head"] = d.plan.warps_per_head;
  j["part_warps"] = d.plan.part_warps;  // parts per work item: 1 where the CTA merged its warps' parts itself
  j["heads_per_cta"] = d.plan.heads_per_cta;
  j["ring_heads"] = d.plan.ring_heads;  // > heads_per_cta: each CTA copies whole token rows (every kv head's slots)
  j["tensor_map"] = d.plan.tensor_map;  // 16-token page slices as tensor-map boxes (CTAs of some heads)
  // stage-1 launches (G > 8 query heads per kv head: ⌈G/8⌉, each reading the cache once, or 1 with
  // query_slices 2: both slices of 8 < G ≤ 16 in one CTA; kv_bytes and pct_copy count every slot once)
  j["query_passes"] = d.plan.query_passes;
  j["query_slices"] = d.plan.query_slices;
  j["column_tiles"] = d.plan.column_tiles;  // 8-column N-tiles per warp (2: 16 query columns per decode of a key)
  j["threads"] = d.plan.threads;
  j["ctas_per_sm"] = d.plan.ctas_per_sm;
  j["smem_bytes"] = d.plan.smem_bytes;
  j["cache_copies"] = d.copies;
  j["f16_median_ms"] = r.f16.t.median_ms;
  j["f16_gbps"] = r.f16.gbps;
  j["f16_num_splits"] = r.f16.plan.num_splits;
  j["f16_query_passes"] = r.f16.plan.query_passes;  // the FP16 decode's reads of the cache
  j["speedup_vs_f16"] = r.f16.t.median_ms / d.t.median_ms;
}

Cells table_cells(const DecodeReport& r) {
  return {fmt::format("{:.1f}", double(r.d.kv_bytes) / 1e6), fmt::format("{:.4f}", r.d.t.median_ms),
          fmt::format("{:.0f}", r.d.gbps),                   fmt::format("{:.1f}", pct(r.d.gbps, r.copy)),
          fmt::format("{:.2f}", r.f16.t.median_ms / r.d.t.median_ms), std::to_string(r.d.plan.num_splits)};
}

void to_json(Json& j, const StoreReport& r) {
  j = r.st.t;
  j["tokens"] = r.st.tokens;
  j["bytes"] = r.st.bytes;
  j["gbps"] = r.st.gbps;
  j["pct_copy"] = pct(r.st.gbps, r.copy);
  j["tokens_per_s"] = r.st.tokens_per_s;
}

Cells table_cells(const StoreReport& r) {
  return {fmt::format("{:.1f}", r.st.tokens_per_s / 1e6), fmt::format("{:.0f}", r.st.gbps),
          fmt::format("{:.1f}", pct(r.st.gbps, r.copy))};
}

void to_json(Json& j, const DequantReport& r) {
  j = r.dq.t;
  j["dtype"] = r.dtype;
  j["bytes"] = r.dq.bytes;
  j["gbps"] = r.dq.gbps;
  j["pct_copy"] = pct(r.dq.gbps, r.copy);
  j["cache_copies"] = r.dq.copies;
}

Cells table_cells(const DequantReport& r) {
  return {fmt::format("{:.4f}", r.dq.t.median_ms), fmt::format("{:.0f}", r.dq.gbps),
          fmt::format("{:.1f}", pct(r.dq.gbps, r.copy))};
}

void to_json(Json& j, const MultiQueryReport& r) {
  const cuda::MultiQueryBench& m = r.m;
  j = Json{{"q_len", m.q_len},
           {"fused_ms", m.fused.median_ms},
           {"single_ms", m.single.median_ms},
           {"separate_ms", m.separate.median_ms},
           {"fused_over_single", m.fused.median_ms / m.single.median_ms},
           {"separate_over_fused", m.separate.median_ms / m.fused.median_ms},
           {"f16_ms", m.f16.median_ms},  // our FP16 multi-query decode, same q_len
           {"speedup_vs_f16", m.f16.median_ms / m.fused.median_ms},
           {"f16_query_passes", m.f16_plan.query_passes},
           {"pct_copy", pct(m.gbps, r.copy)},
           {"query_passes", m.plan.query_passes},  // launches over the cache (16 or 8 columns each)
           {"column_tiles", m.plan.column_tiles},  // 8-column N-tiles per warp (2: 16 columns from each decode)
           {"num_splits", m.plan.num_splits},
           {"copy_gbps", r.copy.gbps},
           {"reps", m.fused.reps}};
  if (m.varlen.reps > 0) {  // --q-counts
    j["varlen_ms"] = m.varlen.median_ms;
    j["varlen_over_fused"] = m.varlen.median_ms / m.fused.median_ms;
    j["rows_ms"] = m.rows.median_ms;  // every query a single-query row of its own, one launch
    j["rows_over_varlen"] = m.rows.median_ms / m.varlen.median_ms;
  }
}

Cells table_cells(const MultiQueryReport& r) {
  const cuda::MultiQueryBench& m = r.m;
  Cells cells = {std::to_string(m.q_len),
          fmt::format("{:.4f}", m.fused.median_ms),
          fmt::format("{:.1f}", pct(m.gbps, r.copy)),
          fmt::format("{:.4f}", m.single.median_ms),
          fmt::format("{:.2f}", m.fused.median_ms / m.single.median_ms),
          fmt::format("{:.4f}", m.separate.median_ms),
          fmt::format("{:.2f}", m.separate.median_ms / m.fused.median_ms),
          fmt::format("{:.4f}", m.f16.median_ms),
          fmt::format("{:.2f}", m.f16.median_ms / m.fused.median_ms),
          std::to_string(m.plan.query_passes),
          std::to_string(m.plan.column_tiles)};
  if (m.varlen.reps > 0)  // --q-counts
    cells.insert(cells.end(), {fmt::format("{:.4f}", m.varlen.median_ms),
                               fmt::format("{:.2f}", m.varlen.median_ms / m.fused.median_ms),
                               fmt::format("{:.4f}", m.rows.median_ms),
                               fmt::format("{:.2f}", m.rows.median_ms / m.varlen.median_ms)});
  return cells;
}

bool DumpCheckReport::ok() const {
  return partial() ? c.store_mismatches == 0 && c.dequant_mismatches == 0 : c.passed(tolerance);
}

void to_json(Json& j, const DumpCheckReport& r) {
  const cuda::DumpCheck& c = r.c;
  j = Json{{"layer", c.layer},
           {"format", r.name.empty() ? "f16-baseline" : r.name},
           {"tokens", c.tokens},
           {"sliding_window", c.window}};
  if (r.not_run()) {
    j["result"] = "not run";
    j["why"] = c.not_run;
    return;
  }
  if (r.name.empty()) {
    j["store"] = "-";
  } else {
    j["slots"] = c.slots;
    j["store_mismatched_slots"] = c.store_mismatches;
    if (c.store_mismatches)
      j["first_mismatch"] = fmt::format("token {} head {} byte {}", c.bad_token, c.bad_head, c.bad_byte);
    j["dequant_values"] = c.dequant_values;
    j["dequant_mismatches"] = c.dequant_mismatches;
  }
  if (r.partial()) {
    j["decode"] = c.not_run;
  } else {
    j["positions"] = c.positions;
    j["decode_max_rel_err"] = c.decode_rel;
    j["worst_position"] = c.worst_position;
    j["worst_q_head"] = c.worst_head;
    j["num_splits"] = c.splits;
    j["parts"] = c.parts;
  }
  j["result"] = r.ok() ? "pass" : "FAIL";
}

Cells table_cells(const DumpCheckReport& r) {
  const cuda::DumpCheck& c = r.c;
  const std::string label = r.name.empty() ? "f16 (baseline decode)" : r.name;
  if (r.not_run())
    return {std::to_string(c.layer), label, std::to_string(c.tokens), "-", "-", "-", "-", "-", "-",
            "not run: " + c.not_run};
  const bool partial = r.partial(), base = r.name.empty();
  const std::string result = !r.ok() ? "FAIL" : partial ? "pass (store, dequant); not run: " + c.not_run : "pass";
  return {std::to_string(c.layer),
          label,
          std::to_string(c.tokens),
          partial ? "-" : std::to_string(c.positions),
          base ? "-" : fmt::format("{}/{}", c.store_mismatches, c.slots),
          base ? "-" : fmt::format("{}/{}", c.dequant_mismatches, c.dequant_values),
          partial ? "-" : fmt::format("{:.2e}", c.decode_rel),
          partial ? "-" : fmt::format("({},{})", c.worst_position, c.worst_head),
          partial ? "-" : std::to_string(c.splits),
          result};
}

void to_json(Json& j, const LutReport& r) {
  const cuda::DumpCheck& c = r.c;
  j = Json{{"layer", c.layer}, {"format", r.name}, {"tokens", c.tokens}, {"sliding_window", c.window}};
  if (!c.not_run.empty()) {
    j["result"] = "not simulated";
    j["why"] = c.not_run;
    return;
  }
  j["result"] = "simulated";
  j["positions"] = c.positions;
  j["lut_max_rel_err"] = c.decode_rel;
  j["worst_position"] = c.worst_position;
  j["worst_q_head"] = c.worst_head;
}

Cells table_cells(const LutReport& r) {
  const cuda::DumpCheck& c = r.c;
  if (!c.not_run.empty())
    return {std::to_string(c.layer), r.name, std::to_string(c.tokens), "-", "-", "-", "not simulated: " + c.not_run};
  return {std::to_string(c.layer),
          r.name,
          std::to_string(c.tokens),
          std::to_string(c.positions),
          fmt::format("{:.2e}", c.decode_rel),
          fmt::format("({},{})", c.worst_position, c.worst_head),
          r.above() ? fmt::format("above the decode tolerance {:.0e}", r.tolerance) : ""};
}

}  // namespace tq::bench
#endif

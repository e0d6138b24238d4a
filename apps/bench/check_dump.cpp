#include "bench/check_dump.h"

#include <cstdio>

#include <fmt/format.h>

#include "bench/report.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/json.h"
#include "tq/kv_dump.h"
#include "tq/layer_list.h"
#include "tq/table.h"
#ifdef TQ_HAVE_CUDA
#include "tq/cuda/device.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/verify.h"
#endif

namespace tq::bench {
namespace {

#if defined(TQ_HAVE_HDF5) && defined(TQ_HAVE_CUDA)
// --check-dump's default formats: every registered one the decode has a kernel for at head_dim.
std::vector<std::string> gpu_decode_formats(int head_dim) {
  std::vector<std::string> names;
  for (const auto& e : tq::registered_formats()) {
    try {
      if (tq::cuda::decode_support(tq::cuda::kernel_format(tq::make_format(e.name, head_dim))).empty())
        names.push_back(e.name);
    } catch (const tq::Error&) {
    }
  }
  return names;
}

// --check-dump --simulate-lut: no GPU; the decode's fp16 LUT of codebook centroids simulated
// in float64 (tq::cuda::simulate_lut_layer). Informational: exit 0 whatever the errors.
int run_simulate_lut(const CheckDumpArgs& a, const tq::KvDump& dump, const std::vector<int>& layers,
                     std::vector<std::string> names) {
  const tq::KvDumpHeader& h = dump.header();
  if (!a.formats_given) names = gpu_decode_formats(h.head_dim);
  tq::cuda::DumpCheckOptions o;
  o.positions = a.positions;
  tq::Json rows = tq::Json::array();
  tq::Table table({"layer", "format", "tokens", "positions", "lut_max_rel", "at(pos,head)", "note"});
  int over = 0;
  for (const int l : layers) {
    const tq::KvDumpLayer L = dump.read_layer(l);
    for (const auto& name : names) {
      const tq::KvFormat f = tq::make_format(name, h.head_dim);
      const auto c = tq::cuda::simulate_lut_layer(f, L, h.n_heads, h.n_kv_heads, h.head_dim, o);
      const tq::bench::LutReport r{c, name, o.tolerance};
      over += r.above();
      rows.push_back(r);
      table.add(table_cells(r));
    }
  }
  if (a.json) {
    std::printf("%s\n", tq::dump_json(rows, 2).c_str());
  } else {
    std::printf("tq-bench --check-dump %s --simulate-lut (no GPU; a float64 simulation, not a check of the kernels): "
                "%s (%s), %lld tokens, %d q heads / %d kv heads, head_dim %d\n",
                a.file.c_str(), h.model.c_str(), h.arch.c_str(), static_cast<long long>(h.n_tokens), h.n_heads,
                h.n_kv_heads, h.head_dim);
    std::printf("the GPU decode's fp16 LUT of the codebook centroids (half(α·c), α undone; mse keys, turbo keys and "
                "values) against the exact centroids: "
                "float64 attention\nover each CPU-decoded cache, max ‖out − ref‖ / ‖ref‖ per (position, q head) over "
                "%d positions per layer (as --check-dump)\n%s%d of %zu above %.0e\n",
                a.positions, table.text().c_str(), over, rows.size(), o.tolerance);
  }
  return 0;
}
#endif

}  // namespace

int run_check_dump(const CheckDumpArgs& a) {
#ifndef TQ_HAVE_HDF5
  (void)a;
  throw tq::Error("this tq-bench was built without HDF5: --check-dump cannot read tq-dump files");
#else
  const tq::KvDump dump = tq::KvDump::open(a.file);
  const tq::KvDumpHeader& h = dump.header();
  std::vector<int> layers;
  for (const int l : tq::parse_layer_list(a.layers, h.n_layers)) {
    if (dump.has_layer(l)) layers.push_back(l);
    else if (a.layers != "all") throw tq::Error(fmt::format("--layers: layer {} is not in {}", l, a.file));
  }
  TQ_CHECK(!layers.empty(), "--layers '{}': none of these layers is in {}", a.layers, a.file);
  TQ_CHECK(a.positions >= 1, "--positions {} must be ≥ 1", a.positions);
  TQ_CHECK(a.block_size == 16 || a.block_size == 32 || a.block_size == 64 || a.block_size == 128,
           "--block-size {}: the kernels take 16, 32, 64 or 128", a.block_size);
  TQ_CHECK(a.splits >= 0, "--splits {} must be ≥ 0", a.splits);
  std::vector<std::string> names;
  if (a.formats_given) {
    names = tq::expand_format_names(a.formats);
    for (const auto& n : names) (void)tq::make_format(n, h.head_dim);  // unknown names and head_dims: bad input
  }
#ifdef TQ_HAVE_CUDA
  if (a.simulate_lut) return run_simulate_lut(a, dump, layers, names);
  if (tq::cuda::device_count() == 0)
    throw tq::Error("no CUDA device found: --check-dump runs the GPU kernels (on any machine with one)");
  if (!a.formats_given) names = gpu_decode_formats(h.head_dim);
  const auto dev = tq::cuda::device_info(0);
  tq::cuda::DumpCheckOptions o;
  o.positions = a.positions;
  o.block_size = a.block_size;
  o.splits = a.splits;
  tq::Json rows = tq::Json::array();
  tq::Table table({"layer", "format", "tokens", "positions", "store_bad_slots", "dequant_bad", "decode_max_rel",
                   "at(pos,head)", "splits", "result"});
  int passed = 0, failed = 0, not_run = 0;
  for (const int l : layers) {
    const tq::KvDumpLayer L = dump.read_layer(l);
    std::vector<std::string> row_names = names;
    row_names.push_back("");  // the FP16 baseline decode
    for (const auto& name : row_names) {
      const tq::KvFormat f = name.empty() ? tq::KvFormat{} : tq::make_format(name, h.head_dim);
      const auto c = tq::cuda::check_dump_layer(name.empty() ? nullptr : &f, L, h.n_heads, h.n_kv_heads, h.head_dim, o);
      const tq::bench::DumpCheckReport r{c, name, o.tolerance};
      if (r.not_run()) ++not_run;
      else if (r.ok()) ++passed;
      else ++failed;
      rows.push_back(r);
      table.add(table_cells(r));
    }
  }
  if (a.json) {
    std::printf("%s\n", tq::dump_json(rows, 2).c_str());
  } else {
    std::printf("tq-bench --check-dump %s on %s: %s (%s), %lld tokens, %d q heads / %d kv heads, head_dim %d\n",
                a.file.c_str(), dev.name.c_str(), h.model.c_str(), h.arch.c_str(),
                static_cast<long long>(h.n_tokens), h.n_heads, h.n_kv_heads, h.head_dim);
    std::printf("store: cache bytes vs the CPU encoder (slots that differ); dequant: fp16 + bf16 K/V vs the CPU "
                "decoder, bit for bit;\ndecode: %d query positions per layer (causal, one ragged batch over shuffled "
                "%d-token pages) vs float64 attention\nover the CPU-decoded cache, max ‖out − ref‖ / ‖ref‖ per (position, "
                "q head), tolerance %.0e; a sliding-window layer: its first window tokens\n%s",
                a.positions, a.block_size, o.tolerance, table.text().c_str());
    std::printf("%d passed, %d failed, %d not run\n", passed, failed, not_run);
  }
  if (failed) std::fprintf(stderr, "tq-bench: %d check(s) FAILED\n", failed);
  return failed ? 1 : 0;
#else
  throw tq::Error("this tq-bench was built without CUDA: --check-dump runs the GPU kernels");
#endif
#endif
}

}  // namespace tq::bench

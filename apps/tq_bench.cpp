// tq-bench: time the GPU store/decode/dequant kernels per format against the FP16
// baseline decode and the measured device-copy bandwidth (or, with --cpu, the
// CPU reference codecs); --check-dump checks the kernels on a tq-dump file's real
// queries, keys and values against the CPU (bench/check_dump.h).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/check_dump.h"
#include "bench/report.h"
#include "common/app.h"
#include "tq/attention.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/json.h"
#include "tq/model_shapes.h"
#include "tq/rng.h"
#include "tq/table.h"
#ifdef TQ_HAVE_CUDA
#include "tq/cuda/bench.h"
#include "tq/cuda/device.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/paged.h"
#endif

namespace {

struct Args {
  std::vector<std::string> formats{"turboquant_4bit_nc"};
  int batch = 32, q_heads = 32, kv_heads = 8, head_dim = 128, ctx = 4096, splits = 0, block_size = 16;
  int tiles = 0;  // --tiles: DecodeParams::column_tiles
  bool even_dealing = false;  // --even-dealing: DecodeParams::even_dealing
  std::string dtype = "fp16";  // --dtype: the quantized store's and decode's activations
  int reps = 30, warmup = 5;
  int64_t store_tokens = 0;
  double copy_gb = 2.0;
  std::string pages = "shuffled";
  std::string layout = "vllm";  // vllm, planes or both (quantized cache layout)
  std::string dequant = "f16";  // output type of the timed paged dequant, or none
  std::string seq_lens_spec;    // --seq-lens as given (empty: every sequence ctx long)
  std::vector<int> seq_lens;    // parsed: batch entries, ctx = their maximum
  bool json = false, cpu = false, list = false;
  std::string check_dump;     // --check-dump FILE
  std::string layers = "all";  // its layers
  int positions = 128;        // query positions decoded per layer
  bool formats_given = false;
  std::string model;                      // --model NAME as given (any case)
  const tq::ModelShape* shape = nullptr;  // its entry (set from --model): the shape and the canonical name
  bool list_models = false;
  bool simulate_lut = false;  // --check-dump: simulate the decode's key LUT instead of running the kernels
  std::vector<int> q_lens;    // --q-len: multi-query decodes (q_len > 1) instead of the per-format table
  std::string q_counts_spec;  // --q-counts as given
  std::vector<int> q_counts;  // parsed: batch entries (q_lens: their maximum)
};

int64_t total_tokens(const Args& a) {
  if (a.seq_lens.empty()) return int64_t(a.batch) * a.ctx;
  int64_t n = 0;
  for (const int l : a.seq_lens) n += l;
  return n;
}

// --model: one sequence's KV cache over all the model's layers, per format (bytes), and the
// lines that print it; empty without --model.
struct ModelMemory {
  std::string name;
  int64_t bytes = 0, f16_bytes = 0;
};
std::vector<ModelMemory> model_memory(const Args& a, const std::vector<std::string>& names) {
  std::vector<ModelMemory> out;
  if (!a.shape) return out;
  const tq::ModelShape& m = *a.shape;
  const int64_t per_head = tq::cached_tokens_all_layers(m, a.ctx) * m.kv_heads;  // token-heads
  for (const auto& n : names) {
    if (n == "f16") continue;
    out.push_back({n, per_head * int64_t(tq::make_format(n, a.head_dim).slot_bytes()), per_head * 4 * a.head_dim});
  }
  return out;
}
void print_model_memory(const Args& a, const std::vector<ModelMemory>& mem) {
  if (mem.empty()) return;
  const tq::ModelShape& m = *a.shape;
  std::printf("KV cache of one %d-token sequence over all %d layers of %s%s: f16 %.3f GB\n", a.ctx, m.layers,
              std::string(m.name).c_str(),
              m.sliding_layers ? fmt::format(" (its {} windowed layers keep {} tokens)", m.sliding_layers,
                                             std::min(a.ctx, m.window)).c_str()
                               : "",
              double(mem.front().f16_bytes) / 1e9);
  for (const auto& x : mem)
    std::printf("  %-28s %.3f GB (%.2fx smaller)\n", x.name.c_str(), double(x.bytes) / 1e9,
                double(x.f16_bytes) / double(x.bytes));
}
// A format row's "model": the shape and, for a quantized format, its KV cache per sequence.
tq::Json model_json(const Args& a, const std::vector<ModelMemory>& mem, const std::string& format) {
  tq::Json j = *a.shape;
  const auto it = std::find_if(mem.begin(), mem.end(), [&](const ModelMemory& x) { return x.name == format; });
  if (it != mem.end()) {
    j["kv_bytes_per_seq"] = it->bytes;  // one ctx-token sequence, every layer
    j["f16_kv_bytes_per_seq"] = it->f16_bytes;
  }
  return j;
}

std::string shape_text(const Args& a) {
  const std::string tokens =
      a.seq_lens.empty() ? fmt::format("ctx {}", a.ctx)
                         : fmt::format("seq_lens {} ({} tokens, longest {})", a.seq_lens_spec, total_tokens(a), a.ctx);
  return fmt::format("{}batch {}, q_heads {}, kv_heads {}, head_dim {}, {}, block_size {}, {} pages",
                     a.shape ? fmt::format("model {}: ", a.shape->name) : "", a.batch, a.q_heads, a.kv_heads, a.head_dim,
                     tokens, a.block_size, a.pages);
}

// One entry of a per-sequence list (--seq-lens, --q-counts): an integer in 1 … top (noun: what it is).
int parse_len(const std::string& text, const std::string& spec, const char* opt, const char* noun, int top) {
  size_t used = 0;
  long v = -1;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 1 || v > top)
    throw tq::Error(fmt::format("{} '{}': '{}' is not a {} in 1 … {}", opt, spec, text, noun, top));
  return int(v);
}

// The largest batch and sequence length tq-bench takes, from --batch / --ctx or a --seq-lens list.
constexpr int kMaxSeqs = 65535, kMaxLen = 1 << 30;

// --seq-lens (and --q-counts: opt, noun, top): "L1,L2,…" with "LxN" for N sequences of L tokens (the batch is
// the count), or "uniform:MIN:MAX" (batch lengths drawn uniformly from [MIN, MAX], fixed seed).
std::vector<int> parse_seq_lens(const std::string& spec, int batch, bool batch_given, const char* opt = "--seq-lens",
                                const char* noun = "length", int top = kMaxLen) {
  auto value = [&](const std::string& text) { return parse_len(text, spec, opt, noun, top); };
  std::vector<int> lens;
  if (spec.rfind("uniform:", 0) == 0) {
    const size_t c = spec.find(':', 8);
    if (c == std::string::npos) throw tq::Error(fmt::format("{} '{}': expected uniform:MIN:MAX", opt, spec));
    const int lo = value(spec.substr(8, c - 8)), hi = value(spec.substr(c + 1));
    if (lo > hi) throw tq::Error(fmt::format("{} '{}': MIN {} > MAX {}", opt, spec, lo, hi));
    tq::Rng rng(17);
    for (int b = 0; b < batch; ++b) lens.push_back(lo + int(rng.below(uint64_t(hi - lo + 1))));
    return lens;
  }
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t end = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, end - pos);
    const size_t x = item.find('x');
    const int len = value(item.substr(0, x));
    const int n = x == std::string::npos ? 1 : parse_len(item.substr(x + 1), spec, opt, "count", kMaxSeqs);
    if (lens.size() + size_t(n) > size_t(kMaxSeqs))
      throw tq::Error(fmt::format("{} '{}': more than {} sequences", opt, spec, kMaxSeqs));
    lens.insert(lens.end(), size_t(n), len);
    pos = end + 1;
  }
  if (batch_given && int(lens.size()) != batch)
    throw tq::Error(fmt::format("{} '{}' lists {} sequences but --batch is {}", opt, spec, lens.size(), batch));
  return lens;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int list_models(bool json) {
  if (json) {
    tq::Json rows = tq::Json::array();
    for (const tq::ModelShape& m : tq::model_shapes()) rows.push_back(m);
    std::printf("%s\n", tq::dump_json(rows, 2).c_str());
    return 0;
  }
  tq::Table t({"model", "q_heads", "kv_heads", "group", "head_dim", "layers", "windowed", "config"});
  for (const tq::ModelShape& m : tq::model_shapes())
    t.add({std::string(m.name), std::to_string(m.q_heads), std::to_string(m.kv_heads),
           std::to_string(m.q_heads / m.kv_heads), std::to_string(m.head_dim), std::to_string(m.layers),
           m.sliding_layers ? fmt::format("{} x {}", m.sliding_layers, m.window) : "-", std::string(m.source)});
  std::printf("tq-bench --model NAME: attention shapes from each model's published config "
              "(windowed: layers x sliding-window tokens)\n%s",
              t.text().c_str());
  return 0;
}

// ---- CPU reference timing (single thread) ----
int run_cpu(const Args& a) {
  const auto names = tq::expand_format_names(a.formats);
  const int g = a.q_heads / a.kv_heads;
  TQ_CHECK(a.q_heads % a.kv_heads == 0, "--q-heads {} must be a multiple of --kv-heads {}", a.q_heads, a.kv_heads);
  // Encode and dequant (decode_slots): up to 2^16 token-heads; decode: one kv head over up to 8192 tokens, extrapolated
  // to the whole shape (kv_heads heads over every sequence's tokens).
  const int64_t n_enc = std::min<int64_t>(total_tokens(a) * a.kv_heads, 1 << 16);
  const int64_t n_dec = std::min(a.ctx, 8192);
  tq::Rng rng(1);
  std::vector<float> k(size_t(n_enc) * a.head_dim), v(k.size()), q(size_t(g) * a.head_dim), out(q.size());
  for (auto& x : k) x = float(rng.gaussian());
  for (auto& x : v) x = float(0.3 + rng.gaussian());
  for (auto& x : q) x = float(rng.gaussian());
  const auto mem = model_memory(a, names);
  tq::Json rows = tq::Json::array();
  tq::Table table({"format", "slot_B", "encode_Mvec/s", "dequant_Mvec/s", "decode_ms(1 head, T tok)", "T",
                   "decode_est_ms(full shape)"});
  for (const auto& name : names) {
    const tq::KvFormat f = tq::make_format(name, a.head_dim);
    std::vector<uint8_t> slots(size_t(n_enc) * f.slot_bytes());
    auto t0 = std::chrono::steady_clock::now();
    f.encode_slots(k.data(), v.data(), n_enc, slots.data());
    const double enc_s = seconds_since(t0);
    std::vector<float> kd(k.size()), vd(v.size());
    t0 = std::chrono::steady_clock::now();
    f.decode_slots(slots.data(), n_enc, kd.data(), vd.data());  // the dequant's CPU reference
    const double deq_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const int64_t nd = std::min(n_dec, n_enc);
    tq::decode_attention(f, q.data(), g, slots.data(), nd, float(1.0 / std::sqrt(double(a.head_dim))), out.data());
    const double dec_s = seconds_since(t0);
    const double est_ms = dec_s * 1e3 * a.kv_heads * (double(total_tokens(a)) / double(nd));
    tq::Json j = {{"format", name},
                  {"mode", "cpu"},
                  {"slot_bytes", f.slot_bytes()},
                  {"encode_vectors", n_enc},
                  {"encode_mvec_per_s", double(n_enc) / enc_s / 1e6},
                  {"dequant_mvec_per_s", double(n_enc) / deq_s / 1e6},
                  {"decode_tokens", nd},
                  {"decode_ms_one_head", dec_s * 1e3},
                  {"decode_est_ms_full_shape", est_ms}};
    if (a.shape) j["model"] = model_json(a, mem, name);
    rows.push_back(std::move(j));
    table.add({name, std::to_string(f.slot_bytes()), fmt::format("{:.2f}", double(n_enc) / enc_s / 1e6),
               fmt::format("{:.2f}", double(n_enc) / deq_s / 1e6), fmt::format("{:.3f}", dec_s * 1e3),
               std::to_string(nd), fmt::format("{:.1f}", est_ms)});
  }
  if (a.json) {
    std::printf("%s\n", tq::dump_json(rows, 2).c_str());
  } else {
    std::printf("tq-bench --cpu (single thread, CPU reference codecs), %s\n%s", shape_text(a).c_str(),
                table.text().c_str());
    print_model_memory(a, mem);
  }
  return 0;
}

#ifdef TQ_HAVE_CUDA
int run_multi_query(const Args& a, const tq::cuda::BenchShape& s, const tq::cuda::BenchOptions& o);

int run_gpu(const Args& a) {
  const auto names = tq::expand_format_names(a.formats);
  const auto mem = model_memory(a, names);
  tq::cuda::BenchShape s;
  s.batch = a.batch;
  s.n_q_heads = a.q_heads;
  s.n_kv_heads = a.kv_heads;
  s.head_dim = a.head_dim;
  s.ctx = a.ctx;
  s.block_size = a.block_size;
  s.num_splits = a.splits;
  s.column_tiles = a.tiles;
  s.even_dealing = a.even_dealing;
  s.dtype = a.dtype == "bf16" ? tq::cuda::Dtype16::bf16 : tq::cuda::Dtype16::f16;
  s.seq_lens = a.seq_lens;
  s.q_counts = a.q_counts;
  s.pages = a.pages == "shuffled"     ? tq::cuda::BenchShape::Pages::shuffled
            : a.pages == "sequential" ? tq::cuda::BenchShape::Pages::sequential
                                      : tq::cuda::BenchShape::Pages::resident;
  tq::cuda::BenchOptions o;
  o.reps = a.reps;
  o.warmup = a.warmup;
  TQ_CHECK(o.reps >= 20, "--reps {} must be ≥ 20 (the median of at least 20 launches is reported)", o.reps);
  if (!a.q_lens.empty()) return run_multi_query(a, s, o);
  const auto dev = tq::cuda::device_info(0);
  const auto copy = tq::cuda::bench_copy(size_t(a.copy_gb * 1e9), o);
  const auto base = tq::cuda::bench_decode_f16(s, o);
  const int64_t store_tokens =
      a.store_tokens > 0 ? a.store_tokens : std::min<int64_t>(total_tokens(a), 131072);

  tq::Json rows = tq::Json::array();
  const bool deq = a.dequant != "none";
  std::vector<std::string> head = {"format", "slot_B", "kv_MB", "decode_ms", "GB/s", "%copy", "vs_f16", "splits",
                                   "store_Mtok/s", "store_GB/s", "store_%copy"};
  if (deq) head.insert(head.end(), {"dequant_ms", "dequant_GB/s", "dequant_%copy"});
  tq::Table table(head);
  table.add(tq::bench::f16_baseline_cells(base, copy, a.head_dim, deq));
  // The dequants run after every decode and store: a dequant moves ~3.5 TB/s for a few hundred
  // ms, and the decode timed right after it ran up to 12% slower, so the decode and
  // store figures do not depend on --dequant.
  struct Pending {
    tq::KvFormat f;
    tq::cuda::BenchShape sl;
    tq::Json j;
    std::vector<std::string> row;
  };
  std::vector<Pending> done;
  std::vector<std::string> no_decode;  // why a row's decode columns are "-"
  const auto dtype = a.dequant == "bf16" ? tq::cuda::DequantDtype::bf16 : tq::cuda::DequantDtype::f16;
  std::vector<bool> layouts;
  if (a.layout != "planes") layouts.push_back(false);
  if (a.layout != "vllm") layouts.push_back(true);
  for (const auto& name : names)
  for (const bool planes : layouts) {
    if (name == "f16") continue;  // the baseline row
    const tq::KvFormat f = tq::make_format(name, a.head_dim);
    const auto kf = tq::cuda::kernel_format(f);  // throws a clear error for formats without kernels
    if (planes && !tq::cuda::planes_support(kf).empty()) {
      if (a.layout == "planes") throw tq::Error(tq::cuda::planes_support(kf));
      continue;  // --layout both: the vLLM row only
    }
    tq::cuda::BenchShape sl = s;
    sl.planes = planes;
    tq::Json j = {{"format", name},   {"layout", planes ? "planes" : "vllm"},
                  {"mode", "gpu"},    {"device", dev.name},
                  {"batch", a.batch}, {"q_heads", a.q_heads},
                  {"kv_heads", a.kv_heads}, {"head_dim", a.head_dim},
                  {"ctx", a.ctx}};  // the longest sequence
    if (!a.seq_lens.empty()) j["seq_lens"] = a.seq_lens_spec;
    if (a.dtype != "fp16") j["dtype"] = a.dtype;
    j["total_tokens"] = total_tokens(a);
    j["block_size"] = a.block_size;
    j["pages"] = a.pages;
    j["slot_bytes"] = f.slot_bytes();
    j["copy_gbps"] = copy.gbps;
    j["copy_bytes"] = copy.bytes;
    if (a.shape) j["model"] = model_json(a, mem, name);
    std::vector<std::string> row = {planes ? name + " [planes]" : name, std::to_string(f.slot_bytes())};
    std::string why = tq::cuda::decode_support(kf);
    if (why.empty()) why = tq::cuda::decode_heads_support(kf, a.kv_heads);
    if (why.empty()) {
      const auto d = tq::cuda::bench_decode(f, sl, o);
      const tq::bench::DecodeReport r{d, base, copy};
      j["decode"] = r;
      const auto cells = table_cells(r);
      row.insert(row.end(), cells.begin(), cells.end());
    } else {
      j["decode"] = why;
      no_decode.push_back(why);
      row.insert(row.end(), {"-", "-", "-", "-", "-", "-"});
    }
    const auto st = tq::cuda::bench_store(f, sl, store_tokens, o);
    const tq::bench::StoreReport sr{st, copy};
    j["store"] = sr;
    const auto cells = table_cells(sr);
    row.insert(row.end(), cells.begin(), cells.end());
    done.push_back({f, sl, std::move(j), std::move(row)});
  }
  for (auto& [f, sl, j, row] : done) {
    if (deq && sl.planes) {
      j["dequant"] = "dequant reads the vLLM cache layout only";
      row.insert(row.end(), {"-", "-", "-"});
    } else if (deq) {
      const auto dq = tq::cuda::bench_dequant(f, sl, dtype, o);
      const tq::bench::DequantReport r{dq, a.dequant, copy};
      j["dequant"] = r;
      const auto cells = table_cells(r);
      row.insert(row.end(), cells.begin(), cells.end());
    }
    table.add(row);
    rows.push_back(std::move(j));
  }
  if (a.json) {
    std::printf("%s\n", tq::dump_json(rows, 2).c_str());
  } else {
    std::printf("tq-bench on %s (%d SMs): %s, splits %s\n", dev.name.c_str(), dev.sm_count, shape_text(a).c_str(),
                a.splits ? std::to_string(a.splits).c_str() : "auto");
    std::printf("device copy (cudaMemcpy D2D, %.1f GB, read+write): %.0f GB/s; FP16 baseline decode: %.4f ms\n",
                double(copy.bytes) / 1e9, copy.gbps, base.t.median_ms);
    const std::string deq_note =
        deq ? fmt::format("dequant: every token to {} K and V (GB/s: slots read + K/V written); ", a.dequant) : "";
    std::printf("store: %lld tokens per launch; %stimes are medians of %d launches (CUDA events)\n%s",
                static_cast<long long>(store_tokens), deq_note.c_str(), a.reps, table.text().c_str());
    for (const auto& why : no_decode) std::printf("decode not timed: %s\n", why.c_str());
    print_model_memory(a, mem);
  }
  return 0;
}
#endif

#ifdef TQ_HAVE_CUDA
// --q-len: the fused multi-query decode against one single-query decode and q_len of them in a row,
// all timed in this call on the same cache copies.
int run_multi_query(const Args& a, const tq::cuda::BenchShape& s, const tq::cuda::BenchOptions& o) {
  const auto dev = tq::cuda::device_info(0);
  const auto copy = tq::cuda::bench_copy(size_t(a.copy_gb * 1e9), o);
  tq::Json rows = tq::Json::array();
  std::vector<std::string> head = {"format", "q_len",  "fused_ms", "%copy", "q_len1_ms", "fused/q_len1", "separate_ms",
                                   "separate/fused", "f16_ms", "x_f16", "passes", "tiles"};
  if (!a.q_counts.empty()) head.insert(head.end(), {"varlen_ms", "varlen/fused", "rows_ms", "rows/varlen"});
  tq::Table table(head);
  for (const auto& name : tq::expand_format_names(a.formats)) {
    if (name == "f16") continue;
    const tq::KvFormat f = tq::make_format(name, a.head_dim);
    for (const int q_len : a.q_lens) {
      const auto m = tq::cuda::bench_multi_query(f, s, q_len, o);
      const tq::bench::MultiQueryReport r{m, copy};
      tq::Json j = {{"format", name},         {"mode", "gpu-multi-query"}, {"device", dev.name},
                    {"batch", a.batch},       {"q_heads", a.q_heads},      {"kv_heads", a.kv_heads},
                    {"head_dim", a.head_dim}, {"ctx", a.ctx}};
      if (a.dtype != "fp16") j["dtype"] = a.dtype;
      if (!a.q_counts.empty()) j["q_counts"] = a.q_counts_spec;
      j.update(tq::Json(r));  // q_len … reps after the shape
      rows.push_back(std::move(j));
      tq::bench::Cells cells = {name};
      const auto more = table_cells(r);
      cells.insert(cells.end(), more.begin(), more.end());
      table.add(cells);
    }
  }
  if (a.json) {
    std::printf("%s\n", tq::dump_json(rows, 2).c_str());
  } else {
    std::printf("tq-bench multi-query on %s (%d SMs): %s; device copy %.0f GB/s; medians of %d launches\n"
                "fused: one decode of q_len queries per sequence (causal within the chunk); q_len1: one query; "
                "separate: q_len single-query decodes in a row; f16: our FP16 decode of the same q_len%s\n%s",
                dev.name.c_str(), dev.sm_count, shape_text(a).c_str(), copy.gbps, a.reps,
                a.q_counts.empty() ? ""
                                   : ("; varlen: one decode with the query counts " + a.q_counts_spec +
                                      " (q_len: the largest); rows: one single-query decode with every query a row "
                                      "of its own (what a decode-only kernel runs for this batch)").c_str(),
                table.text().c_str());
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tq-bench: time the GPU store/decode/dequant kernels per format (or the CPU reference with --cpu)"};
  Args a;
  app.add_option("--format", a.formats, "KV format(s), repeatable; 'all' for every registered preset")
      ->capture_default_str();
  app.add_option("--batch", a.batch, "sequences")->check(CLI::Range(1, kMaxSeqs))->capture_default_str();
  app.add_option("--q-heads", a.q_heads, "query heads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--kv-heads", a.kv_heads, "kv heads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--head-dim", a.head_dim, "head dimension")->check(CLI::Range(1, 1024))->capture_default_str();
  auto* model_opt = app.add_option("--model", a.model,
                                   "the attention shape of a known model instead of --q-heads/--kv-heads/--head-dim "
                                   "(see --list-models); also prints one sequence's KV cache over all its layers");
  for (const char* o : {"--q-heads", "--kv-heads", "--head-dim"}) model_opt->excludes(app.get_option(o));
  auto* batch_opt = app.get_option("--batch");
  auto* ctx_opt =
      app.add_option("--ctx", a.ctx, "tokens per sequence")->check(CLI::Range(1, kMaxLen))->capture_default_str();
  app.add_option("--seq-lens", a.seq_lens_spec,
                 "a ragged batch instead of --ctx: 'L1,L2,…' ('LxN': N sequences of L tokens; the batch is their "
                 "count) or 'uniform:MIN:MAX' (--batch lengths drawn from [MIN, MAX], fixed seed)")
      ->excludes(ctx_opt);
  app.add_option("--splits", a.splits,
                 "split-KV: work items per sequence on average (the batch's tokens are dealt out over splits · batch "
                 "CTAs per head group); 0 = auto from the longest sequence, batch and SM count")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--tiles", a.tiles,
                 "8-column N-tiles per warp where a format has the two-tile decode kernels (G 9-16, or q_len > 1): "
                 "0 = the planner's choice, 1 = one, 2 = two wherever they apply (for A/B timing)")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  app.add_flag("--even-dealing", a.even_dealing,
              "deal each sequence's tokens out in equal chunks even where the planner would take the balanced "
              "dealing (short last chunks on the CTA slots a wave leaves idle; for A/B timing)");
  app.add_option("--dtype", a.dtype,
                 "activations of the quantized store (keys, values) and decode (queries, outputs): fp16 or bf16 "
                 "(our FP16 decode and SDPA stay fp16)")
      ->check(CLI::IsMember({"fp16", "bf16"}))
      ->capture_default_str();
  app.add_option("--block-size", a.block_size, "tokens per cache page")
      ->check(CLI::IsMember(std::vector<int>(std::begin(tq::cuda::kBlockSizes), std::end(tq::cuda::kBlockSizes))))
      ->capture_default_str();
  app.add_option("--reps", a.reps, "timed launches per kernel (median reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed launches first")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--store-tokens", a.store_tokens, "tokens per store launch (0: min(batch·ctx, 131072))")
      ->check(CLI::Range(int64_t(0), int64_t(INT32_MAX)));
  app.add_option("--copy-gb", a.copy_gb, "size of the device-copy bandwidth probe")
      ->check(CLI::Range(0.001, 64.0))
      ->capture_default_str();
  app.add_option("--pages", a.pages,
                 "block tables: shuffled (random physical blocks), sequential, or resident (diagnostic: all entries "
                 "in the first 128 blocks, so reads hit L2 and the time is the kernel's compute floor)")
      ->check(CLI::IsMember({"shuffled", "sequential", "resident"}))
      ->capture_default_str();
  app.add_option("--layout", a.layout,
                 "quantized cache layout: vllm (slots), planes (key-index / value-code / metadata planes per page, "
                 "16-byte aligned; mse keys + 4-bit values) or both (one row each)")
      ->check(CLI::IsMember({"vllm", "planes", "both"}))
      ->capture_default_str();
  app.add_option("--dequant", a.dequant,
                 "also time the paged dequant of every token to this output type (f16, bf16), or none")
      ->check(CLI::IsMember({"f16", "bf16", "none"}))
      ->capture_default_str();
  app.add_flag("--json", a.json, "JSON list, one object per format");
  app.add_flag("--cpu", a.cpu, "time the CPU reference codecs instead (any machine)");
  app.add_flag("--list-formats", a.list, "list the KV formats (with --head-dim, --json)");
  app.add_flag("--list-models", a.list_models, "list the models --model knows (with --json)");
  auto* check_opt = app.add_option("--check-dump", a.check_dump,
                                   "instead of timing: check the store, dequant and decode kernels on a tq-dump file's "
                                   "real Q/K/V against the CPU encoder/decoder and a float64 attention (exit 1 if any "
                                   "check fails); default formats: every one with a GPU decode, plus the FP16 baseline");
  model_opt->excludes(check_opt);
  app.add_flag("--simulate-lut", a.simulate_lut,
               "--check-dump without a GPU: simulate in float64 what the decode's fp16 LUT of codebook centroids (mse "
               "keys, turbo keys and values) costs on the dump's layers, instead of running the kernels")
      ->needs(check_opt);
  app.add_option("--layers", a.layers, "--check-dump: layers to check (all, or a list like 0,5,28-29 / first2,last2)")
      ->needs(check_opt)
      ->capture_default_str();
  app.add_option("--positions", a.positions,
                 "--check-dump: query positions decoded per layer (evenly spread, the last token included)")
      ->needs(check_opt)
      ->capture_default_str();
  app.add_option("--q-len", a.q_lens,
                 "multi-query: time the fused decode of N query tokens per sequence (2 … 128, a list: 4,16) against "
                 "one single-query decode and N of them in a row, instead of the per-format table")
      ->delimiter(',')
      ->check(CLI::Range(2, 128))
      ->excludes(check_opt);
  app.add_option("--q-counts", a.q_counts_spec,
                 "multi-query with each sequence's own query count (vLLM's query_start_loc), as --seq-lens: "
                 "'16,1x31' (batch entries, 1 … 128); times that launch too (varlen_ms) against the fused decode of "
                 "the largest count for every sequence (--q-len: that count) and against one single-query decode "
                 "with every query a row of its own (rows_ms)")
      ->excludes(check_opt)
      ->excludes("--q-len");
  auto* format_opt = app.get_option("--format");
  return tq::run_tool("tq-bench", app, argc, argv, [&]() -> int {
    if (!a.seq_lens_spec.empty()) {
      a.seq_lens = parse_seq_lens(a.seq_lens_spec, a.batch, batch_opt->count() > 0);
      a.batch = int(a.seq_lens.size());
      a.ctx = *std::max_element(a.seq_lens.begin(), a.seq_lens.end());
    }
    if (!a.q_counts_spec.empty()) {
      a.q_counts = parse_seq_lens(a.q_counts_spec, a.batch, batch_opt->count() > 0 || !a.seq_lens.empty(),
                                  "--q-counts", "count", 128);  // (kMaxQueryLen)
      a.batch = int(a.q_counts.size());
      const int top = *std::max_element(a.q_counts.begin(), a.q_counts.end());
      if (top < 2) throw tq::Error(fmt::format("--q-counts '{}': the largest count must be ≥ 2", a.q_counts_spec));
      a.q_lens = {top};
    }
    if (a.list_models) return list_models(a.json);
    if (!a.model.empty()) {
      a.shape = &tq::find_model_shape(a.model);
      a.q_heads = a.shape->q_heads;
      a.kv_heads = a.shape->kv_heads;
      a.head_dim = a.shape->head_dim;
    }
    if (a.list) {
      if (a.json) std::printf("%s\n", tq::dump_json(tq::list_formats_json(a.head_dim), 2).c_str());
      else std::fputs(tq::list_formats_text(a.head_dim).c_str(), stdout);
      return 0;
    }
    a.formats_given = format_opt->count() > 0;
    if (!a.check_dump.empty()) {
      tq::bench::CheckDumpArgs c;
      c.file = a.check_dump;
      c.layers = a.layers;
      c.positions = a.positions;
      c.block_size = a.block_size;
      c.splits = a.splits;
      c.formats = a.formats;
      c.formats_given = a.formats_given;
      c.simulate_lut = a.simulate_lut;
      c.json = a.json;
      return tq::bench::run_check_dump(c);
    }
    if (a.cpu) return run_cpu(a);
    // unknown format names and head_dims (e.g. --model phi-3-mini-4k: 96) are bad input on any machine
    for (const auto& n : tq::expand_format_names(a.formats)) (void)tq::make_format(n, a.head_dim);
#ifdef TQ_HAVE_CUDA
    if (tq::cuda::device_count() == 0)
      throw tq::Error("no CUDA device found: GPU benchmarks need one (use --cpu to time the CPU reference)");
    return run_gpu(a);
#else
    throw tq::Error("this tq-bench was built without CUDA: GPU benchmarks are unavailable (use --cpu to time the "
                    "CPU reference)");
#endif
  });
}

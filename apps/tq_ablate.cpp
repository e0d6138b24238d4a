// tq-ablate: per-layer, per-head quality of KV formats on real Q/K/V dumps.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tq/ablation.h"
#include "tq/ablation_report.h"
#include "tq/app.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/kv_dump.h"
#include "tq/layer_list.h"
#include "tq/study.h"

int main(int argc, char** argv) {
  CLI::App app{"tq-ablate: per-layer, per-head quality of KV formats on real KV dumps"};
  std::vector<std::string> dump_paths, formats{"all"}, studies;
  std::string layers_spec, out_dir = "ablation";
  int topk = 8, threads = int(std::max(1u, std::thread::hardware_concurrency()));
  bool list_formats = false, json = false, no_plots = false;
  int list_head_dim = 128;
  app.add_option("--dump", dump_paths, "KV dump (HDF5, tq-dump schema); repeatable");
  app.add_option("--format", formats, "formats or specs (repeatable; 'all' = every registered preset)")->capture_default_str();
  app.add_option("--study", studies, "built-in studies: presets qjl norm rotation codebook kv-bits all (repeatable)");
  app.add_option("--layers", layers_spec, "layers to evaluate, e.g. 0,1,28-29 (default: all in the dump)");
  app.add_option("--out", out_dir, "output directory (metrics.csv, summary.json, report.md, PNGs)")->capture_default_str();
  app.add_option("--topk", topk, "k of the top-k agreement")->capture_default_str();
  app.add_option("--threads", threads, "worker threads (layers in parallel)")->capture_default_str();
  app.add_flag("--no-plots", no_plots, "skip the matplotlib plots");
  app.add_flag("--list-formats", list_formats, "list registered formats and their sizes");
  app.add_option("--head-dim", list_head_dim, "head_dim for --list-formats")->capture_default_str();
  app.add_flag("--json", json, "with --list-formats: JSON");

  return tq::run_tool("tq-ablate", app, argc, argv, [&]() -> int {
    if (list_formats) {
      std::fputs(json ? (tq::list_formats_json(list_head_dim).dump(2) + "\n").c_str() : tq::list_formats_text(list_head_dim).c_str(), stdout);
      return 0;
    }
    TQ_CHECK(!dump_paths.empty(), "no --dump given");
    TQ_CHECK(topk >= 1, "--topk {} must be ≥ 1", topk);
    TQ_CHECK(threads >= 1 && threads <= 256, "--threads {} out of range", threads);
    const auto t_start = std::chrono::steady_clock::now();

    // Open and validate every dump, and build every format for its head_dim,
    // before any work starts.
    std::vector<tq::KvDump> dumps;
    tq::AblationResults res;
    res.threads = threads;
    res.command = "tq-ablate";
    for (int i = 1; i < argc; ++i) res.command += std::string(" ") + argv[i];
    std::vector<std::vector<int>> layer_sel;
    std::vector<std::vector<tq::StudyFormat>> plans;
    for (size_t di = 0; di < dump_paths.size(); ++di) {
      dumps.push_back(tq::KvDump::open(dump_paths[di]));
      const auto& h = dumps.back().header();
      tq::AblationDumpInfo info;
      info.path = dump_paths[di];
      info.name = tq::dump_label(dump_paths[di], di);
      for (const auto& other : res.dumps)  // labels must be unique: suffix the index on a clash
        if (other.name == info.name) info.name += fmt::format("-{}", di);
      info.model = h.model;
      info.arch = h.arch;
      info.n_layers = h.n_layers;
      info.n_heads = h.n_heads;
      info.n_kv_heads = h.n_kv_heads;
      info.head_dim = h.head_dim;
      info.n_tokens = h.n_tokens;
      res.dumps.push_back(info);
      layer_sel.push_back(layers_spec.empty() ? dumps.back().header().layers : tq::parse_layer_list(layers_spec, h.n_layers));
      for (int l : layer_sel.back())
        TQ_CHECK(dumps.back().has_layer(l), "{}: layer {} is not in the dump", dump_paths[di], l);
      plans.push_back(tq::plan_formats(formats, studies, h.head_dim, h.n_tokens));
      for (const auto& sf : plans.back()) {
        tq::AblationFormatInfo fi;
        fi.name = sf.name;
        fi.study = sf.study;
        fi.head_dim = h.head_dim;
        fi.eval_from = sf.eval_from;
        if (sf.needs_empirical_fit) {
          // Build the format after the fit; check the spec parses with a stand-in codebook.
          tq::make_format(tq::study_spec_with_codebook(sf, "gauss"), h.head_dim);
        } else {
          const tq::KvFormat f = tq::make_format(sf.spec, h.head_dim);
          fi.key_bytes = f.key_bytes();
          fi.value_bytes = f.value_bytes();
          fi.slot_bytes = f.slot_bytes();
          fi.bits_per_value = f.bits_per_value();
        }
        res.formats.push_back(fi);
        res.format_dump.push_back(int(di));
      }
    }
    ::mkdir(out_dir.c_str(), 0755);
    struct stat st{};
    TQ_CHECK(::stat(out_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "--out '{}' is not a directory", out_dir);

    int64_t total = 0;
    for (const auto& s : layer_sel) total += int64_t(s.size());
    tq::Progress progress("tq-ablate", total);
    int64_t done = 0;
    std::mutex mu;
    for (size_t di = 0; di < dumps.size(); ++di) {
      tq::KvDump& dump = dumps[di];
      const auto& h = dump.header();
      // Formats for this dump; empirical codebooks are fitted on the first half of the tokens.
      std::vector<tq::KvFormat> fmts;
      std::vector<size_t> fmt_index;
      for (size_t i = 0; i < res.formats.size(); ++i) {
        if (res.format_dump[i] != int(di)) continue;
        const tq::StudyFormat& sf = plans[di][fmts.size()];
        std::string spec = sf.spec;
        if (sf.needs_empirical_fit) {
          const std::string path = fmt::format("{}/empirical_{}_d{}.txt", out_dir, res.dumps[di].name, h.head_dim);
          tq::fit_empirical_samples(dump, layer_sel[di], h.n_tokens / 2, path);
          spec = tq::study_spec_with_codebook(sf, "empirical:" + path);
        }
        fmts.push_back(tq::make_format(spec, h.head_dim));
        if (sf.needs_empirical_fit) std::remove(spec.substr(spec.find("empirical:") + 10).c_str());  // fitted table is cached in memory
        fmts.back().name = sf.name;
        res.formats[i].key_bytes = fmts.back().key_bytes();
        res.formats[i].value_bytes = fmts.back().value_bytes();
        res.formats[i].slot_bytes = fmts.back().slot_bytes();
        res.formats[i].bits_per_value = fmts.back().bits_per_value();
        fmt_index.push_back(i);
      }
      // Group formats by their evaluation range.
      std::vector<int64_t> ranges;
      for (size_t f = 0; f < fmts.size(); ++f)
        if (std::find(ranges.begin(), ranges.end(), plans[di][f].eval_from) == ranges.end()) ranges.push_back(plans[di][f].eval_from);
      // Layers in parallel: each worker reads its layer (HDF5 reads serialised) and ablates it.
      const auto& sel = layer_sel[di];
      std::atomic<size_t> next{0};
      std::vector<std::vector<tq::HeadMetrics>> per_layer(sel.size());
      std::exception_ptr failure;
      auto worker = [&]() {
        for (;;) {
          const size_t li = next.fetch_add(1);
          if (li >= sel.size()) return;
          try {
            tq::KvDumpLayer data;
            {
              std::lock_guard<std::mutex> lock(mu);
              data = dump.read_layer(sel[li]);
            }
            tq::AblationLayer L;
            L.layer = sel[li];
            L.T = h.n_tokens;
            L.n_heads = h.n_heads;
            L.n_kv_heads = h.n_kv_heads;
            L.head_dim = h.head_dim;
            L.sliding_window = int(data.sliding_window);
            L.attn_scale = float(data.attn_scale);
            L.q = data.q.data();
            L.k = data.k.data();
            L.v = data.v.data();
            for (int64_t from : ranges) {
              std::vector<tq::KvFormat> group;
              std::vector<size_t> gi;
              for (size_t f = 0; f < fmts.size(); ++f)
                if (plans[di][f].eval_from == from) { group.push_back(fmts[f]); gi.push_back(f); }
              tq::AblationOptions opt;
              opt.topk = topk;
              opt.eval_from = from;
              auto rows = tq::ablate_layer(L, group, opt);
              for (auto& r : rows) {
                const size_t f = gi[size_t(&r - rows.data()) / size_t(h.n_kv_heads)];
                r.dump = res.dumps[di].name;
                r.study = plans[di][f].study;
                per_layer[li].push_back(r);
              }
            }
            std::lock_guard<std::mutex> lock(mu);
            progress.update(++done);
          } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!failure) failure = std::current_exception();
            next = sel.size();
          }
        }
      };
      std::vector<std::thread> pool;
      for (int t = 0; t < std::min<int>(threads, int(sel.size())); ++t) pool.emplace_back(worker);
      for (auto& t : pool) t.join();
      if (failure) std::rethrow_exception(failure);
      for (auto& rows : per_layer) res.rows.insert(res.rows.end(), rows.begin(), rows.end());
    }
    progress.finish();
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

    // Outputs: each written completely under a temporary name, then renamed.
    {
      tq::AtomicOutput csv(out_dir + "/metrics.csv");
      std::ofstream f(csv.temp_path());
      f << tq::metrics_csv_header() << "\n";
      for (const auto& r : res.rows) f << tq::metrics_csv_row(r) << "\n";
      f.close();
      TQ_CHECK(f.good(), "cannot write {}", csv.path());
      csv.commit();
    }
    {
      tq::AtomicOutput js(out_dir + "/summary.json");
      std::ofstream f(js.temp_path());
      f << tq::ablation_summary_json(res).dump(1) << "\n";
      f.close();
      TQ_CHECK(f.good(), "cannot write {}", js.path());
      js.commit();
    }
    std::vector<std::string> plots;
    if (!no_plots) plots = tq::draw_ablation_plots(out_dir);
    {
      tq::AtomicOutput md(out_dir + "/report.md");
      std::ofstream f(md.temp_path());
      f << tq::ablation_report_markdown(res, plots);
      f.close();
      TQ_CHECK(f.good(), "cannot write {}", md.path());
      md.commit();
    }
    std::fputs(tq::ablation_summary_table(res).c_str(), stdout);
    std::printf("\ntq-ablate: %zu dump(s), %zu format runs, %lld layer(s) in %.1f s on %d thread(s); wrote %s/{metrics.csv,summary.json,report.md}%s\n",
                dumps.size(), res.formats.size(), (long long)total, res.seconds, threads, out_dir.c_str(),
                plots.empty() ? " (no plots)" : " and plots");
    return 0;
  });
}

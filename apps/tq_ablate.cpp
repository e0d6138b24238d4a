// tq-ablate: per-layer, per-head quality of KV formats on real Q/K/V dumps.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/app.h"
#include "tq/ablation.h"
#include "tq/ablation_report.h"
#include "tq/ablation_run.h"
#include "tq/error.h"
#include "tq/format.h"

namespace {

// experiments/plot_ablation.py: $TQ_PLOT_SCRIPT, else beside the build tree
// (<executable dir>/../experiments: build/ sits in the repository root).
// Empty when neither exists: the report then has no plots.
std::string plot_script() {
  if (const char* env = std::getenv("TQ_PLOT_SCRIPT"); env && *env) return env;
  const std::string dir = tq::executable_dir();
  if (dir.empty()) return "";
  const std::string beside = dir + "/../experiments/plot_ablation.py";
  return ::access(beside.c_str(), R_OK) == 0 ? beside : "";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs the plot script on dir; returns the PNG names it wrote (empty, with a
// note on stderr, when python3/matplotlib are missing).
std::vector<std::string> draw_plots(const std::string& dir) {
  const std::string script = plot_script();
  if (script.empty()) {
    std::fprintf(stderr, "tq-ablate: plots skipped (experiments/plot_ablation.py not found beside the executable; set TQ_PLOT_SCRIPT)\n");
    return {};
  }
  const std::string cmd = "python3 " + shell_quote(script) + " " + shell_quote(dir) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::vector<std::string> out;
  std::string log;
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    log += s + "\n";
    if (s.size() > 4 && s.compare(s.size() - 4, 4, ".png") == 0 && s.find(' ') == std::string::npos) out.push_back(s);
  }
  if (::pclose(p) != 0) {
    std::fprintf(stderr, "tq-ablate: plots skipped (python3 with matplotlib needed; run scripts/setup.sh):\n%s", log.c_str());
    out.clear();
  }
  return out;
}

// Returns whether it created the directory.
bool make_output_dir(const std::string& dir) {
  const bool created = ::mkdir(dir.c_str(), 0755) == 0;
  struct stat st{};
  TQ_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "--out '{}' is not a directory", dir);
  return created;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tq-ablate: per-layer, per-head quality of KV formats on real KV dumps"};
  tq::AblationConfig cfg;
  cfg.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::string out_dir = "ablation";
  bool list_formats = false, json = false, no_plots = false;
  int list_head_dim = 128;
  app.add_option("--dump", cfg.dumps, "KV dump (HDF5, tq-dump schema); repeatable");
  app.add_option("--format", cfg.formats, "formats or specs (repeatable; 'all' = every registered preset)")->capture_default_str();
  app.add_option("--study", cfg.studies, "built-in studies: presets qjl norm rotation codebook kv-bits all (repeatable)");
  app.add_option("--layers", cfg.layers, "layers to evaluate, e.g. 0,1,28-29 (default: all in the dump)");
  app.add_option("--out", out_dir, "output directory (metrics.csv, summary.json, report.md, PNGs)")->capture_default_str();
  app.add_option("--topk", cfg.topk, "k of the top-k agreement")->capture_default_str();
  app.add_option("--threads", cfg.threads, "worker threads (layers in parallel)")->capture_default_str();
  app.add_flag("--no-plots", no_plots, "skip the matplotlib plots");
  app.add_flag("--list-formats", list_formats, "list registered formats and their sizes");
  app.add_option("--head-dim", list_head_dim, "head_dim for --list-formats")->capture_default_str();
  app.add_flag("--json", json, "with --list-formats: JSON");

  return tq::run_tool("tq-ablate", app, argc, argv, [&]() -> int {
    if (list_formats) {
      std::fputs(json ? (tq::dump_json(tq::list_formats_json(list_head_dim), 2) + "\n").c_str() : tq::list_formats_text(list_head_dim).c_str(), stdout);
      return 0;
    }
    cfg.command = "tq-ablate";
    for (int i = 1; i < argc; ++i) cfg.command += std::string(" ") + argv[i];
    tq::AblationPlan plan = tq::plan_ablation(cfg);  // every input checked before anything is written
    const bool created = make_output_dir(out_dir);
    const int64_t total = plan.total_layers();
    tq::Progress progress("tq-ablate", total);
    tq::AblationResults res;
    try {  // a layer's data is read (and checked: finite values) only here
      res = tq::run_ablation(std::move(plan), [&](int64_t done, int64_t) { progress.update(done); });
    } catch (...) {
      if (created) ::rmdir(out_dir.c_str());  // nothing is written before the run ends
      throw;
    }
    progress.finish();

    std::string csv = tq::metrics_csv_header() + "\n";
    for (const auto& r : res.rows) csv += tq::metrics_csv_row(r) + "\n";
    tq::write_output(out_dir + "/metrics.csv", csv);
    tq::write_output(out_dir + "/summary.json", tq::dump_json(tq::ablation_summary_json(res), 1) + "\n");
    const std::vector<std::string> plots = no_plots ? std::vector<std::string>{} : draw_plots(out_dir);
    tq::write_output(out_dir + "/report.md", tq::ablation_report_markdown(res, plots));
    std::fputs(tq::ablation_summary_table(res).c_str(), stdout);
    std::printf("\ntq-ablate: %zu dump(s), %zu format runs, %lld layer(s) in %.1f s on %d thread(s); wrote %s/{metrics.csv,summary.json,report.md}%s\n",
                res.dumps.size(), res.formats.size(), (long long)total, res.seconds, res.threads, out_dir.c_str(),
                plots.empty() ? " (no plots)" : " and plots");
    return 0;
  });
}

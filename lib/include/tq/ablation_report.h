// Summaries of tq-ablate results: per format (overall), per layer, per
// head_dim, the first/last-layer effect; as an aligned table, summary.json and
// a Markdown report (plots are drawn by experiments/plot_ablation.py from
// metrics.csv and summary.json).
#pragma once

#include <string>
#include <vector>

#include "tq/ablation.h"
#include "tq/json.h"

namespace tq {

struct AblationDumpInfo {
  std::string name;  // short label used in CSV rows
  std::string path, model, arch;
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_tokens = 0;
};
// summary.json "dumps": {name, path, model, arch, n_layers, n_heads, n_kv_heads, head_dim, n_tokens}
void to_json(Json& j, const AblationDumpInfo& d);

struct AblationFormatInfo {
  std::string name, study;  // study: presets | qjl | norm | rotation | codebook | kv-bits | user
  int head_dim = 0;
  size_t key_bytes = 0, value_bytes = 0, slot_bytes = 0;
  double bits_per_value = 0;
  int64_t eval_from = 0;
};
// {format, study, head_dim, key_bytes, value_bytes, slot_bytes, bits_per_value, eval_from}
void to_json(Json& j, const AblationFormatInfo& f);

struct AblationResults {
  std::string command;
  std::vector<AblationDumpInfo> dumps;
  // formats[i] belongs to dumps[format_dump[i]]
  std::vector<AblationFormatInfo> formats;
  std::vector<int> format_dump;
  std::vector<HeadMetrics> rows;  // every (dump, format, layer, kv head)
  double seconds = 0;
  int threads = 1;
};

Json ablation_summary_json(const AblationResults& r);
std::string ablation_summary_table(const AblationResults& r);
std::string ablation_report_markdown(const AblationResults& r, const std::vector<std::string>& plots);

}  // namespace tq

#include "tq/ablation_run.h"

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "tq/ablation.h"
#include "tq/error.h"
#include "tq/layer_list.h"
#include "tq/parallel.h"

namespace tq {

int64_t AblationPlan::total_layers() const {
  int64_t n = 0;
  for (const auto& s : layers) n += int64_t(s.size());
  return n;
}

namespace {

void set_sizes(AblationFormatInfo& fi, const KvFormat& f) {
  fi.key_bytes = f.key_bytes();
  fi.value_bytes = f.value_bytes();
  fi.slot_bytes = f.slot_bytes();
  fi.bits_per_value = f.bits_per_value();
}

}  // namespace

AblationPlan plan_ablation(const AblationConfig& config) {
  AblationPlan plan;
  plan.started = std::chrono::steady_clock::now();
  TQ_CHECK(!config.dumps.empty(), "no --dump given");
  TQ_CHECK(config.topk >= 1, "--topk {} must be ≥ 1", config.topk);
  TQ_CHECK(config.threads >= 1 && config.threads <= 256, "--threads {} out of range", config.threads);
  plan.config = config;
  AblationResults& res = plan.results;
  res.threads = config.threads;
  res.command = config.command;

  // Every spec is built once per head_dim and shared by the dumps that have it.
  std::map<std::pair<std::string, int>, KvFormat> built;
  auto build = [&](const std::string& spec, int head_dim) -> const KvFormat& {
    const auto key = std::make_pair(spec, head_dim);
    auto it = built.find(key);
    if (it == built.end()) it = built.emplace(key, make_format(spec, head_dim)).first;
    return it->second;
  };

  for (size_t di = 0; di < config.dumps.size(); ++di) {
    const std::string& path = config.dumps[di];
    plan.dumps.push_back(KvDump::open(path));
    const KvDump& dump = plan.dumps.back();
    const auto& h = dump.header();
    AblationDumpInfo info;
    info.path = path;
    info.name = dump_label(path, di);
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

    plan.layers.push_back(config.layers.empty() ? h.layers : parse_layer_list(config.layers, h.n_layers));
    for (int l : plan.layers.back()) TQ_CHECK(dump.has_layer(l), "{}: layer {} is not in the dump", path, l);

    plan.studies.push_back(plan_formats(config.formats, config.studies, h.head_dim, h.n_tokens));
    plan.formats.emplace_back();
    for (const auto& sf : plan.studies.back()) {
      AblationFormatInfo fi;
      fi.name = sf.name;
      fi.study = sf.study;
      fi.head_dim = h.head_dim;
      fi.eval_from = sf.eval_from;
      KvFormat f;
      if (sf.needs_empirical_fit) {
        // Built by run_ablation after the fit; check the spec with a stand-in codebook.
        build(study_spec_with_codebook(sf, "gauss"), h.head_dim);
      } else {
        f = build(sf.spec, h.head_dim);
        f.name = sf.name;
        set_sizes(fi, f);
      }
      plan.formats.back().push_back(std::move(f));
      res.formats.push_back(fi);
      res.format_dump.push_back(int(di));
    }
  }
  return plan;
}

AblationResults run_ablation(AblationPlan plan, const AblationProgress& progress) {
  AblationResults& res = plan.results;
  const int64_t total = plan.total_layers();
  int64_t done = 0;
  std::mutex io_mu, progress_mu;
  size_t first_format = 0;  // index in res.formats of the dump's first format
  for (size_t di = 0; di < plan.dumps.size(); ++di) {
    const KvDump& dump = plan.dumps[di];
    const auto& h = dump.header();
    const auto& sel = plan.layers[di];
    const auto& studies = plan.studies[di];
    auto& fmts = plan.formats[di];

    // Empirical codebooks: fitted on the first half of the tokens of the selected layers.
    CodebookSource empirical;
    for (size_t f = 0; f < fmts.size(); ++f) {
      if (!studies[f].needs_empirical_fit) continue;
      if (!empirical)
        empirical = empirical_codebooks(fit_empirical_samples(dump, sel, h.n_tokens / 2),
                                        "empirical:" + res.dumps[di].name);
      fmts[f] = make_format(studies[f].spec, h.head_dim, FormatOverrides{empirical});
      fmts[f].name = studies[f].name;
      set_sizes(res.formats[first_format + f], fmts[f]);
    }

    // Formats grouped by their evaluation range (in order of first appearance).
    struct Group {
      AblationOptions opt;
      std::vector<KvFormat> formats;
      std::vector<size_t> index;  // into fmts
    };
    std::vector<Group> groups;
    for (size_t f = 0; f < fmts.size(); ++f) {
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const Group& x) { return x.opt.eval_from == studies[f].eval_from; });
      if (g == groups.end()) {
        groups.emplace_back();
        g = groups.end() - 1;
        g->opt.topk = plan.config.topk;
        g->opt.eval_from = studies[f].eval_from;
      }
      g->formats.push_back(fmts[f]);
      g->index.push_back(f);
    }

    // Layers in parallel: each worker reads its layer (HDF5 reads serialised) and ablates it.
    std::vector<std::vector<HeadMetrics>> per_layer(sel.size());
    std::exception_ptr failure;
    bool failed = false;
    parallel_for(plan.config.threads, int64_t(sel.size()), [&](int64_t li) {
      {
        std::lock_guard<std::mutex> lock(progress_mu);
        if (failed) return;
      }
      try {
        KvDumpLayer data;
        {
          std::lock_guard<std::mutex> lock(io_mu);
          data = dump.read_layer(sel[size_t(li)]);
        }
        AblationLayer L;
        L.layer = sel[size_t(li)];
        L.T = h.n_tokens;
        L.n_heads = h.n_heads;
        L.n_kv_heads = h.n_kv_heads;
        L.head_dim = h.head_dim;
        L.sliding_window = int(data.sliding_window);
        L.attn_scale = float(data.attn_scale);
        L.q = data.q.data();
        L.k = data.k.data();
        L.v = data.v.data();
        auto& out = per_layer[size_t(li)];
        for (const Group& g : groups) {
          auto rows = ablate_layer(L, g.formats, g.opt);
          for (size_t r = 0; r < rows.size(); ++r) {
            rows[r].dump = res.dumps[di].name;
            rows[r].study = studies[g.index[r / size_t(h.n_kv_heads)]].study;
            out.push_back(std::move(rows[r]));
          }
        }
        std::lock_guard<std::mutex> lock(progress_mu);
        ++done;
        if (progress) progress(done, total);
      } catch (...) {
        std::lock_guard<std::mutex> lock(progress_mu);
        if (!failure) failure = std::current_exception();
        failed = true;
      }
    });
    if (failure) std::rethrow_exception(failure);
    for (auto& rows : per_layer) res.rows.insert(res.rows.end(), rows.begin(), rows.end());
    first_format += fmts.size();
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - plan.started).count();
  return std::move(plan.results);
}

AblationResults run_ablation(const AblationConfig& config, const AblationProgress& progress) {
  return run_ablation(plan_ablation(config), progress);
}

}  // namespace tq

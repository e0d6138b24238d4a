#include "tq/ablation_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "tq/table.h"

namespace tq {

namespace {

struct Agg {  // means over heads (and layers)
  double key_nmse = 0, value_nmse = 0, ip_bias = 0, ip_slope = 0, ip_var = 0, ip_var_ratio = 0, logit_rmse = 0, kl = 0,
         top1 = 0, topk = 0, out_rel_err = 0;
  int n = 0;
  void add(const HeadMetrics& m) {
    key_nmse += m.key_nmse;
    value_nmse += m.value_nmse;
    ip_bias += m.ip_bias;
    ip_slope += m.ip_slope;
    ip_var += m.ip_var;
    ip_var_ratio += m.ip_var_ratio;
    logit_rmse += m.logit_rmse;
    kl += m.kl;
    top1 += m.top1;
    topk += m.topk;
    out_rel_err += m.out_rel_err;
    ++n;
  }
  Agg mean() const {
    Agg a = *this;
    const double k = n ? 1.0 / n : 0.0;
    for (double* p : {&a.key_nmse, &a.value_nmse, &a.ip_bias, &a.ip_slope, &a.ip_var, &a.ip_var_ratio, &a.logit_rmse, &a.kl, &a.top1,
                      &a.topk, &a.out_rel_err})
      *p *= k;
    return a;
  }
};

void to_json(Json& j, const Agg& a) {
  j = Json{{"key_nmse", a.key_nmse},     {"value_nmse", a.value_nmse}, {"ip_bias", a.ip_bias},
           {"ip_slope", a.ip_slope},     {"ip_var", a.ip_var},         {"ip_var_ratio", a.ip_var_ratio},
           {"logit_rmse", a.logit_rmse}, {"kl", a.kl},                 {"top1", a.top1},
           {"topk", a.topk},             {"out_rel_err", a.out_rel_err}};
}

HeadMetrics as_metrics(const Agg& a, int layer) {
  HeadMetrics m;
  m.layer = layer;
  m.key_nmse = a.key_nmse;
  m.value_nmse = a.value_nmse;
  m.ip_bias = a.ip_bias;
  m.ip_slope = a.ip_slope;
  m.ip_var = a.ip_var;
  m.ip_var_ratio = a.ip_var_ratio;
  m.logit_rmse = a.logit_rmse;
  m.kl = a.kl;
  m.top1 = a.top1;
  m.topk = a.topk;
  m.out_rel_err = a.out_rel_err;
  return m;
}

// Rows of format i (dump d, name), grouped.
struct FormatView {
  Agg overall;
  std::map<int, Agg> per_layer;
  Agg first2, last2, middle;
};

std::vector<FormatView> views(const AblationResults& r) {
  std::vector<FormatView> v(r.formats.size());
  std::map<std::tuple<int, std::string, std::string>, size_t> index;
  for (size_t i = 0; i < r.formats.size(); ++i) index[{r.format_dump[i], r.formats[i].name, r.formats[i].study}] = i;
  std::map<std::string, int> dump_of;
  for (size_t d = 0; d < r.dumps.size(); ++d) dump_of[r.dumps[d].name] = int(d);
  for (const auto& m : r.rows) {
    const int d = dump_of[m.dump];
    auto it = index.find({d, m.format, m.study});
    if (it == index.end()) continue;
    FormatView& fv = v[it->second];
    fv.overall.add(m);
    fv.per_layer[m.layer].add(m);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const int nl = r.dumps[size_t(r.format_dump[i])].n_layers;
    for (const auto& [layer, a] : v[i].per_layer) {
      Agg& target = layer < 2 ? v[i].first2 : layer >= nl - 2 ? v[i].last2 : v[i].middle;
      const Agg m = a.mean();
      target.add(as_metrics(m, layer));
    }
  }
  return v;
}

std::string sci(double x) { return fmt::format("{:.3e}", x); }
std::string fix(double x, int p = 4) { return fmt::format("{:.{}f}", x, p); }

}  // namespace

void to_json(Json& j, const AblationDumpInfo& d) {
  j = Json{{"name", d.name},
           {"path", d.path},
           {"model", d.model},
           {"arch", d.arch},
           {"n_layers", d.n_layers},
           {"n_heads", d.n_heads},
           {"n_kv_heads", d.n_kv_heads},
           {"head_dim", d.head_dim},
           {"n_tokens", d.n_tokens}};
}

void to_json(Json& j, const AblationFormatInfo& f) {
  j = Json{{"format", f.name},
           {"study", f.study},
           {"head_dim", f.head_dim},
           {"key_bytes", f.key_bytes},
           {"value_bytes", f.value_bytes},
           {"slot_bytes", f.slot_bytes},
           {"bits_per_value", f.bits_per_value},
           {"eval_from", f.eval_from}};
}

Json ablation_summary_json(const AblationResults& r) {
  Json j = Json{{"schema", "tqkit-ablation/1"}, {"command", r.command}, {"seconds", r.seconds}, {"threads", r.threads},
                {"dumps", r.dumps}};
  const auto v = views(r);
  Json formats = Json::array();
  for (size_t i = 0; i < r.formats.size(); ++i) {
    Json o = Json{{"dump", r.dumps[size_t(r.format_dump[i])].name}};
    o.update(Json(r.formats[i]));  // format, study, head_dim, … after "dump"
    o["overall"] = v[i].overall.mean();
    o["first2_layers"] = v[i].first2.mean();
    o["middle_layers"] = v[i].middle.mean();
    o["last2_layers"] = v[i].last2.mean();
    Json layers = Json::array();
    for (const auto& [layer, a] : v[i].per_layer) {
      Json l = a.mean();
      l["layer"] = layer;
      layers.push_back(std::move(l));
    }
    o["per_layer"] = std::move(layers);
    formats.push_back(std::move(o));
  }
  j["formats"] = std::move(formats);
  // Per head_dim: mean over dumps of that head_dim, per format name.
  std::map<std::pair<int, std::string>, Agg> by_dim;
  for (size_t i = 0; i < r.formats.size(); ++i) {
    const Agg m = v[i].overall.mean();
    by_dim[{r.formats[i].head_dim, r.formats[i].name + " (" + r.formats[i].study + ")"}].add(as_metrics(m, 0));
  }
  Json per_dim = Json::array();
  for (const auto& [key, a] : by_dim) {
    Json o = a.mean();
    o["head_dim"] = key.first;
    o["format"] = key.second;
    per_dim.push_back(std::move(o));
  }
  j["per_head_dim"] = std::move(per_dim);
  return j;
}

std::string ablation_summary_table(const AblationResults& r) {
  const auto v = views(r);
  std::string out;
  for (size_t d = 0; d < r.dumps.size(); ++d) {
    const auto& dump = r.dumps[d];
    out += fmt::format("\n{} ({}, head_dim {}, {} layers, {} tokens) — means over layers and KV heads\n", dump.name,
                       dump.model, dump.head_dim, dump.n_layers, dump.n_tokens);
    Table t({"format", "study", "bits/val", "key_nmse", "val_nmse", "ip_slope", "ip_var/pred", "logit_rmse", "KL",
             "top1", "top8", "out_err", "out_err first2/mid/last2"});
    for (size_t i = 0; i < r.formats.size(); ++i) {
      if (r.format_dump[i] != int(d)) continue;
      const Agg a = v[i].overall.mean();
      t.add({r.formats[i].name, r.formats[i].study, fix(r.formats[i].bits_per_value, 3), sci(a.key_nmse), sci(a.value_nmse),
             fix(a.ip_slope, 4), fix(a.ip_var_ratio, 3), sci(a.logit_rmse), sci(a.kl), fix(a.top1), fix(a.topk),
             sci(a.out_rel_err),
             fmt::format("{:.2e}/{:.2e}/{:.2e}", v[i].first2.mean().out_rel_err, v[i].middle.mean().out_rel_err,
                         v[i].last2.mean().out_rel_err)});
    }
    out += t.text();
  }
  return out;
}

std::string ablation_report_markdown(const AblationResults& r, const std::vector<std::string>& plots) {
  const auto v = views(r);
  std::string md = "# tq-ablate report\n\n";
  md += fmt::format("Command:\n\n```\n{}\n```\n\n", r.command);
  md += fmt::format("Wall time {:.1f} s on {} thread(s).\n\n", r.seconds, r.threads);
  md += "Metrics (per KV head, query group pooled; means over layers and heads): key/value NMSE; inner-product "
        "error q·k̂ − q·k (additive bias; slope Σ(q·k̂)(q·k)/Σ(q·k)², the multiplicative bias: MSE quantizers shrink, < 1; and the error variance over the prediction ‖q‖²‖k−k̂‖²/d); RMS of the scaled logit "
        "error; KL(p‖p̂) of the attention weights (nats); top-1 and top-8 agreement; attention-output relative "
        "error ‖o−ô‖/‖o‖. Columns first2/mid/last2 split the output error by layer position.\n";
  for (size_t d = 0; d < r.dumps.size(); ++d) {
    const auto& dump = r.dumps[d];
    md += fmt::format("\n## {} — {} ({}), head_dim {}, {} layers, {} tokens\n\n", dump.name, dump.model, dump.arch,
                      dump.head_dim, dump.n_layers, dump.n_tokens);
    md += fmt::format("Dump: `{}`\n\n", dump.path);
    std::vector<std::string> studies;
    for (size_t i = 0; i < r.formats.size(); ++i)
      if (r.format_dump[i] == int(d) && std::find(studies.begin(), studies.end(), r.formats[i].study) == studies.end())
        studies.push_back(r.formats[i].study);
    for (const auto& study : studies) {
      md += fmt::format("\n### {}\n\n", study);
      if (study == "codebook") md += "Empirical codebooks are fitted on the first half of the tokens; every row of this study is evaluated on the second half only.\n\n";
      Table t({"format", "bits/val", "slot B", "key NMSE", "value NMSE", "ip bias", "ip slope", "ip var/pred", "logit RMSE", "KL",
               "top-1", "top-8", "out err", "out err first2 / mid / last2"});
      for (size_t i = 0; i < r.formats.size(); ++i) {
        if (r.format_dump[i] != int(d) || r.formats[i].study != study) continue;
        const Agg a = v[i].overall.mean();
        t.add({"`" + r.formats[i].name + "`", fix(r.formats[i].bits_per_value, 3), std::to_string(r.formats[i].slot_bytes),
               sci(a.key_nmse), sci(a.value_nmse), sci(a.ip_bias), fix(a.ip_slope, 4), fix(a.ip_var_ratio, 3), sci(a.logit_rmse), sci(a.kl),
               fix(a.top1), fix(a.topk), sci(a.out_rel_err),
               fmt::format("{:.2e} / {:.2e} / {:.2e}", v[i].first2.mean().out_rel_err, v[i].middle.mean().out_rel_err,
                           v[i].last2.mean().out_rel_err)});
      }
      md += t.markdown();
    }
  }
  if (!plots.empty()) {
    md += "\n## Plots\n\n";
    for (const auto& p : plots) md += fmt::format("![{}]({})\n\n", p, p);
  }
  return md;
}

}  // namespace tq

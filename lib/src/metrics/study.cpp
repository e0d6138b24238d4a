#include "tq/study.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "tq/error.h"
#include "tq/format.h"
#include "tq/kv_dump.h"
#include "tq/rotation.h"

namespace tq {

std::vector<StudyFormat> plan_formats(const std::vector<std::string>& formats, const std::vector<std::string>& studies,
                                      int head_dim, int64_t n_tokens) {
  std::vector<StudyFormat> out;
  auto add = [&](const std::string& name, const std::string& study, int64_t from = 0, bool fit = false) {
    for (const auto& f : out)
      if (f.name == name && f.study == study) return;
    out.push_back({name, name, study, from, fit});
  };
  for (const auto& n : expand_format_names(formats)) {
    bool preset = false;
    for (const auto& e : registered_formats()) preset = preset || n == e.name;
    add(n, preset ? "presets" : "user");
  }
  std::vector<std::string> list;
  for (const auto& s : studies) {
    if (s == "all") list.insert(list.end(), {"qjl", "norm", "rotation", "codebook", "kv-bits"});
    else list.push_back(s);
  }
  const bool pow2 = is_power_of_two(head_dim);
  for (const auto& s : list) {
    if (s == "presets") {
      for (const auto& e : registered_formats()) add(e.name, "presets");
    } else if (s == "qjl") {
      for (int b : {2, 3, 4}) { add(fmt::format("k=mse{}", b), s); add(fmt::format("k=prod{}", b), s); }
    } else if (s == "norm") {
      for (int b : {2, 3, 4}) { add(fmt::format("k=mse{}", b), s); add(fmt::format("k=mse{}+nc", b), s); }
    } else if (s == "rotation") {
      add("k=mse3+nc,rot=none", s);
      if (pow2) { add("k=mse3+nc,rot=hadamard", s); add("k=mse3+nc,rot=rht:1", s); }
      add("k=mse3+nc,rot=haar:1", s);
    } else if (s == "codebook") {
      for (int b : {3, 4}) {
        add(fmt::format("k=mse{}+nc,cb=gauss", b), s, n_tokens / 2);
        add(fmt::format("k=mse{}+nc,cb=sphere", b), s, n_tokens / 2);
        add(fmt::format("k=mse{}+nc,cb=empirical", b), s, n_tokens / 2, true);
      }
    } else if (s == "kv-bits") {
      for (int kb : {2, 3, 4})
        for (int vb : {2, 3, 4}) add(fmt::format("k=mse{}+nc,v=u{}", kb, vb), s);
    } else {
      TQ_THROW("unknown study '{}' (expected presets, qjl, norm, rotation, codebook, kv-bits or all)", s);
    }
  }
  TQ_CHECK(!out.empty(), "no formats to evaluate");
  TQ_CHECK(n_tokens >= 4 || std::none_of(out.begin(), out.end(), [](const StudyFormat& f) { return f.eval_from > 0; }),
           "the codebook study needs at least 4 tokens");
  return out;
}

std::string study_spec_with_codebook(const StudyFormat& f, const std::string& cb) {
  std::string s = f.spec;
  const std::string key = "cb=empirical";
  const auto p = s.find(key);
  if (p != std::string::npos) s.replace(p, key.size(), "cb=" + cb);
  return s;
}

std::vector<double> fit_empirical_samples(const KvDump& dump, const std::vector<int>& layers, int64_t n_first) {
  const auto& h = dump.header();
  const int d = h.head_dim;
  const auto rot = make_rotation("auto", d);
  const int64_t rows = int64_t(layers.size()) * h.n_kv_heads * n_first;
  const int64_t stride = std::max<int64_t>(1, rows * d / 1000000);
  std::vector<double> out;
  std::vector<float> y(static_cast<size_t>(d));
  char text[32];
  int64_t r = 0;
  for (int l : layers) {
    const KvDumpLayer data = dump.read_layer(l);
    for (int64_t t = 0; t < n_first; ++t)
      for (int kh = 0; kh < h.n_kv_heads; ++kh, ++r) {
        if (r % stride) continue;
        const float* k = &data.k[(size_t(t) * h.n_kv_heads + kh) * d];
        double n2 = 0;
        for (int j = 0; j < d; ++j) n2 += double(k[j]) * k[j];
        if (n2 == 0) continue;
        const float inv = float(1.0 / std::sqrt(n2));
        for (int j = 0; j < d; ++j) y[size_t(j)] = k[j] * inv;
        rot->apply(y.data());
        for (int j = 0; j < d; ++j) {
          *fmt::format_to_n(text, sizeof text - 1, "{:.9g}", y[size_t(j)]).out = '\0';
          out.push_back(std::strtod(text, nullptr));
        }
      }
  }
  return out;
}

std::string dump_label(const std::string& path, size_t index) {
  std::string stem = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const auto dot = stem.rfind('.');
  if (dot != std::string::npos && dot > 0) stem.resize(dot);
  for (auto& c : stem)
    if (c == ',' || c == '"' || c == ' ') c = '_';
  (void)index;
  return stem;
}

}  // namespace tq

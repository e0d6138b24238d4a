// tq-ablate's built-in studies and helpers: which formats a study runs, the
// empirical-codebook fit, dump labels.
//
//   presets   every registered format (what --format all means)
//   qjl       keys only, equal bits: mse<b> vs prod<b>, b = 2, 3, 4
//   norm      keys only: mse<b> (raw norm) vs mse<b>+nc, b = 2, 3, 4
//   rotation  keys only, mse3+nc with rot = none | hadamard | rht:1 | haar:1
//   codebook  keys only, mse<b>+nc with cb = gauss | sphere | empirical
//             (b = 3, 4); the empirical table is fitted on the rotated
//             coordinates of the first half of the tokens and every row of the
//             study is evaluated on the second half (queries and keys)
//   kv-bits   K bits × V bits: mse<kb>+nc keys, u<vb> values, kb, vb ∈ {2,3,4}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tq {

class KvDump;

struct StudyFormat {
  std::string name;    // label in results (the spec, or the preset name)
  std::string spec;    // what make_format gets (for empirical: see below)
  std::string study;
  int64_t eval_from = 0;
  // spec says cb=empirical: built with the fitted table as the codebook
  // (FormatOverrides::codebook, from fit_empirical_samples)
  bool needs_empirical_fit = false;
};

std::vector<StudyFormat> plan_formats(const std::vector<std::string>& formats, const std::vector<std::string>& studies,
                                      int head_dim, int64_t n_tokens);
std::string study_spec_with_codebook(const StudyFormat& f, const std::string& cb);

// Rotated coordinates y = R(k/‖k‖) (R = rot=auto) of the keys of tokens
// [0, n_first) over the given layers and every KV head, at most 1M values
// (evenly strided), each rounded to 9 significant decimal digits (the
// precision of a sample file for cb=empirical:FILE, so that a fit on these
// samples and one on such a file written from them agree exactly).
std::vector<double> fit_empirical_samples(const KvDump& dump, const std::vector<int>& layers, int64_t n_first);

// Short label for a dump in tables: the file stem (tq-ablate makes clashing
// labels unique by appending the dump's index).
std::string dump_label(const std::string& path, size_t index);

}  // namespace tq

// Codebook presentation: the named solvers behind `--dist`, comparisons, and
// text / JSON / CSV / C++-header renderings (what tq-codebook prints).
#pragma once

#include <string>
#include <vector>

#include "tq/codebook.h"
#include "tq/json.h"

namespace tq {

// "gauss" | "sphere" | "uniform" (best uniform grid for N(0,1/d)) | "vllm" |
// "closed" | "empirical:FILE" (numbers separated by commas/whitespace).
Codebook solve_codebook(const std::string& dist, int d, int bits);

struct CodebookComparison {
  Codebook table, optimum;
  double ratio = 0;  // table distortion / optimum distortion
};
CodebookComparison compare_codebook(const std::vector<double>& table, Distribution dist, int d, int bits);

// Strict list of finite numbers ("0.1,0.2" or whitespace separated); errors
// name `what` and the 1-based position.
std::vector<double> parse_number_list(const std::string& text, const std::string& what);

// {source, d, bits, centroids, midpoints, distortion, entropy_bits, iterations}
void to_json(Json& j, const Codebook& cb);
std::string codebook_text(const Codebook& cb);
std::string codebook_csv(const Codebook& cb);
std::string codebook_cpp_header(const Codebook& cb, const std::string& command);
// The table's codebook, then optimal_distortion, optimal_centroids, ratio.
void to_json(Json& j, const CodebookComparison& c);
std::string comparison_text(const CodebookComparison& c);
Json distortion_table_json(int d);
std::string distortion_table_text(int d);

// Paper bounds (TurboQuant Thm. 1/3): upper √3·π/2·4^−b, lower 4^−b.
double paper_upper_bound(int bits);
double paper_lower_bound(int bits);

}  // namespace tq

// tq-codebook: solve, compare, tabulate and export scalar codebooks.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/app.h"
#include "tq/codebook.h"
#include "tq/codebook_io.h"
#include "tq/error.h"
#include "tq/json.h"
#include "tq/table.h"

int main(int argc, char** argv) {
  CLI::App app{"tq-codebook: Lloyd-Max codebooks for rotated unit-vector coordinates"};
  app.require_subcommand(1);

  std::string dist = "gauss", table_str, format = "json";
  int d = 128, bits = 4;
  bool json = false;

  auto* solve = app.add_subcommand("solve", "solve a codebook and print it");
  solve->add_option("--dist", dist,
                    "gauss | sphere | uniform | vllm | closed | empirical:FILE (one value per line or comma-separated)")
      ->capture_default_str();
  solve->add_option("--d", d, "dimension (head_dim)")->capture_default_str();
  solve->add_option("--bits", bits, "bits per coordinate, 1..8")->capture_default_str();
  solve->add_flag("--json", json, "machine-readable output");

  auto* compare = app.add_subcommand("compare", "distortion of a user table against the optimum of the same size");
  compare->add_option("--table", table_str, "ascending values: the positive half of a symmetric table, or all 2^bits")
      ->required();
  compare->add_option("--dist", dist, "gauss | sphere")->capture_default_str();
  compare->add_option("--d", d, "dimension")->capture_default_str();
  compare->add_option("--bits", bits, "bits")->capture_default_str();
  compare->add_flag("--json", json, "machine-readable output");

  auto* table = app.add_subcommand("table", "distortion for 1..4 bits next to the paper's bounds");
  table->add_option("--d", d, "dimension")->capture_default_str();
  table->add_flag("--json", json, "machine-readable output");

  auto* exp = app.add_subcommand("export", "write a codebook as json, csv or a C++ header");
  exp->add_option("--dist", dist, "as for solve")->capture_default_str();
  exp->add_option("--d", d, "dimension")->capture_default_str();
  exp->add_option("--bits", bits, "bits")->capture_default_str();
  exp->add_option("--format", format, "json | csv | cpp")->capture_default_str();

  return tq::run_tool("tq-codebook", app, argc, argv, [&]() -> int {
    std::string out;
    if (*solve) {
      const tq::Codebook cb = tq::solve_codebook(dist, d, bits);
      out = json ? tq::dump_json(cb, 2) + "\n" : tq::codebook_text(cb);
    } else if (*compare) {
      const auto values = tq::parse_number_list(table_str, "--table");
      const tq::CodebookComparison c = tq::compare_codebook(values, tq::parse_distribution(dist), d, bits);
      out = json ? tq::dump_json(c, 2) + "\n" : tq::comparison_text(c);
    } else if (*table) {
      out = json ? tq::dump_json(tq::distortion_table_json(d), 2) + "\n" : tq::distortion_table_text(d);
    } else if (*exp) {
      const tq::Codebook cb = tq::solve_codebook(dist, d, bits);
      if (format == "json") out = tq::dump_json(cb, 2) + "\n";
      else if (format == "csv") out = tq::codebook_csv(cb);
      else if (format == "cpp") out = tq::codebook_cpp_header(cb, fmt::format("tq-codebook export --dist {} --d {} --bits {} --format cpp", dist, d, bits));
      else TQ_THROW("unknown export format '{}' (expected json, csv or cpp)", format);
    }
    std::fputs(out.c_str(), stdout);
    return 0;
  });
}

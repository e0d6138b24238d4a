// Layer selections on the command line: "--layers 0,1,28-29",
// "--skip-layers first2,last2".
#pragma once

#include <string>
#include <vector>

namespace tq {

// Parses a comma list of items: N, A-B (inclusive), firstN, lastN, "all",
// "none" (alone). Returns the sorted, de-duplicated layer indices, each in
// [0, n_layers). Throws tq::Error naming `what` (e.g. "--layers") and the bad item.
std::vector<int> parse_layer_list(const std::string& spec, int n_layers, const std::string& what = "--layers");

// Checks the syntax only (before the layer count is known).
void check_layer_list_syntax(const std::string& spec, const std::string& what = "--layers");

}  // namespace tq

#include "tq/layer_list.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "tq/error.h"

namespace tq {

namespace {

// A non-negative decimal integer, or -1.
long parse_index(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  for (char c : s)
    if (c < '0' || c > '9') return -1;
  return std::strtol(s.c_str(), nullptr, 10);
}

// Returns the items as [lo, hi] ranges; n_layers < 0: syntax only.
std::vector<std::pair<long, long>> parse(const std::string& spec, int n_layers, const std::string& what) {
  TQ_CHECK(!spec.empty(), "{}: empty layer list", what);
  std::vector<std::pair<long, long>> out;
  if (spec == "all") {
    if (n_layers > 0) out.emplace_back(0, n_layers - 1);
    return out;
  }
  if (spec == "none") return out;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    TQ_CHECK(!item.empty(), "{}: empty item in '{}'", what, spec);
    long lo, hi;
    if (item.rfind("first", 0) == 0 || item.rfind("last", 0) == 0) {
      const bool first = item[0] == 'f';
      const long k = parse_index(item.substr(first ? 5 : 4));
      TQ_CHECK(k > 0, "{}: '{}' is not firstN or lastN with N ≥ 1", what, item);
      if (n_layers < 0) {
        lo = hi = 0;
      } else {
        TQ_CHECK(k <= n_layers, "{}: '{}' asks for more than the model's {} layers", what, item, n_layers);
        lo = first ? 0 : n_layers - k;
        hi = first ? k - 1 : n_layers - 1;
      }
    } else if (const size_t dash = item.find('-'); dash != std::string::npos) {
      lo = parse_index(item.substr(0, dash));
      hi = parse_index(item.substr(dash + 1));
      TQ_CHECK(lo >= 0 && hi >= 0, "{}: '{}' is not a layer range A-B", what, item);
      TQ_CHECK(lo <= hi, "{}: range '{}' is reversed", what, item);
    } else {
      lo = hi = parse_index(item);
      TQ_CHECK(lo >= 0, "{}: '{}' is not a layer index, range A-B, firstN or lastN", what, item);
    }
    if (n_layers >= 0)
      TQ_CHECK(hi < n_layers, "{}: layer {} is out of range (the model has {} layers: 0-{})", what, hi, n_layers,
               n_layers - 1);
    out.emplace_back(lo, hi);
  }
  return out;
}

}  // namespace

std::vector<int> parse_layer_list(const std::string& spec, int n_layers, const std::string& what) {
  TQ_CHECK(n_layers > 0, "{}: the model has no layers", what);
  std::vector<int> layers;
  for (const auto& [lo, hi] : parse(spec, n_layers, what))
    for (long l = lo; l <= hi; ++l) layers.push_back(int(l));
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

void check_layer_list_syntax(const std::string& spec, const std::string& what) { parse(spec, -1, what); }

}  // namespace tq

#include "tq/table.h"

#include <algorithm>
#include <cctype>

namespace tq {
namespace {
bool numeric(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!(std::isdigit((unsigned char)c) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E' || c == '%' ||
          c == 'x' || c == ' ' || c == 'n' || c == 'a' || c == 'i' || c == 'f'))
      return false;
  return std::isdigit((unsigned char)s[0]) || s[0] == '-' || s[0] == '+' || s == "nan" || s == "inf";
}
}  // namespace

std::string Table::text() const {
  std::vector<size_t> w(header_.size(), 0);
  for (size_t j = 0; j < header_.size(); ++j) w[j] = header_[j].size();
  for (const auto& r : rows_)
    for (size_t j = 0; j < r.size() && j < w.size(); ++j) w[j] = std::max(w[j], r[j].size());
  auto line = [&](const std::vector<std::string>& r, bool head) {
    std::string out;
    for (size_t j = 0; j < w.size(); ++j) {
      const std::string cell = j < r.size() ? r[j] : "";
      const size_t pad = w[j] - std::min(w[j], cell.size());
      if (j) out += "  ";
      if (!head && numeric(cell)) out += std::string(pad, ' ') + cell;
      else out += cell + (j + 1 < w.size() ? std::string(pad, ' ') : "");
    }
    return out + "\n";
  };
  std::string out = line(header_, true);
  size_t total = 0;
  for (size_t j = 0; j < w.size(); ++j) total += w[j] + (j ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (const auto& r : rows_) out += line(r, false);
  return out;
}

std::string Table::markdown() const {
  std::string out = "|";
  for (const auto& h : header_) out += " " + h + " |";
  out += "\n|";
  for (size_t j = 0; j < header_.size(); ++j) out += "---|";
  out += "\n";
  for (const auto& r : rows_) {
    out += "|";
    for (size_t j = 0; j < header_.size(); ++j) out += " " + (j < r.size() ? r[j] : std::string()) + " |";
    out += "\n";
  }
  return out;
}

}  // namespace tq

// Aligned text tables for people (and Markdown for reports).
#pragma once

#include <string>
#include <vector>

namespace tq {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  size_t rows() const { return rows_.size(); }
  std::string text() const;      // columns padded; text left-aligned, numbers right-aligned
  std::string markdown() const;  // GitHub table

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tq

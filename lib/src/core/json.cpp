#include "tq/json.h"

#include <fstream>
#include <sstream>

#include "tq/error.h"

namespace tq {

Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."; keep
    // what follows the bracketed id. e.byte counts the bytes read, the offending one included.
    std::string what = e.what();
    if (const auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    throw Error(fmt::format("{}: invalid JSON at byte {}: {}", where, e.byte > 0 ? e.byte - 1 : 0, what));
  }
}

std::string dump_json(const Json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TQ_CHECK(f.good(), "cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace tq

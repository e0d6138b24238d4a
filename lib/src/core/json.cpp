#include "tq/json.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tq/error.h"

namespace tq {

double Json::number() const {
  if (auto p = std::get_if<double>(&v_)) return *p;
  TQ_THROW("json: expected a number");
}
const std::string& Json::str() const {
  if (auto p = std::get_if<std::string>(&v_)) return *p;
  TQ_THROW("json: expected a string");
}
bool Json::boolean() const {
  if (auto p = std::get_if<bool>(&v_)) return *p;
  TQ_THROW("json: expected a boolean");
}
const Json::Array& Json::arr() const {
  if (auto p = std::get_if<Array>(&v_)) return *p;
  TQ_THROW("json: expected an array");
}
Json::Array& Json::arr() {
  if (auto p = std::get_if<Array>(&v_)) return *p;
  TQ_THROW("json: expected an array");
}
const Json::Object& Json::obj() const {
  if (auto p = std::get_if<Object>(&v_)) return *p;
  TQ_THROW("json: expected an object");
}
const Json& Json::operator[](const std::string& key) const {
  for (const auto& [k, v] : obj())
    if (k == key) return v;
  TQ_THROW("json: missing key '{}'", key);
}
const Json& Json::operator[](size_t i) const {
  const auto& a = arr();
  TQ_CHECK(i < a.size(), "json: index {} out of range (size {})", i, a.size());
  return a[i];
}
bool Json::contains(const std::string& key) const {
  if (!is_object()) return false;
  for (const auto& kv : obj())
    if (kv.first == key) return true;
  return false;
}
size_t Json::size() const {
  if (is_array()) return arr().size();
  if (is_object()) return obj().size();
  return 0;
}
Json& Json::set(const std::string& key, Json value) {
  auto* o = std::get_if<Object>(&v_);
  TQ_CHECK(o, "json: set on a non-object");
  for (auto& kv : *o)
    if (kv.first == key) { kv.second = std::move(value); return *this; }
  o->emplace_back(key, std::move(value));
  return *this;
}
Json& Json::push(Json value) {
  arr().push_back(std::move(value));
  return *this;
}

namespace {
void escape(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += char(c);
    }
  }
  out += '"';
}
void newline(std::string& out, int indent, int level) {
  if (indent < 0) return;
  out += '\n';
  out.append(size_t(indent * level), ' ');
}
}  // namespace

void Json::dump_to(std::string& out, int indent, int level) const {
  if (is_null()) { out += "null"; return; }
  if (auto b = std::get_if<bool>(&v_)) { out += *b ? "true" : "false"; return; }
  if (auto d = std::get_if<double>(&v_)) {
    if (!std::isfinite(*d)) { out += "null"; return; }  // JSON has no NaN/Inf
    if (*d == std::floor(*d) && std::fabs(*d) < 1e15) out += fmt::format("{}", (long long)*d);
    else out += fmt::format("{}", *d);
    return;
  }
  if (auto s = std::get_if<std::string>(&v_)) { escape(out, *s); return; }
  if (auto a = std::get_if<Array>(&v_)) {
    out += '[';
    // Arrays of numbers stay on one line: they are data rows, not structure.
    bool flat = true;
    for (const auto& x : *a) flat = flat && (x.is_number() || x.is_null());
    for (size_t i = 0; i < a->size(); ++i) {
      if (i) out += flat && indent >= 0 ? ", " : ",";
      if (!flat) newline(out, indent, level + 1);
      (*a)[i].dump_to(out, indent, level + 1);
    }
    if (!flat && !a->empty()) newline(out, indent, level);
    out += ']';
    return;
  }
  const auto& o = std::get<Object>(v_);
  out += '{';
  for (size_t i = 0; i < o.size(); ++i) {
    if (i) out += ',';
    newline(out, indent, level + 1);
    escape(out, o[i].first);
    out += indent >= 0 ? ": " : ":";
    o[i].second.dump_to(out, indent, level + 1);
  }
  if (!o.empty()) newline(out, indent, level);
  out += '}';
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

namespace {
struct Parser {
  const std::string& s;
  const std::string& where;
  size_t i = 0;
  [[noreturn]] void fail(const char* what) const { TQ_THROW("{}: invalid JSON at byte {}: {}", where, i, what); }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  bool lit(const char* w) {
    size_t n = std::char_traits<char>::length(w);
    if (s.compare(i, n, w) == 0) { i += n; return true; }
    return false;
  }
  Json value(int depth) {
    if (depth > 256) fail("nesting too deep");
    ws();
    if (i >= s.size()) fail("unexpected end");
    char c = s[i];
    if (c == '{') {
      ++i;
      Json::Object o;
      ws();
      if (i < s.size() && s[i] == '}') { ++i; return Json(std::move(o)); }
      for (;;) {
        ws();
        if (i >= s.size() || s[i] != '"') fail("expected a key");
        std::string k = string();
        ws();
        if (i >= s.size() || s[i] != ':') fail("expected ':'");
        ++i;
        o.emplace_back(std::move(k), value(depth + 1));
        ws();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == '}') { ++i; break; }
        fail("expected ',' or '}'");
      }
      return Json(std::move(o));
    }
    if (c == '[') {
      ++i;
      Json::Array a;
      ws();
      if (i < s.size() && s[i] == ']') { ++i; return Json(std::move(a)); }
      for (;;) {
        a.push_back(value(depth + 1));
        ws();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == ']') { ++i; break; }
        fail("expected ',' or ']'");
      }
      return Json(std::move(a));
    }
    if (c == '"') return Json(string());
    if (lit("true")) return Json(true);
    if (lit("false")) return Json(false);
    if (lit("null")) return Json(nullptr);
    const char* begin = s.c_str() + i;
    char* end = nullptr;
    if (!(c == '-' || (c >= '0' && c <= '9'))) fail("unexpected character");
    const double d = std::strtod(begin, &end);
    if (end == begin) fail("bad number");
    i += size_t(end - begin);
    return Json(d);
  }
  std::string string() {
    ++i;  // opening quote
    std::string out;
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (c != '\\') { out += c; continue; }
      if (i >= s.size()) fail("bad escape");
      char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i + 4 > s.size()) fail("bad \\u escape");
          unsigned cp = unsigned(std::stoul(s.substr(i, 4), nullptr, 16));
          i += 4;
          if (cp < 0x80) out += char(cp);
          else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
          else { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
          break;
        }
        default: fail("bad escape");
      }
    }
    if (i >= s.size()) fail("unterminated string");
    ++i;
    return out;
  }
};
}  // namespace

Json Json::parse(const std::string& text, const std::string& where) {
  Parser p{text, where};
  Json v = p.value(0);
  p.ws();
  if (p.i != text.size()) p.fail("trailing characters");
  return v;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TQ_CHECK(f.good(), "cannot open '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace tq

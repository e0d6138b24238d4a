// Minimal JSON value: build, print (stable key order, shortest round-trip
// numbers) and parse (RFC 8259; errors name the byte offset). Enough for the
// tools' --json output, summary files and the reference vectors in tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tq {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // insertion order kept

  Json() : v_(nullptr) {}
  Json(std::nullptr_t) : v_(nullptr) {}
  Json(bool b) : v_(b) {}
  Json(int x) : v_(double(x)) {}
  Json(long x) : v_(double(x)) {}
  Json(long long x) : v_(double(x)) {}
  Json(unsigned x) : v_(double(x)) {}
  Json(unsigned long x) : v_(double(x)) {}
  Json(unsigned long long x) : v_(double(x)) {}
  Json(double x) : v_(x) {}
  Json(const char* s) : v_(std::string(s)) {}
  Json(std::string s) : v_(std::move(s)) {}
  Json(Array a) : v_(std::move(a)) {}
  Json(Object o) : v_(std::move(o)) {}
  template <class T>
  static Json array_of(const std::vector<T>& xs) {
    Array a;
    a.reserve(xs.size());
    for (const auto& x : xs) a.emplace_back(x);
    return Json(std::move(a));
  }
  static Json object() { return Json(Object{}); }
  static Json array() { return Json(Array{}); }

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_number() const { return std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<Array>(v_); }
  bool is_object() const { return std::holds_alternative<Object>(v_); }

  double number() const;             // throws tq::Error if not a number
  const std::string& str() const;    // throws if not a string
  bool boolean() const;
  const Array& arr() const;
  Array& arr();
  const Object& obj() const;
  const Json& operator[](const std::string& key) const;  // throws if missing
  const Json& operator[](size_t i) const;
  bool contains(const std::string& key) const;
  size_t size() const;

  Json& set(const std::string& key, Json value);  // object: insert or replace
  Json& push(Json value);                          // array: append

  std::string dump(int indent = -1) const;  // -1: compact
  static Json parse(const std::string& text, const std::string& where = "json");

 private:
  std::variant<std::nullptr_t, bool, double, std::string, Array, Object> v_;
  void dump_to(std::string& out, int indent, int level) const;
};

// Reads a whole file (throws tq::Error naming the path).
std::string read_text_file(const std::string& path);

}  // namespace tq

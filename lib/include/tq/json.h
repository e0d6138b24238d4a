// JSON for the tools' --json output, summary files and the reference vectors in
// tests: nlohmann-json (Debian nlohmann-json3-dev, 3.11) as tq::Json, an
// ordered_json, so objects keep their keys in insertion order. Integers stay
// integers (64-bit exact), doubles print as the shortest text that reads back
// to the same double, NaN and infinities print as null.
//
// Serialise a struct with a `to_json(Json&, const T&)` next to it (found by
// argument-dependent lookup: `Json j = value;`). Input that comes from a user
// goes through parse_json so that a syntax error is a tq::Error naming the
// file; read required members with j.at("key") (a missing key throws
// nlohmann's out_of_range, which callers facing users turn into a tq::Error).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tq {

using Json = nlohmann::ordered_json;

// Parses text (RFC 8259). A syntax error throws tq::Error
// "<where>: invalid JSON at byte <offset>: <what nlohmann says>".
Json parse_json(const std::string& text, const std::string& where = "json");

// j.dump(indent) (-1: compact), except that a string that is not valid UTF-8
// (bytes a tokenizer decoded from one token of a multi-byte character) is
// written with U+FFFD in place of the bad bytes instead of throwing.
std::string dump_json(const Json& j, int indent = -1);

// Reads a whole file (throws tq::Error naming the path).
std::string read_text_file(const std::string& path);

}  // namespace tq

// GGUF reader (versions 2 and 3) and ggml block dequantization.
//
// Layout (little-endian; docs/models.md §1): "GGUF", u32 version, u64
// n_tensors, u64 n_kv; n_kv × (string key, u32 type, value); n_tensors ×
// (string name, u32 n_dims, n_dims × u64 ne, u32 ggml type, u64 offset);
// padding to `general.alignment` (default 32); the tensor data section.
// A string is u64 length + bytes. ne[0] is the innermost dimension: a matrix
// ne = [in, out] is `out` rows of `in` values.
//
// Every read is checked against the bytes left, every count is capped by the
// bytes left before anything is allocated, and every tensor must lie inside
// the file, aligned, without overlapping another. Any violation throws
// tq::Error "FILE: byte OFFSET: FIELD: problem". The file is memory-mapped;
// tensor data is read in place.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tq {

// ---- ggml tensor types --------------------------------------------------------
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
};

struct GgmlTypeInfo {
  const char* name;  // "q4_k"
  int block_size;    // values per block
  int type_size;     // bytes per block
};

// nullptr for a type id this reader does not implement.
const GgmlTypeInfo* ggml_type_info(uint32_t type);
// "q4_k", or "type N" for an unknown id.
std::string ggml_type_name(uint32_t type);

// Dequantizes n values (n % block_size == 0) of `type` from src to float32.
// Throws tq::Error for an unknown type or a bad n.
void dequantize_row(uint32_t type, const void* src, float* dst, int64_t n);

// The quantized types as integer codes: n values (n % block_size == 0) of
// `type` unpack to code[i] (u8) and, per 16 values g = i / 16, scale[g] and
// offset[g], with value i = scale[g]·float(code[i] − zero) (+ offset[g] where
// has_offset; offset[g] = 0 otherwise) — the float32 arithmetic of
// dequantize_row, bit for bit. Codes span [0, 2·zero) for the types with a zero
// point (q8_0: [0, 256)), else [0, 2^bits). Throws tq::Error for a type without
// codes (f32, f16, bf16) or a bad n.
struct CodeMap {
  int zero;
  bool has_offset;
};
bool ggml_type_has_codes(uint32_t type);
CodeMap unpack_codes(uint32_t type, const void* src, int64_t n, uint8_t* code, float* scale, float* offset);

// ---- metadata -------------------------------------------------------------------
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars and numeric arrays keep their little-endian bytes
// in `raw`; strings live in `str` (scalar) or `strings` (array of strings).
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem_type = GgufType::U8;  // arrays only
  uint64_t count = 1;                 // arrays: number of elements
  std::vector<uint8_t> raw;
  std::string str;
  std::vector<std::string> strings;

  bool is_array() const { return type == GgufType::ARRAY; }
  // Numeric access to a scalar (i = 0) or array element, any integer/float/bool
  // type; throws tq::Error on a string or out-of-range index.
  double as_double(uint64_t i = 0) const;
  int64_t as_int(uint64_t i = 0) const;   // integer and bool types only
  uint64_t as_uint(uint64_t i = 0) const; // non-negative integer values only
  std::string to_string(size_t max_elems = 8) const;  // for printing
};

struct GgufTensor {
  std::string name;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  uint32_t type = 0;
  uint64_t offset = 0;   // absolute byte offset of the data in the file
  uint64_t n_bytes = 0;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t row_bytes() const;
  std::string shape_string() const;  // "[576, 49152]"
};

class GgufFile {
 public:
  // Memory-maps and validates `path`.
  static GgufFile open(const std::string& path);
  // Validates an in-memory image; `name` stands for the file in messages.
  static GgufFile from_memory(std::vector<uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;   // nullptr if absent
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed accessors: throw tq::Error naming the file and key if the key is
  // missing or of the wrong type. Integer getters accept any integer type
  // whose value fits; float getters accept F32/F64 (and integers).
  std::string get_string(const std::string& key) const;
  uint32_t get_u32(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  float get_f32(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  // With a default for an absent key (a present key of the wrong type still throws).
  std::string get_string(const std::string& key, const std::string& def) const;
  uint32_t get_u32(const std::string& key, uint32_t def) const;
  float get_f32(const std::string& key, float def) const;
  bool get_bool(const std::string& key, bool def) const;
  // Arrays: the element type must be string / numeric as asked.
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_f32_array(const std::string& key) const;
  std::vector<int32_t> get_i32_array(const std::string& key) const;

  // Tensors, in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // throws if absent

  // The bytes of t (t.n_bytes of them, inside the mapping).
  const uint8_t* tensor_data(const GgufTensor& t) const { return base_ + t.offset; }
  // Dequantizes rows [row0, row0 + n_rows) of t (each ne[0] values) into out.
  void dequantize_rows(const GgufTensor& t, int64_t row0, int64_t n_rows, float* out) const;
  std::vector<float> dequantize(const GgufTensor& t) const;

  // Tensor count, elements and bytes per ggml type, and a one-line summary
  // ("q4_1: 210 tensors 106.2M values 63.7 MB; q8_0: …").
  struct TypeCount { int64_t tensors = 0, elements = 0, bytes = 0; };
  std::map<std::string, TypeCount> type_histogram() const;
  std::string type_histogram_text() const;

 private:
  void parse();
  std::string path_;
  std::shared_ptr<const void> storage_;  // the mapping or the owned buffer
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace tq

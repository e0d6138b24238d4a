// KV dumps: per-layer post-RoPE Q, K and V of a real model over a text, in
// HDF5 (schema "tqkit-kvdump/1", docs/kv_dump.md), readable by h5py:
//
//   /            attrs: schema, model, arch, source_file, source_sha256,
//                       created_by (UTF-8 strings); n_layers, n_heads,
//                       n_kv_heads, head_dim, n_tokens (int64)
//   /tokens      int32 [T]
//   /layer_LLL/  attrs: rope_theta (f64), sliding_window (int64, 0 = global),
//                       attn_scale (f64: the multiplier applied to q·k)
//   /layer_LLL/q f16|f32 [T, n_heads, head_dim]  post-RoPE (Gemma: post QK-norm,
//                                                 before attn_scale)
//   /layer_LLL/k f16|f32 [T, n_kv_heads, head_dim] post-RoPE
//   /layer_LLL/v f16|f32 [T, n_kv_heads, head_dim]
//
// n_layers is the model's layer count; a dump may hold a subset of layers
// (tq-dump --layers). f16 is IEEE binary16 little-endian (numpy float16).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tq {

inline constexpr const char* kKvDumpSchema = "tqkit-kvdump/1";

struct KvDumpHeader {
  std::string model, arch, source_file, source_sha256, created_by;
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_tokens = 0;
  std::vector<int32_t> tokens;
  std::vector<int> layers;  // layers present (reader), ascending
  bool f16 = true;          // storage type of q/k/v
};

struct KvDumpLayer {
  int layer = 0;
  double rope_theta = 0;
  int64_t sliding_window = 0;
  double attn_scale = 0;
  std::vector<float> q;  // [T, n_heads, head_dim]
  std::vector<float> k;  // [T, n_kv_heads, head_dim]
  std::vector<float> v;  // [T, n_kv_heads, head_dim]
};

class KvDumpWriter {
 public:
  // Creates `path` (truncating) and writes the root attributes and /tokens.
  KvDumpWriter(const std::string& path, const KvDumpHeader& header);
  ~KvDumpWriter();
  KvDumpWriter(const KvDumpWriter&) = delete;
  KvDumpWriter& operator=(const KvDumpWriter&) = delete;
  // q: [T, n_heads, head_dim]; k, v: [T, n_kv_heads, head_dim] float32.
  void write_layer(int layer, double rope_theta, int64_t sliding_window, double attn_scale, const float* q,
                   const float* k, const float* v);
  void close();  // flushes and closes; the destructor closes too

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class KvDump {
 public:
  // Opens and validates the schema: every required attribute, /tokens and each
  // layer's datasets with their shapes and types. Throws tq::Error naming the
  // file and the missing or mismatched field.
  static KvDump open(const std::string& path);
  KvDump(KvDump&&) noexcept;
  KvDump& operator=(KvDump&&) noexcept;
  ~KvDump();

  const KvDumpHeader& header() const;
  const std::string& path() const;
  bool has_layer(int layer) const;
  // Reads one layer's attributes and q, k, v as float32 (throws if absent).
  KvDumpLayer read_layer(int layer) const;

 private:
  struct Impl;
  explicit KvDump(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq

// GGUF file reading: open/map the file, parse and validate the header, the
// metadata and the tensor infos, and the tensor accessors (rows dequantized).
#include "tq/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "gguf_internal.h"
#include "tq/error.h"

namespace tq {

// ---- parsing --------------------------------------------------------------------
namespace {

using detail::load_le;
using detail::scalar_size;

// A bounds-checked little-endian reader over the file image.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& file) : p_(p), n_(n), file_(file) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& field, const std::string& what) const {
    TQ_THROW("{}: byte {}: {}: {}", file_, at, field, what);
  }
  void need(uint64_t bytes, const std::string& field) const {
    if (bytes > left())
      fail(pos_, field, fmt::format("needs {} bytes but only {} remain (file truncated?)", bytes, left()));
  }
  uint64_t uint(size_t bytes, const std::string& field) {
    need(bytes, field);
    const uint64_t v = load_le(p_ + pos_, bytes);
    pos_ += bytes;
    return v;
  }
  uint32_t u32(const std::string& field) { return uint32_t(uint(4, field)); }
  uint64_t u64(const std::string& field) { return uint(8, field); }
  std::string str(const std::string& field) {
    const uint64_t at = pos_;
    const uint64_t len = u64(field + " length");
    if (len > left()) fail(at, field, fmt::format("string length {} exceeds the {} bytes left", len, left()));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }
  void bytes(std::vector<uint8_t>& out, uint64_t n, const std::string& field) {
    need(n, field);
    out.assign(p_ + pos_, p_ + pos_ + n);
    pos_ += n;
  }

 private:
  const uint8_t* p_;
  uint64_t n_, pos_ = 0;
  const std::string& file_;
};

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Cursor& c, GgufType type, const std::string& field) {
  GgufValue v;
  v.type = type;
  if (type == GgufType::STRING) {
    v.str = c.str(field);
    return v;
  }
  if (type != GgufType::ARRAY) {
    c.bytes(v.raw, scalar_size(type), field);
    if (type == GgufType::BOOL && v.raw[0] > 1)
      c.fail(c.pos() - 1, field, fmt::format("bool value {} is not 0 or 1", v.raw[0]));
    return v;
  }
  const uint64_t at = c.pos();
  const uint32_t et = c.u32(field + " array type");
  if (!valid_type(et)) c.fail(at, field, fmt::format("array element type {} unknown", et));
  if (GgufType(et) == GgufType::ARRAY) c.fail(at, field, "nested arrays are not supported");
  v.elem_type = GgufType(et);
  const uint64_t count_at = c.pos();
  v.count = c.u64(field + " array count");
  // Every element takes at least min_size bytes: cap the count before allocating.
  const uint64_t min_size = v.elem_type == GgufType::STRING ? 8 : scalar_size(v.elem_type);
  if (v.count > c.left() / min_size)
    c.fail(count_at, field, fmt::format("array of {} {} elements cannot fit in the {} bytes left", v.count,
                                        gguf_type_name(v.elem_type), c.left()));
  if (v.elem_type == GgufType::STRING) {
    v.strings.reserve(size_t(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.str(fmt::format("{}[{}]", field, i)));
  } else {
    c.bytes(v.raw, v.count * min_size, field);
    if (v.elem_type == GgufType::BOOL)
      for (uint64_t i = 0; i < v.count; ++i)
        if (v.raw[i] > 1) c.fail(c.pos() - v.count + i, field, fmt::format("bool element {} is {}", i, v.raw[i]));
  }
  return v;
}

struct Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, len);
  }
};

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TQ_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    TQ_THROW("{}: not a regular file{}", path, err ? std::string(": ") + std::strerror(err) : "");
  }
  GgufFile f;
  f.path_ = path;
  f.size_ = uint64_t(st.st_size);
  if (f.size_ > 0) {
    void* a = ::mmap(nullptr, size_t(f.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    TQ_CHECK(a != MAP_FAILED, "{}: cannot map {} bytes: {}", path, f.size_, std::strerror(err));
    auto m = std::make_shared<Mapping>();
    m->addr = a;
    m->len = size_t(f.size_);
    f.base_ = static_cast<const uint8_t*>(a);
    f.storage_ = std::shared_ptr<const void>(m, a);
  } else {
    ::close(fd);
    static const uint8_t empty = 0;
    f.base_ = &empty;
  }
  f.parse();
  return f;
}

GgufFile GgufFile::from_memory(std::vector<uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  static const uint8_t empty = 0;
  f.base_ = buf->empty() ? &empty : buf->data();
  f.size_ = buf->size();
  f.storage_ = buf;
  f.parse();
  return f;
}

void GgufFile::parse() {
  Cursor c(base_, size_, path_);
  {
    const uint64_t magic = c.uint(4, "magic");
    if (magic != 0x46554747u)  // "GGUF"
      c.fail(0, "magic", fmt::format("0x{:08x} is not \"GGUF\" (not a GGUF file)", magic));
  }
  version_ = c.u32("version");
  if (version_ != 2 && version_ != 3)
    c.fail(4, "version", fmt::format("version {} is not supported (expected 2 or 3)", version_));
  const uint64_t n_tensors = c.u64("tensor count");
  const uint64_t n_kv = c.u64("metadata count");
  // Smallest possible entries: KV = key length 8 + 1 key byte + type 4 + 1 value byte;
  // tensor info = name length 8 + n_dims 4 + one ne 8 + type 4 + offset 8.
  if (n_kv > c.left() / 14) c.fail(16, "metadata count", fmt::format("{} entries cannot fit in the file", n_kv));
  if (n_tensors > c.left() / 32) c.fail(8, "tensor count", fmt::format("{} tensors cannot fit in the file", n_tensors));

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.str(fmt::format("metadata key {}", i));
    if (key.empty()) c.fail(at, fmt::format("metadata key {}", i), "empty key");
    if (kv_index_.count(key)) c.fail(at, fmt::format("metadata key '{}'", key), "duplicate key");
    const uint64_t type_at = c.pos();
    const uint32_t t = c.u32(fmt::format("metadata '{}' type", key));
    if (!valid_type(t)) c.fail(type_at, fmt::format("metadata '{}'", key), fmt::format("value type {} unknown", t));
    GgufValue v = read_value(c, GgufType(t), fmt::format("metadata '{}'", key));
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::U32)
      TQ_THROW("{}: metadata 'general.alignment': type {} is not u32", path_, gguf_type_name(a->type));
    const uint32_t al = uint32_t(a->as_uint());
    if (al == 0 || (al & (al - 1)) != 0)
      TQ_THROW("{}: metadata 'general.alignment': {} is not a power of two", path_, al);
    alignment_ = al;
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    GgufTensor t;
    t.name = c.str(fmt::format("tensor {} name", i));
    const std::string field = fmt::format("tensor '{}'", t.name);
    if (t.name.empty()) c.fail(at, fmt::format("tensor {}", i), "empty name");
    if (t.name.size() >= 64) c.fail(at, field, fmt::format("name is {} bytes (at most 63)", t.name.size()));
    if (tensor_index_.count(t.name)) c.fail(at, field, "duplicate tensor name");
    const uint64_t dims_at = c.pos();
    const uint32_t n_dims = c.u32(field + " n_dims");
    if (n_dims < 1 || n_dims > 4) c.fail(dims_at, field, fmt::format("n_dims {} is not in 1..4", n_dims));
    t.n_dims = int(n_dims);
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = c.pos();
      const uint64_t ne = c.u64(fmt::format("{} ne[{}]", field, d));
      if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()))
        c.fail(ne_at, field, fmt::format("ne[{}] = {} is not a positive size", d, ne));
      if (n_elem > uint64_t(std::numeric_limits<int64_t>::max()) / ne)
        c.fail(ne_at, field, "element count overflows");
      n_elem *= ne;
      t.ne[d] = int64_t(ne);
    }
    const uint64_t type_at = c.pos();
    t.type = c.u32(field + " type");
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!info) c.fail(type_at, field, fmt::format("type {} unknown", t.type));
    if (t.ne[0] % info->block_size != 0)
      c.fail(dims_at, field, fmt::format("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], info->name,
                                         info->block_size));
    const uint64_t blocks = n_elem / uint64_t(info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(info->type_size))
      c.fail(dims_at, field, "byte size overflows");
    t.n_bytes = blocks * uint64_t(info->type_size);
    const uint64_t off_at = c.pos();
    t.offset = c.u64(field + " offset");
    if (t.offset % alignment_ != 0)
      c.fail(off_at, field, fmt::format("offset {} is not a multiple of the alignment {}", t.offset, alignment_));
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
    (void)at;
  }

  // Data section: aligned position after the tensor infos.
  const uint64_t end_infos = c.pos();
  data_offset_ = end_infos + (alignment_ - end_infos % alignment_) % alignment_;
  for (GgufTensor& t : tensors_) {
    // Relative offset → absolute, overflow-safe, inside the file.
    if (t.offset > size_ || data_offset_ > size_ - t.offset || t.n_bytes > size_ - t.offset - data_offset_)
      TQ_THROW("{}: byte {}: tensor '{}': data [{}, +{}) lies outside the file ({} bytes; data section at {})", path_,
               data_offset_, t.name, t.offset, t.n_bytes, size_, data_offset_);
    t.offset += data_offset_;
  }
  std::vector<const GgufTensor*> by_off;
  by_off.reserve(tensors_.size());
  for (const GgufTensor& t : tensors_) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_off.size(); ++i)
    if (by_off[i - 1]->offset + by_off[i - 1]->n_bytes > by_off[i]->offset)
      TQ_THROW("{}: byte {}: tensor '{}': data overlaps tensor '{}'", path_, by_off[i]->offset, by_off[i]->name,
               by_off[i - 1]->name);
}

// ---- tensors ----------------------------------------------------------------------
int64_t GgufTensor::row_bytes() const {
  const GgmlTypeInfo* info = ggml_type_info(type);
  TQ_ASSERT(info);
  return ne[0] / info->block_size * info->type_size;
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  TQ_CHECK(t, "{}: tensor '{}' is missing", path_, name);
  return *t;
}

void GgufFile::dequantize_rows(const GgufTensor& t, int64_t row0, int64_t n_rows, float* out) const {
  TQ_CHECK(row0 >= 0 && n_rows >= 0 && row0 <= t.n_rows() && n_rows <= t.n_rows() - row0,
           "{}: tensor '{}': rows [{}, +{}) out of range ({} rows)", path_, t.name, row0, n_rows, t.n_rows());
  const int64_t rb = t.row_bytes();
  const uint8_t* src = base_ + t.offset + row0 * rb;
  for (int64_t r = 0; r < n_rows; ++r) dequantize_row(t.type, src + r * rb, out + r * t.ne[0], t.ne[0]);
}

std::vector<float> GgufFile::dequantize(const GgufTensor& t) const {
  std::vector<float> out(size_t(t.n_elements()));
  dequantize_rows(t, 0, t.n_rows(), out.data());
  return out;
}

std::map<std::string, GgufFile::TypeCount> GgufFile::type_histogram() const {
  std::map<std::string, TypeCount> h;
  for (const GgufTensor& t : tensors_) {
    TypeCount& c = h[ggml_type_name(t.type)];
    c.tensors += 1;
    c.elements += t.n_elements();
    c.bytes += int64_t(t.n_bytes);
  }
  return h;
}

std::string GgufFile::type_histogram_text() const {
  std::string s;
  for (const auto& [name, c] : type_histogram())
    s += fmt::format("{}{}: {} tensor{}, {:.2f}M values, {:.1f} MB", s.empty() ? "" : "; ", name, c.tensors,
                     c.tensors == 1 ? "" : "s", double(c.elements) / 1e6, double(c.bytes) / 1e6);
  return s.empty() ? "no tensors" : s;
}

}  // namespace tq

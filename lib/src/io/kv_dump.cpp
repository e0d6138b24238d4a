#include "tq/kv_dump.h"

#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "tq/error.h"
#include "tq/float_formats.h"

namespace tq {

namespace {

// HDF5's automatic error stack printing is off: failures become tq::Error.
void quiet_hdf5() {
  static const bool done = [] {
    H5::Exception::dontPrint();
    return true;
  }();
  (void)done;
}

// IEEE binary16, little-endian (what h5py maps to numpy float16).
H5::FloatType half_type() {
  H5::FloatType t(H5::PredType::IEEE_F32LE);
  t.setFields(15, 10, 5, 0, 10);
  t.setSize(2);
  t.setEbias(15);
  return t;
}

H5::StrType utf8_type() {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  t.setCset(H5T_CSET_UTF8);
  return t;
}

void attr_string(H5::H5Object& o, const std::string& name, const std::string& value) {
  const H5::StrType t = utf8_type();
  H5::Attribute a = o.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
  a.write(t, value);
}
void attr_i64(H5::H5Object& o, const std::string& name, int64_t value) {
  H5::Attribute a = o.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_INT64, &value);
}
void attr_f64(H5::H5Object& o, const std::string& name, double value) {
  H5::Attribute a = o.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR));
  a.write(H5::PredType::NATIVE_DOUBLE, &value);
}

std::string layer_name(int l) { return fmt::format("layer_{:03d}", l); }

bool link_exists(const H5::Group& g, const std::string& name) {
  return H5Lexists(g.getId(), name.c_str(), H5P_DEFAULT) > 0;
}

// Element i of a [n_tokens, heads, head_dim] tensor, as "token t, head h, dim d".
std::string element_at(size_t i, int heads, int head_dim) {
  const size_t row = i / size_t(head_dim);
  return fmt::format("token {}, head {}, dim {}", row / size_t(heads), row % size_t(heads), i % size_t(head_dim));
}

// Throws, naming the first value of x [n_tokens, heads, head_dim] that is not finite (tensor: "/layer_LLL/k").
void require_finite(const float* x, int64_t n_tokens, int heads, int head_dim, const std::string& path,
                    const std::string& tensor) {
  const size_t n = size_t(n_tokens) * size_t(heads) * size_t(head_dim);
  for (size_t i = 0; i < n; ++i)
    TQ_CHECK(std::isfinite(x[i]), "{}: {}: {}: {} is not finite", path, tensor, element_at(i, heads, head_dim), x[i]);
}

}  // namespace

// ---- writer ----------------------------------------------------------------------
struct KvDumpWriter::Impl {
  std::string path;
  KvDumpHeader h;
  H5::H5File file;
  bool open = false;
};

#define TQ_H5_CONTEXT(path, what, ...)                                                           \
  try {                                                                                          \
    __VA_ARGS__                                                                                  \
  } catch (const H5::Exception& e) {                                                            \
    TQ_THROW("{}: {}: HDF5 error in {}: {}", path, what, e.getFuncName(), e.getDetailMsg());    \
  }

KvDumpWriter::KvDumpWriter(const std::string& path, const KvDumpHeader& h) : impl_(std::make_unique<Impl>()) {
  quiet_hdf5();
  impl_->path = path;
  impl_->h = h;
  TQ_CHECK(h.n_tokens > 0 && int64_t(h.tokens.size()) == h.n_tokens, "{}: n_tokens {} but {} tokens given", path,
           h.n_tokens, h.tokens.size());
  TQ_CHECK(h.n_heads > 0 && h.n_kv_heads > 0 && h.head_dim > 0 && h.n_layers > 0, "{}: bad dump dimensions", path);
  TQ_H5_CONTEXT(path, "cannot create the file", impl_->file = H5::H5File(path, H5F_ACC_TRUNC); impl_->open = true;)
  TQ_H5_CONTEXT(path, "writing the root attributes", {
    H5::Group root = impl_->file.openGroup("/");
    attr_string(root, "schema", kKvDumpSchema);
    attr_string(root, "model", h.model);
    attr_string(root, "arch", h.arch);
    attr_string(root, "source_file", h.source_file);
    attr_string(root, "source_sha256", h.source_sha256);
    attr_string(root, "created_by", h.created_by);
    attr_i64(root, "n_layers", h.n_layers);
    attr_i64(root, "n_heads", h.n_heads);
    attr_i64(root, "n_kv_heads", h.n_kv_heads);
    attr_i64(root, "head_dim", h.head_dim);
    attr_i64(root, "n_tokens", h.n_tokens);
    const hsize_t dims[1] = {hsize_t(h.n_tokens)};
    H5::DataSet t = impl_->file.createDataSet("tokens", H5::PredType::STD_I32LE, H5::DataSpace(1, dims));
    t.write(h.tokens.data(), H5::PredType::NATIVE_INT32);
  })
}

KvDumpWriter::~KvDumpWriter() {
  try {
    close();
  } catch (...) {
  }
}

void KvDumpWriter::write_layer(int layer, double rope_theta, int64_t sliding_window, double attn_scale, const float* q,
                               const float* k, const float* v) {
  Impl& im = *impl_;
  TQ_CHECK(im.open, "{}: write_layer after close", im.path);
  TQ_CHECK(layer >= 0 && layer < im.h.n_layers, "{}: layer {} out of range", im.path, layer);
  const std::string name = layer_name(layer);
  TQ_H5_CONTEXT(im.path, fmt::format("/{}", name), {
    H5::Group g = im.file.createGroup(name);
    attr_f64(g, "rope_theta", rope_theta);
    attr_i64(g, "sliding_window", sliding_window);
    attr_f64(g, "attn_scale", attn_scale);
    const H5::FloatType half = half_type();
    std::vector<uint16_t> buf;
    auto put = [&](const char* ds_name, const float* x, int heads) {
      const hsize_t dims[3] = {hsize_t(im.h.n_tokens), hsize_t(heads), hsize_t(im.h.head_dim)};
      const size_t n = size_t(im.h.n_tokens) * size_t(heads) * size_t(im.h.head_dim);
      require_finite(x, im.h.n_tokens, heads, im.h.head_dim, im.path, fmt::format("/{}/{}", name, ds_name));
      H5::DataSpace sp(3, dims);
      if (im.h.f16) {
        buf.resize(n);
        for (size_t i = 0; i < n; ++i) {
          buf[i] = float_to_half(x[i]);
          TQ_CHECK((buf[i] & 0x7c00u) != 0x7c00u, "{}: /{}/{}: {}: {} is beyond the f16 range (±65504): use --dtype f32",
                   im.path, name, ds_name, element_at(i, heads, im.h.head_dim), x[i]);
        }
        H5::DataSet ds = g.createDataSet(ds_name, half, sp);
        ds.write(buf.data(), half);
      } else {
        H5::DataSet ds = g.createDataSet(ds_name, H5::PredType::IEEE_F32LE, sp);
        ds.write(x, H5::PredType::NATIVE_FLOAT);
      }
    };
    put("q", q, im.h.n_heads);
    put("k", k, im.h.n_kv_heads);
    put("v", v, im.h.n_kv_heads);
  })
}

void KvDumpWriter::close() {
  if (!impl_ || !impl_->open) return;
  impl_->open = false;
  TQ_H5_CONTEXT(impl_->path, "closing the file", impl_->file.close();)
}

// ---- reader ----------------------------------------------------------------------
struct KvDump::Impl {
  std::string path;
  KvDumpHeader h;
  H5::H5File file;
};

KvDump::KvDump(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvDump::KvDump(KvDump&&) noexcept = default;
KvDump& KvDump::operator=(KvDump&&) noexcept = default;
KvDump::~KvDump() = default;
const KvDumpHeader& KvDump::header() const { return impl_->h; }
const std::string& KvDump::path() const { return impl_->path; }

namespace {

std::string read_string_attr(const H5::H5Object& o, const std::string& where, const std::string& name,
                             const std::string& path) {
  TQ_CHECK(o.attrExists(name), "{}: {}: attribute '{}' is missing", path, where, name);
  H5::Attribute a = o.openAttribute(name);
  TQ_CHECK(a.getTypeClass() == H5T_STRING, "{}: {}: attribute '{}' is not a string", path, where, name);
  std::string s;
  a.read(a.getStrType(), s);
  return s;
}

int64_t read_int_attr(const H5::H5Object& o, const std::string& where, const std::string& name,
                      const std::string& path) {
  TQ_CHECK(o.attrExists(name), "{}: {}: attribute '{}' is missing", path, where, name);
  H5::Attribute a = o.openAttribute(name);
  TQ_CHECK(a.getTypeClass() == H5T_INTEGER && a.getSpace().getSimpleExtentNpoints() == 1,
           "{}: {}: attribute '{}' is not an integer scalar", path, where, name);
  int64_t v = 0;
  a.read(H5::PredType::NATIVE_INT64, &v);
  return v;
}

double read_float_attr(const H5::H5Object& o, const std::string& where, const std::string& name,
                       const std::string& path) {
  TQ_CHECK(o.attrExists(name), "{}: {}: attribute '{}' is missing", path, where, name);
  H5::Attribute a = o.openAttribute(name);
  const H5T_class_t c = a.getTypeClass();
  TQ_CHECK((c == H5T_FLOAT || c == H5T_INTEGER) && a.getSpace().getSimpleExtentNpoints() == 1,
           "{}: {}: attribute '{}' is not a numeric scalar", path, where, name);
  double v = 0;
  a.read(H5::PredType::NATIVE_DOUBLE, &v);
  return v;
}

std::string shape_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", d[i]);
  return s + "]";
}

// Validates a q/k/v dataset: float of 2 or 4 bytes, shape [T, heads, hd]. Returns its byte size.
size_t check_dataset(const H5::Group& g, const std::string& where, const char* name, int64_t T, int heads, int hd,
                     const std::string& path) {
  const std::string full = where + fmt::format("/{}", name);
  TQ_CHECK(link_exists(g, name), "{}: {} is missing", path, full);
  H5::DataSet ds = g.openDataSet(name);
  TQ_CHECK(ds.getTypeClass() == H5T_FLOAT, "{}: {}: dtype is not floating point", path, full);
  const size_t size = ds.getFloatType().getSize();
  TQ_CHECK(size == 2 || size == 4, "{}: {}: {}-byte floats (expected f16 or f32)", path, full, size);
  H5::DataSpace sp = ds.getSpace();
  const int rank = sp.getSimpleExtentNdims();
  std::vector<hsize_t> d(size_t(std::max(rank, 0)));
  if (rank > 0) sp.getSimpleExtentDims(d.data());
  const std::vector<hsize_t> want = {hsize_t(T), hsize_t(heads), hsize_t(hd)};
  TQ_CHECK(d == want, "{}: {}: shape {}, expected {}", path, full, shape_str(d), shape_str(want));
  return size;
}

}  // namespace

KvDump KvDump::open(const std::string& path) {
  quiet_hdf5();
  auto im = std::make_unique<Impl>();
  im->path = path;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    TQ_CHECK(f, "{}: cannot open", path);
    std::fclose(f);
  }
  TQ_H5_CONTEXT(path, "not an HDF5 file (or unreadable)", im->file = H5::H5File(path, H5F_ACC_RDONLY);)
  KvDumpHeader& h = im->h;
  TQ_H5_CONTEXT(path, "reading the header", {
    H5::Group root = im->file.openGroup("/");
    const std::string schema = read_string_attr(root, "/", "schema", path);
    TQ_CHECK(schema == kKvDumpSchema, "{}: schema '{}' is not '{}'", path, schema, kKvDumpSchema);
    h.model = read_string_attr(root, "/", "model", path);
    h.arch = read_string_attr(root, "/", "arch", path);
    h.source_file = read_string_attr(root, "/", "source_file", path);
    h.source_sha256 = read_string_attr(root, "/", "source_sha256", path);
    h.created_by = read_string_attr(root, "/", "created_by", path);
    auto dim = [&](const char* name, int64_t max) {
      const int64_t v = read_int_attr(root, "/", name, path);
      TQ_CHECK(v >= 1 && v <= max, "{}: attribute '{}' = {} is out of range", path, name, v);
      return v;
    };
    h.n_layers = int(dim("n_layers", 4096));
    h.n_heads = int(dim("n_heads", 4096));
    h.n_kv_heads = int(dim("n_kv_heads", 4096));
    h.head_dim = int(dim("head_dim", 65536));
    h.n_tokens = dim("n_tokens", int64_t(1) << 31);
    TQ_CHECK(h.n_heads % h.n_kv_heads == 0, "{}: n_heads {} is not a multiple of n_kv_heads {}", path, h.n_heads,
             h.n_kv_heads);

    TQ_CHECK(link_exists(root, "tokens"), "{}: /tokens is missing", path);
    H5::DataSet tok = root.openDataSet("tokens");
    TQ_CHECK(tok.getTypeClass() == H5T_INTEGER, "{}: /tokens is not an integer dataset", path);
    H5::DataSpace sp = tok.getSpace();
    TQ_CHECK(sp.getSimpleExtentNdims() == 1, "{}: /tokens has rank {}, expected 1", path, sp.getSimpleExtentNdims());
    hsize_t n = 0;
    sp.getSimpleExtentDims(&n);
    TQ_CHECK(int64_t(n) == h.n_tokens, "{}: /tokens has {} entries but n_tokens is {}", path, n, h.n_tokens);
    h.tokens.resize(size_t(n));
    tok.read(h.tokens.data(), H5::PredType::NATIVE_INT32);

    size_t elem = 0;
    const hsize_t n_obj = root.getNumObjs();
    for (hsize_t i = 0; i < n_obj; ++i) {
      const std::string name = root.getObjnameByIdx(i);
      if (name.rfind("layer_", 0) != 0) continue;
      const std::string num = name.substr(6);
      TQ_CHECK(!num.empty() && num.size() <= 4 && num.find_first_not_of("0123456789") == std::string::npos,
               "{}: /{}: not a layer_LLL name", path, name);
      const int l = std::stoi(num);
      TQ_CHECK(name == layer_name(l), "{}: /{}: expected the name {}", path, name, layer_name(l));
      TQ_CHECK(l < h.n_layers, "{}: /{}: layer index beyond n_layers {}", path, name, h.n_layers);
      TQ_CHECK(root.childObjType(name) == H5O_TYPE_GROUP, "{}: /{} is not a group", path, name);
      H5::Group g = root.openGroup(name);
      const std::string where = fmt::format("/{}", name);
      read_float_attr(g, where, "rope_theta", path);
      read_int_attr(g, where, "sliding_window", path);
      read_float_attr(g, where, "attn_scale", path);
      const size_t sq = check_dataset(g, where, "q", h.n_tokens, h.n_heads, h.head_dim, path);
      const size_t sk = check_dataset(g, where, "k", h.n_tokens, h.n_kv_heads, h.head_dim, path);
      const size_t sv = check_dataset(g, where, "v", h.n_tokens, h.n_kv_heads, h.head_dim, path);
      TQ_CHECK(sq == sk && sk == sv, "{}: {}: q, k and v have different dtypes", path, where);
      TQ_CHECK(elem == 0 || elem == sq, "{}: {}: dtype differs from the other layers", path, where);
      elem = sq;
      h.layers.push_back(l);
    }
    TQ_CHECK(!h.layers.empty(), "{}: no /layer_LLL groups", path);
    std::sort(h.layers.begin(), h.layers.end());
    h.f16 = elem == 2;
  })
  return KvDump(std::move(im));
}

bool KvDump::has_layer(int layer) const {
  return std::binary_search(impl_->h.layers.begin(), impl_->h.layers.end(), layer);
}

KvDumpLayer KvDump::read_layer(int layer) const {
  const Impl& im = *impl_;
  TQ_CHECK(has_layer(layer), "{}: layer {} is not in the dump", im.path, layer);
  KvDumpLayer out;
  out.layer = layer;
  const std::string where = fmt::format("/{}", layer_name(layer));
  TQ_H5_CONTEXT(im.path, where, {
    H5::Group g = im.file.openGroup(layer_name(layer));
    out.rope_theta = read_float_attr(g, where, "rope_theta", im.path);
    out.sliding_window = read_int_attr(g, where, "sliding_window", im.path);
    out.attn_scale = read_float_attr(g, where, "attn_scale", im.path);
    TQ_CHECK(std::isfinite(out.rope_theta) && std::isfinite(out.attn_scale) && out.attn_scale > 0 &&
                 out.sliding_window >= 0,
             "{}: {}: rope_theta {}, attn_scale {}, sliding_window {}: must be finite, > 0 and ≥ 0", im.path, where,
             out.rope_theta, out.attn_scale, out.sliding_window);
    std::vector<uint16_t> buf;
    auto get = [&](const char* name, int heads, std::vector<float>& x) {
      const size_t n = size_t(im.h.n_tokens) * size_t(heads) * size_t(im.h.head_dim);
      H5::DataSet ds = g.openDataSet(name);
      x.resize(n);
      if (im.h.f16) {
        buf.resize(n);
        ds.read(buf.data(), half_type());  // HDF5 converts other 2-byte float layouts
        for (size_t i = 0; i < n; ++i) x[i] = half_to_float(buf[i]);
      } else {
        ds.read(x.data(), H5::PredType::NATIVE_FLOAT);
      }
      require_finite(x.data(), im.h.n_tokens, heads, im.h.head_dim, im.path, where + "/" + name);
    };
    get("q", im.h.n_heads, out.q);
    get("k", im.h.n_kv_heads, out.k);
    get("v", im.h.n_kv_heads, out.v);
  })
  return out;
}

}  // namespace tq

// tq-dump: run a GGUF model over a text and write each layer's post-RoPE Q, K
// and V to HDF5 (schema tqkit-kvdump/1, see lib/include/tq/kv_dump.h).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/app.h"
#include "tq/error.h"
#include "tq/json.h"
#include "tq/kv_dump.h"
#include "tq/layer_list.h"
#include "tq/model.h"
#include "tq/paths.h"
#include "tq/sha256.h"

namespace {

// Writes the selected layers as the forward pass produces them.
class DumpCapture : public tq::LayerCapture {
 public:
  DumpCapture(tq::KvDumpWriter& w, const tq::ModelConfig& c, const std::vector<int>& layers)
      : w_(w), c_(c), want_(size_t(c.n_layers), false), progress_("tq-dump: layers", int64_t(layers.size())) {
    for (int l : layers) want_[size_t(l)] = true;
  }
  void capture(int layer, int64_t, const float* q, const float* k, const float* v) override {
    if (!want_[size_t(layer)]) return;
    const tq::LayerConfig& lc = c_.layers[size_t(layer)];
    w_.write_layer(layer, lc.rope_theta, lc.sliding_window, lc.attn_scale, q, k, v);
    progress_.update(++written_);
  }
  int64_t written() const { return written_; }
  void finish() { progress_.finish(); }

 private:
  tq::KvDumpWriter& w_;
  const tq::ModelConfig& c_;
  std::vector<bool> want_;
  tq::Progress progress_;
  int64_t written_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tq-dump: write per-layer post-RoPE Q, K, V of a GGUF model over a text to HDF5"};
  std::string model_path, text_path, layers_spec = "all", dtype = "f16", out;
  int64_t max_tokens = 2048;
  app.add_option("--model", model_path,
                 "GGUF model file or a data/fetch_models.sh name (smollm2, gemma3, qwen0.5b, qwen1.5b)")
      ->required();
  app.add_option("--text", text_path, "UTF-8 text file; its first --max-tokens tokens are dumped")->required();
  app.add_option("--max-tokens", max_tokens, "at most this many tokens (BOS included), one forward pass")
      ->capture_default_str();
  app.add_option("--layers", layers_spec, "layers to dump: all, or a list like 0,1,28-29 / first2,last2")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "storage type of q/k/v: f16 | f32")->capture_default_str();
  app.add_option("--out", out, "output HDF5 file (written atomically)")->required();

  return tq::run_tool("tq-dump", app, argc, argv, [&]() -> int {
    TQ_CHECK(dtype == "f16" || dtype == "f32", "--dtype '{}' is not f16 or f32", dtype);
    TQ_CHECK(max_tokens >= 1, "--max-tokens {} must be at least 1", max_tokens);
    model_path = tq::resolve_model_arg(model_path);
    tq::check_layer_list_syntax(layers_spec, "--layers");
    const std::string text = tq::read_text_file(text_path);
    TQ_CHECK(!text.empty(), "{}: the text is empty", text_path);
    {
      struct stat st;
      TQ_CHECK(::stat(model_path.c_str(), &st) == 0, "{}: model file not found", model_path);
      // Fail before the slow part if the output cannot be written.
      const size_t slash = out.rfind('/');
      const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
      TQ_CHECK(::access(dir.c_str(), W_OK) == 0, "--out {}: directory '{}' is not writable or does not exist", out,
               dir);
    }

    const tq::Model model = tq::Model::load(model_path, /*verbose=*/false);
    const tq::ModelConfig& c = model.config();
    const std::vector<int> layers = tq::parse_layer_list(layers_spec, c.n_layers, "--layers");
    TQ_CHECK(!layers.empty(), "--layers '{}' selects no layer", layers_spec);
    std::vector<int32_t> tokens = model.tokenizer().encode(text);
    if (int64_t(tokens.size()) > max_tokens) tokens.resize(size_t(max_tokens));
    const int64_t bos = model.tokenizer().add_bos() ? 1 : 0;
    TQ_CHECK(int64_t(tokens.size()) > bos, "{}: the text has no tokens", text_path);

    tq::KvDumpHeader h;
    h.model = c.name;
    h.arch = c.arch;
    h.source_file = model_path;
    h.source_sha256 = tq::sha256_file(model_path);
    h.created_by = fmt::format("tq-dump (tqkit) --max-tokens {} --layers {} --dtype {}", max_tokens, layers_spec,
                               dtype);
    h.n_layers = c.n_layers;
    h.n_heads = c.n_heads;
    h.n_kv_heads = c.n_kv_heads;
    h.head_dim = c.head_dim;
    h.n_tokens = int64_t(tokens.size());
    h.tokens = tokens;
    h.f16 = dtype == "f16";

    std::fputs(model.load_log().c_str(), stderr);
    tq::AtomicOutput output(out);
    tq::KvDumpWriter writer(output.temp_path(), h);
    DumpCapture cap(writer, c, layers);
    model.forward(tokens, nullptr, -1, &cap);
    cap.finish();
    writer.close();
    output.commit();
    struct stat st;
    const double mb = ::stat(out.c_str(), &st) == 0 ? double(st.st_size) / 1e6 : 0.0;
    std::printf("wrote %s: %s (%s), %lld tokens, %lld of %d layers, %s, %.1f MB\n", out.c_str(), c.name.c_str(),
                c.arch.c_str(), (long long)tokens.size(), (long long)cap.written(), c.n_layers, dtype.c_str(), mb);
    return 0;
  });
}

// tq-eval: end-to-end quality of a GGUF model whose KV cache is stored in given
// formats: perplexity and KL divergence against an fp16 cache (llama-perplexity
// method, --task ppl) or passkey retrieval (--task passkey).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/app.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/json.h"
#include "tq/kv_store_basic.h"
#include "tq/layer_list.h"
#include "tq/model.h"
#include "tq/passkey.h"
#include "tq/paths.h"
#include "tq/perplexity.h"

int main(int argc, char** argv) {
  CLI::App app{"tq-eval: perplexity / KLD (reference: fp16 cache) or passkey retrieval of a model with its KV cache "
               "in a given format"};
  std::string task = "ppl", model_path, text_path, skip_layers = "none", matmul = "f32";
  std::vector<std::string> formats;
  int ctx = 512, chunks = -1, threads = 0;
  bool json = false, list_formats = false, center_keys = false;
  int list_head_dim = 128;
  tq::PasskeyOptions pk;
  app.add_option("--task", task, "ppl: perplexity and KLD; passkey: needle-in-a-haystack retrieval")
      ->check(CLI::IsMember({"ppl", "passkey"}))
      ->capture_default_str();
  app.add_option("--model", model_path, "GGUF model file or a data/fetch_models.sh name (smollm2, gemma3, qwen0.5b, qwen1.5b)");
  app.add_option("--text", text_path,
                 "UTF-8 text (default: ppl jargon-part1.txt, passkey jargon-lexicon.txt from data/fetch_text.sh)");
  app.add_option("--format", formats,
                 "KV format(s) or specs to evaluate against the f16 reference (repeatable; 'all' = every preset)");
  app.add_option("--ctx", ctx, "context window n_ctx; positions n_ctx/2..n_ctx-2 are scored")->capture_default_str();
  app.add_option("--chunks", chunks, "evaluate at most this many chunks (-1: all)")->capture_default_str();
  app.add_option("--skip-layers", skip_layers, "layers kept in fp16, e.g. first2,last2 or 0,1,28-29")
      ->capture_default_str();
  app.add_option("--threads", threads, "threads for the forward passes (0: all)")->capture_default_str();
  app.add_option("--matmul", matmul,
                 "weight products: f32 (exact, the reference) or int8 (integer weight codes x int8 activations, as "
                 "llama.cpp on a CPU; faster, see docs/models.md)")
      ->check(CLI::IsMember({"f32", "int8"}))
      ->capture_default_str();
  app.add_flag("--json", json, "machine-readable output");
  app.add_flag("--center-keys", center_keys,
               "quantize each head's keys minus their mean over the chunk (a non-causal diagnostic; formats are "
               "labelled NAME+ck)");
  app.add_flag("--list-formats", list_formats, "list registered formats and their sizes");
  app.add_option("--head-dim", list_head_dim, "head_dim for --list-formats")->capture_default_str();
  app.add_option("--lengths", pk.lengths, "passkey: sequence lengths in tokens")->delimiter(',')->capture_default_str();
  app.add_option("--depths", pk.depths, "passkey: needle depths in [0, 1]")->delimiter(',')->capture_default_str();
  app.add_option("--trials", pk.trials, "passkey: trials per (length, depth)")->capture_default_str();
  app.add_option("--seed", pk.seed, "passkey: seed of the keys and haystack offsets")->capture_default_str();

  return tq::run_tool("tq-eval", app, argc, argv, [&]() -> int {
    if (list_formats) {
      std::fputs(json ? (tq::dump_json(tq::list_formats_json(list_head_dim), 2) + "\n").c_str()
                      : tq::list_formats_text(list_head_dim).c_str(),
                 stdout);
      return 0;
    }
    TQ_CHECK(!model_path.empty(), "--model is required");
    model_path = tq::resolve_model_arg(model_path);
    if (text_path.empty()) text_path = task == "passkey" ? tq::long_text_path() : tq::default_text_path();
    formats = tq::expand_format_names(formats);
    TQ_CHECK(ctx >= 8, "--ctx {} is too small (at least 8)", ctx);
    TQ_CHECK(chunks == -1 || chunks >= 1, "--chunks {} must be -1 or at least 1", chunks);
    TQ_CHECK(threads >= 0, "--threads {} must be ≥ 0", threads);
    tq::check_layer_list_syntax(skip_layers, "--skip-layers");
    const std::string text = tq::read_text_file(text_path);
    TQ_CHECK(!text.empty(), "{}: the text is empty", text_path);

    const tq::Model model =
        tq::Model::load(model_path, /*verbose=*/false, matmul == "int8" ? tq::MatmulMode::int8 : tq::MatmulMode::f32);
    const tq::ModelConfig& c = model.config();
    tq::KvStoreOptions so;
    so.n_layers = c.n_layers;
    so.head_dim = c.head_dim;
    so.skip_layers = skip_layers;
    so.center_keys = center_keys;
    (void)tq::parse_layer_list(skip_layers, c.n_layers, "--skip-layers");  // range check
    std::vector<std::unique_ptr<tq::KvStore>> stores;
    std::vector<std::pair<std::string, tq::KvStore*>> list;
    for (const std::string& f : formats) {
      stores.push_back(tq::make_kv_store(f, so));
      list.emplace_back(center_keys ? f + "+ck" : f, stores.back().get());
    }
    const auto base = tq::make_kv_store("f16", so);
    if (!json) std::fputs(model.load_log().c_str(), stderr);

    if (task == "passkey") {
      list.insert(list.begin(), {"f16", base.get()});
      pk.n_threads = threads;
      std::unique_ptr<tq::Progress> bar;
      std::vector<tq::PasskeyTrial> trials;
      const auto results = tq::evaluate_passkey(model, text, list, pk, &trials, [&](int done, int total) {
        if (!bar) bar = std::make_unique<tq::Progress>("tq-eval: passkey forward passes", total);
        bar->update(done);
      });
      if (bar) bar->finish();
      if (json) {
        tq::Json arr = tq::Json::array();
        for (const auto& r : results) {
          tq::Json j = tq::passkey_result_json(r, trials);
          j["model"] = c.name;
          j["arch"] = c.arch;
          j["source_file"] = model_path;
          j["text"] = text_path;
          j["skip_layers"] = skip_layers;
          j["matmul"] = matmul;
          j["seed"] = pk.seed;
          arr.push_back(std::move(j));
        }
        std::printf("%s\n", tq::dump_json(arr, 2).c_str());
      } else {
        std::printf("%s (%s), passkey retrieval, haystack %s, seed %llu, fp16 layers: %s%s; retrieved/total per length\n",
                    c.name.c_str(), c.arch.c_str(), text_path.c_str(), static_cast<unsigned long long>(pk.seed),
                    skip_layers.c_str(), matmul == "int8" ? ", int8 weight products" : "");
        std::fputs(tq::passkey_report(trials, results).c_str(), stdout);
      }
      return 0;
    }

    tq::EvalOptions opt;
    opt.n_ctx = ctx;
    opt.max_chunks = chunks;
    opt.n_threads = threads;
    std::unique_ptr<tq::Progress> bar;
    const auto results = tq::evaluate_perplexity(model, text, base.get(), list, opt, [&](int done, int total) {
      if (!bar) bar = std::make_unique<tq::Progress>("tq-eval: chunks", total);
      bar->update(done);
    });
    if (bar) bar->finish();

    if (json) {  // one object per format (the f16 reference first)
      tq::Json arr = tq::Json::array();
      for (const auto& r : results) {
        tq::Json j = r;
        j["model"] = c.name;
        j["arch"] = c.arch;
        j["source_file"] = model_path;
        j["text"] = text_path;
        j["n_ctx"] = ctx;
        j["skip_layers"] = skip_layers;
        j["matmul"] = matmul;
        j["reference"] = "f16";
        arr.push_back(std::move(j));
      }
      std::printf("%s\n", tq::dump_json(arr, 2).c_str());
    } else {
      std::printf("%s (%s), %s, n_ctx %d, reference: f16 KV cache, fp16 layers: %s%s\n", c.name.c_str(),
                  c.arch.c_str(), text_path.c_str(), ctx, skip_layers.c_str(),
                  matmul == "int8" ? ", int8 weight products" : "");
      std::fputs(tq::perplexity_report(results).c_str(), stdout);
    }
    return 0;
  });
}

// A whole tq-ablate run: open and check every dump, plan the formats of the
// requested studies (tq/study.h), build them, fit the empirical codebooks, and
// ablate every selected layer of every dump (tq/ablation.h), layers in
// parallel. Results feed tq/ablation_report.h.
//
// Two steps, so that a caller can act between them (tq-ablate creates its
// output directory only once the inputs are known to be good):
//   plan_ablation   everything that can fail on bad input: opens and validates
//                   every dump, checks the layer selection, builds every format
//                   (each spec once per head_dim); throws tq::Error before any
//                   work starts
//   run_ablation    the work
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tq/ablation_report.h"
#include "tq/format.h"
#include "tq/kv_dump.h"
#include "tq/study.h"

namespace tq {

struct AblationConfig {
  std::vector<std::string> dumps;           // KV dumps (HDF5, tq-dump schema)
  std::vector<std::string> formats{"all"};  // names or specs; "all" = every registered preset
  std::vector<std::string> studies;         // presets qjl norm rotation codebook kv-bits all
  std::string layers;                       // e.g. "0,1,28-29"; empty = every layer of each dump
  int topk = 8;                             // k of the top-k agreement
  int threads = 1;                          // worker threads (layers in parallel)
  std::string command;                      // recorded in the results
};

// A checked run, ready to go. Per dump d: layers[d] are the layers to ablate,
// studies[d][i] is what formats[d][i] was planned as, and formats[d][i] is built
// (empty for a study format that needs the empirical fit: run_ablation builds
// it). results has its dumps and formats filled in, no rows yet.
struct AblationPlan {
  AblationConfig config;
  std::vector<KvDump> dumps;
  std::vector<std::vector<int>> layers;
  std::vector<std::vector<StudyFormat>> studies;
  std::vector<std::vector<KvFormat>> formats;
  AblationResults results;
  std::chrono::steady_clock::time_point started;

  int64_t total_layers() const;  // layers over all dumps (the progress total)
};

AblationPlan plan_ablation(const AblationConfig& config);

// Called after each layer with the layers done so far and the total, from the
// worker threads but never concurrently.
using AblationProgress = std::function<void(int64_t done, int64_t total)>;

// Ablates every planned layer; rows come in the same order whatever the thread
// count: by dump, layer, evaluation range (eval_from, in order of first
// appearance), format, KV head. results.seconds is the wall time since
// plan_ablation started. The first error of any worker is rethrown.
AblationResults run_ablation(AblationPlan plan, const AblationProgress& progress = {});

// plan_ablation + run_ablation.
AblationResults run_ablation(const AblationConfig& config, const AblationProgress& progress = {});

}  // namespace tq

// Passkey retrieval ("needle in a haystack") with the KV cache in a format.
//
// A trial hides a random 5-digit key in a sentence (the needle) at a given
// depth of a filler text and asks for it at the end (the prompt of Mohtashami
// & Jaggi 2023, "Landmark Attention", §4.2, with real text as the haystack):
//
//   [BOS] intro · haystack[0, p) · needle · haystack[p, H) · question · answer
//
//   intro    "There is an important piece of information hidden inside a lot of
//             irrelevant text. Find it and memorize it. I will quiz you about it
//             at the end.\n\n"
//   needle   "\nThe pass key is 48213. Remember it. 48213 is the pass key.\n"
//   question "\n\nWhat is the pass key? The pass key is"
//   answer   " 48213"
//
// The haystack is a contiguous run of the filler text's tokens starting at a
// seeded offset, sized so the whole sequence has `length` tokens; p is
// depth · H moved to the nearest line start within 64 tokens. The answer counts
// as retrieved when greedy decoding would produce exactly its tokens: one
// forward pass over the whole sequence, and at every answer position the
// argmax of the logits must be the answer's next token (teacher forcing gives
// the same decision as generating token by token, without re-running the
// prompt). The log-probability of the whole answer is reported as well.
//
// Keys, offsets and the trial list depend only on the seed, so every format
// sees the same trials, and the same seed gives the same trials on every machine.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tq/json.h"
#include "tq/kv_store.h"

namespace tq {

class Model;

struct PasskeyOptions {
  std::vector<int> lengths{1024, 2048, 4096, 8192};  // total tokens per trial
  std::vector<double> depths{0.0, 0.25, 0.5, 0.75, 1.0};  // needle position in [0, 1]
  int trials = 1;      // trials per (length, depth) cell
  uint64_t seed = 1;
  int n_threads = 0;   // forward-pass threads (0: all)
};

struct PasskeyTrial {
  int length = 0;          // tokens in the sequence
  double depth = 0;        // requested depth
  int index = 0;           // trial number within its cell
  std::string key;         // the 5 digits
  int64_t needle_token = 0;  // position of the needle's first token
  int64_t text_offset = 0;   // first haystack token's index in the tokenized filler
};
// {length, depth, trial, key, needle_token, text_offset}
void to_json(Json& j, const PasskeyTrial& t);

struct PasskeyOutcome {
  bool retrieved = false;
  std::string greedy;       // greedy answer up to and including its first wrong token
  double answer_logprob = 0;  // Σ log p(answer token | prefix), natural log
};
// {retrieved, greedy, answer_logprob}
void to_json(Json& j, const PasskeyOutcome& o);

struct PasskeyResult {
  std::string name;                      // format
  std::vector<PasskeyOutcome> outcomes;  // one per trial, in trial order
  int retrieved() const;
};
// tq-eval --task passkey --json: {format, retrieved, total, trials: [trial and outcome, one object each]};
// trials: the ones the outcomes belong to, in the same order.
Json passkey_result_json(const PasskeyResult& r, const std::vector<PasskeyTrial>& trials);

// The trials options describe (sequence-independent: lengths × depths × trials).
std::vector<PasskeyTrial> make_passkey_trials(const PasskeyOptions& opt);

// (done forward passes, total), called after each.
using PasskeyProgress = std::function<void(int, int)>;

// Runs every trial for every (name, store) pair (store may be nullptr: float32
// cache). `filler` is the haystack text; it must hold enough tokens for the
// longest trial (throws tq::Error naming the shortfall otherwise).
std::vector<PasskeyResult> evaluate_passkey(const Model& model, const std::string& filler,
                                            const std::vector<std::pair<std::string, KvStore*>>& formats,
                                            const PasskeyOptions& opt, std::vector<PasskeyTrial>* trials_out = nullptr,
                                            const PasskeyProgress& progress = {});

// Retrieved/total per format: one column per length and a total (for people).
std::string passkey_report(const std::vector<PasskeyTrial>& trials, const std::vector<PasskeyResult>& results);

}  // namespace tq

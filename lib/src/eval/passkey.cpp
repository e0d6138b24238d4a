#include "tq/passkey.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tq/error.h"
#include "tq/model.h"
#include "tq/rng.h"
#include "tq/tokenizer.h"

namespace tq {

namespace {

constexpr const char* kIntro =
    "There is an important piece of information hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about it at the end.\n\n";
constexpr const char* kQuestion = "\n\nWhat is the pass key? The pass key is";
constexpr int64_t kSnapWindow = 64;  // tokens searched each way for a line start

std::string needle_text(const std::string& key) {
  return fmt::format("\nThe pass key is {}. Remember it. {} is the pass key.\n", key, key);
}

std::vector<int32_t> tokens_of(const Tokenizer& tok, const std::string& s) { return tok.encode(s, false, false); }

// The position in [0, n] closest to `want` at which a new line starts (the
// token before it ends with '\n'), within kSnapWindow; `want` itself if none.
int64_t snap_to_line(const Tokenizer& tok, const std::vector<int32_t>& hay, int64_t want) {
  const int64_t n = int64_t(hay.size());
  auto line_start = [&](int64_t p) {
    if (p <= 0 || p >= n) return true;
    const std::string t = tok.decode({hay[size_t(p - 1)]});
    return !t.empty() && t.back() == '\n';
  };
  for (int64_t d = 0; d <= kSnapWindow; ++d) {
    if (want - d >= 0 && line_start(want - d)) return want - d;
    if (want + d <= n && line_start(want + d)) return want + d;
  }
  return want;
}

}  // namespace

int PasskeyResult::retrieved() const {
  return int(std::count_if(outcomes.begin(), outcomes.end(), [](const PasskeyOutcome& o) { return o.retrieved; }));
}

void to_json(Json& j, const PasskeyTrial& t) {
  j = Json{{"length", t.length}, {"depth", t.depth}, {"trial", t.index}, {"key", t.key},
           {"needle_token", t.needle_token}, {"text_offset", t.text_offset}};
}

void to_json(Json& j, const PasskeyOutcome& o) {
  j = Json{{"retrieved", o.retrieved}, {"greedy", o.greedy}, {"answer_logprob", o.answer_logprob}};
}

Json passkey_result_json(const PasskeyResult& r, const std::vector<PasskeyTrial>& trials) {
  TQ_ASSERT(trials.size() == r.outcomes.size());
  Json arr = Json::array();
  for (size_t i = 0; i < trials.size(); ++i) {
    Json j = trials[i];
    j.update(Json(r.outcomes[i]));  // appended after the trial's keys
    arr.push_back(std::move(j));
  }
  return Json{{"format", r.name},
              {"retrieved", r.retrieved()},
              {"total", int(r.outcomes.size())},
              {"trials", std::move(arr)}};
}

std::vector<PasskeyTrial> make_passkey_trials(const PasskeyOptions& opt) {
  TQ_CHECK(!opt.lengths.empty() && !opt.depths.empty(), "passkey: no lengths or no depths given");
  TQ_CHECK(opt.trials >= 1, "passkey: trials per cell must be at least 1 (got {})", opt.trials);
  for (int l : opt.lengths) TQ_CHECK(l >= 256, "passkey: length {} is too short (at least 256 tokens)", l);
  for (double d : opt.depths)
    TQ_CHECK(std::isfinite(d) && d >= 0.0 && d <= 1.0, "passkey: depth {} is not in [0, 1]", d);
  Rng rng(mix_seed(opt.seed, 0x9a55));
  std::vector<PasskeyTrial> trials;
  for (int l : opt.lengths)
    for (double d : opt.depths)
      for (int i = 0; i < opt.trials; ++i) {
        PasskeyTrial t;
        t.length = l;
        t.depth = d;
        t.index = i;
        t.key = fmt::format("{}", 10000 + rng.below(90000));  // 5 digits, no leading zero
        t.text_offset = int64_t(rng.next_u64() >> 11);        // reduced modulo the room once the text is known
        trials.push_back(t);
      }
  return trials;
}

std::vector<PasskeyResult> evaluate_passkey(const Model& model, const std::string& filler,
                                            const std::vector<std::pair<std::string, KvStore*>>& formats,
                                            const PasskeyOptions& opt, std::vector<PasskeyTrial>* trials_out,
                                            const PasskeyProgress& progress) {
  TQ_CHECK(!formats.empty(), "passkey: no formats to evaluate");
  const Tokenizer& tok = model.tokenizer();
  std::vector<PasskeyTrial> trials = make_passkey_trials(opt);
  const int n_ctx_train = model.config().n_ctx_train;
  for (int l : opt.lengths)
    TQ_CHECK(n_ctx_train == 0 || l <= n_ctx_train,
             "passkey: length {} is beyond the {} tokens {} was trained on ({}.context_length)", l, n_ctx_train,
             model.config().name, model.config().arch);
  const std::vector<int32_t> text = tokens_of(tok, filler);
  const std::vector<int32_t> intro = tokens_of(tok, kIntro), question = tokens_of(tok, kQuestion);
  const bool bos = tok.add_bos();

  std::vector<std::vector<int32_t>> sequences;
  std::vector<int64_t> answer_len;
  for (PasskeyTrial& t : trials) {
    const std::vector<int32_t> needle = tokens_of(tok, needle_text(t.key)), answer = tokens_of(tok, " " + t.key);
    const int64_t fixed = int64_t(bos) + int64_t(intro.size() + needle.size() + question.size() + answer.size());
    const int64_t hay_len = int64_t(t.length) - fixed;
    TQ_CHECK(hay_len >= 16, "passkey: length {} leaves no room for filler text ({} tokens of prompt)", t.length,
             fixed);
    TQ_CHECK(int64_t(text.size()) >= hay_len, "passkey: the filler text has {} tokens, a {}-token trial needs {}",
             text.size(), t.length, hay_len);
    t.text_offset = t.text_offset % (int64_t(text.size()) - hay_len + 1);
    const std::vector<int32_t> hay(text.begin() + t.text_offset, text.begin() + t.text_offset + hay_len);
    const int64_t p = snap_to_line(tok, hay, int64_t(std::llround(t.depth * double(hay_len))));
    std::vector<int32_t> s;
    s.reserve(size_t(t.length));
    if (bos) s.push_back(tok.bos_id());
    s.insert(s.end(), intro.begin(), intro.end());
    s.insert(s.end(), hay.begin(), hay.begin() + p);
    t.needle_token = int64_t(s.size());
    s.insert(s.end(), needle.begin(), needle.end());
    s.insert(s.end(), hay.begin() + p, hay.end());
    s.insert(s.end(), question.begin(), question.end());
    s.insert(s.end(), answer.begin(), answer.end());
    TQ_ASSERT(int64_t(s.size()) == t.length);
    sequences.push_back(std::move(s));
    answer_len.push_back(int64_t(answer.size()));
  }

  std::vector<PasskeyResult> results;
  for (const auto& f : formats) results.push_back({f.first, {}});
  const int total = int(trials.size() * formats.size());
  int done = 0;
  ForwardOptions fo;
  fo.n_threads = opt.n_threads;
  for (size_t i = 0; i < trials.size(); ++i) {
    const std::vector<int32_t>& s = sequences[i];
    const int64_t n = int64_t(s.size()), na = answer_len[i];
    for (size_t fi = 0; fi < formats.size(); ++fi) {
      // Rows n−na−1 .. n−2 predict the answer's tokens; the last row is not needed.
      const RowMatrix logits = model.forward(s, formats[fi].second, n - na - 1, nullptr, fo);
      PasskeyOutcome o;
      o.retrieved = true;
      for (int64_t a = 0; a < na; ++a) {
        const float* row = logits.data() + a * logits.cols();
        const int64_t nv = logits.cols();
        int64_t am = 0;
        for (int64_t v = 1; v < nv; ++v)
          if (row[v] > row[am]) am = v;
        double lse = 0;
        for (int64_t v = 0; v < nv; ++v) lse += std::exp(double(row[v]) - double(row[am]));
        lse = double(row[am]) + std::log(lse);
        TQ_CHECK(std::isfinite(lse), "passkey: non-finite logits in format {} (trial {})", formats[fi].first, i);
        const int32_t want = s[size_t(n - na + a)];
        o.answer_logprob += double(row[want]) - lse;
        if (o.retrieved) {
          o.greedy += tok.decode({int32_t(am)});
          if (am != want) o.retrieved = false;
        }
      }
      results[fi].outcomes.push_back(std::move(o));
      if (progress) progress(++done, total);
    }
  }
  if (trials_out) *trials_out = trials;
  return results;
}

std::string passkey_report(const std::vector<PasskeyTrial>& trials, const std::vector<PasskeyResult>& results) {
  std::vector<int> lengths;
  for (const auto& t : trials)
    if (std::find(lengths.begin(), lengths.end(), t.length) == lengths.end()) lengths.push_back(t.length);
  std::string s = fmt::format("{:<24}", "format");
  for (int l : lengths) s += fmt::format(" {:>9}", fmt::format("{}", l));
  s += fmt::format(" {:>9} {:>16}\n", "total", "mean log p(key)");
  for (const auto& r : results) {
    s += fmt::format("{:<24}", r.name);
    double lp = 0;
    for (int l : lengths) {
      int hit = 0, n = 0;
      for (size_t i = 0; i < trials.size(); ++i)
        if (trials[i].length == l) {
          ++n;
          hit += r.outcomes[i].retrieved;
        }
      s += fmt::format(" {:>9}", fmt::format("{}/{}", hit, n));
    }
    for (const auto& o : r.outcomes) lp += o.answer_logprob;
    s += fmt::format(" {:>9} {:>16.4f}\n", fmt::format("{}/{}", r.retrieved(), r.outcomes.size()),
                     lp / double(std::max<size_t>(1, r.outcomes.size())));
  }
  return s;
}

}  // namespace tq

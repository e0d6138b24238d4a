#include "common/app.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <vector>

#include <CLI/CLI.hpp>

#include "tq/error.h"

namespace tq {

int run_tool(const char* tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  bool verbose = false;
  app.add_flag("--verbose", verbose, "on an error, also print where in the source it was raised");
  // Also after a subcommand (tq-codebook solve … --verbose): options a subcommand
  // does not know go on to the parent, whose only other option is --help.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp& e) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return kExitBadInput;
  }
  try {
    return body();
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    if (verbose) std::fprintf(stderr, "%s: error raised at %s\n", tool, e.where().c_str());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return 1;
  }
}

std::string executable_dir() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size());
  if (n <= 0 || size_t(n) >= buf.size()) return "";
  const std::string exe(buf.data(), size_t(n));
  const auto slash = exe.find_last_of('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

// ---- AtomicOutput --------------------------------------------------------
namespace {
// Temporary files to remove if a signal arrives. Fixed-size table: the signal
// handler may only touch async-signal-safe state.
constexpr int kMaxTemps = 16;
char g_temps[kMaxTemps][4096];
std::atomic<bool> g_used[kMaxTemps];
std::once_flag g_handlers;

extern "C" void remove_temps_and_die(int sig) {
  for (int i = 0; i < kMaxTemps; ++i)
    if (g_used[i].load()) ::unlink(g_temps[i]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int register_temp(const std::string& p) {
  std::call_once(g_handlers, [] {
    std::signal(SIGINT, remove_temps_and_die);
    std::signal(SIGTERM, remove_temps_and_die);
    std::signal(SIGHUP, remove_temps_and_die);
  });
  for (int i = 0; i < kMaxTemps; ++i) {
    if (!g_used[i].load() && p.size() < sizeof g_temps[i]) {
      std::snprintf(g_temps[i], sizeof g_temps[i], "%s", p.c_str());
      g_used[i].store(true);
      return i;
    }
  }
  return -1;
}

void unregister_temp(const std::string& p) {
  for (int i = 0; i < kMaxTemps; ++i)
    if (g_used[i].load() && p == g_temps[i]) g_used[i].store(false);
}
}  // namespace

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  TQ_CHECK(!path_.empty(), "output path is empty");
  temp_ = path_ + ".tmp." + std::to_string(::getpid());
  register_temp(temp_);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) ::unlink(temp_.c_str());
  unregister_temp(temp_);
}

void AtomicOutput::commit() {
  TQ_CHECK(std::rename(temp_.c_str(), path_.c_str()) == 0, "cannot move '{}' into place as '{}'", temp_, path_);
  committed_ = true;
}

void write_output(const std::string& path, const std::string& text) {
  AtomicOutput out(path);
  std::ofstream f(out.temp_path());
  f << text;
  f.close();
  TQ_CHECK(f.good(), "cannot write {}", out.path());
  out.commit();
}

// ---- Progress ---------------------------------------------------------------
namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), tty_(::isatty(2)), start_(now_s()) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done) {
  if (!tty_ || total_ <= 0) return;
  const int64_t pct = done * 100 / total_;
  if (pct == last_) return;
  last_ = pct;
  const int width = 30, fill = int(done * width / total_);
  const double el = now_s() - start_;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3lld%% %lld/%lld %.0fs", label_.c_str(), fill,
               "##############################", width - fill, "", (long long)pct, (long long)done,
               (long long)total_, el);
  std::fflush(stderr);
}

void Progress::finish() {
  if (done_) return;
  done_ = true;
  if (tty_ && last_ >= 0) std::fputs("\n", stderr);
}

}  // namespace tq

// Shared plumbing for the command-line tools (the tq_app library, apps/ only):
// error → exit code mapping, outputs that appear only when complete, a
// terminal progress bar, where the running executable lives.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace CLI { class App; }

namespace tq {

// Exit codes: 0 ok; 2 bad input or usage (tq::Error, CLI11 parse errors);
// 1 anything unexpected. Messages go to stderr as "<tool>: error: <what>".
constexpr int kExitBadInput = 2;

// Adds --verbose to app, parses argv with CLI11 and runs body; maps exceptions
// to exit codes. With --verbose, a tq::Error is followed by a second line
// "<tool>: error raised at <file>:<line>" (tq::Error::where()).
int run_tool(const char* tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// The directory of the running executable (/proc/self/exe), or "" when unknown.
std::string executable_dir();

// An output file that is written under a temporary name beside the target and
// renamed into place by commit(). If the object dies uncommitted (error,
// exception) or the process gets SIGINT/SIGTERM, the temporary is removed, so
// a failed or interrupted run leaves no partial file behind.
class AtomicOutput {
 public:
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  const std::string& temp_path() const { return temp_; }
  const std::string& path() const { return path_; }
  void commit();  // rename temp → path (throws tq::Error on failure)

 private:
  std::string path_, temp_;
  bool committed_ = false;
};

// Writes text to path through an AtomicOutput; tq::Error "cannot write <path>"
// when it cannot.
void write_output(const std::string& path, const std::string& text);

// A progress bar on stderr, drawn only when stderr is a terminal.
class Progress {
 public:
  Progress(std::string label, int64_t total);
  ~Progress();
  void update(int64_t done);
  void finish();

 private:
  std::string label_;
  int64_t total_, last_ = -1;
  bool tty_, done_ = false;
  double start_;
};

}  // namespace tq

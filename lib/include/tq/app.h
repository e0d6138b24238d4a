// Shared plumbing for the command-line tools: error → exit code mapping,
// outputs that appear only when complete, and a terminal progress bar.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace CLI { class App; }

namespace tq {

// Exit codes: 0 ok; 2 bad input or usage (tq::Error, CLI11 parse errors);
// 1 anything unexpected. Messages go to stderr as "<tool>: error: <what>".
constexpr int kExitBadInput = 2;

// Parses argv with CLI11 and runs body; maps exceptions to exit codes.
int run_tool(const char* tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body);

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

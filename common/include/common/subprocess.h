// Child processes: start a binary, signal it, wait for it with a timeout.
//
// The child runs in its own process group, with stdout and stderr sent to files (read them with
// Stdout()/Stderr()), and is killed by the kernel if the parent dies (PR_SET_PDEATHSIG), so a
// failing test or tool never leaves processes behind. The destructor kills the group and reaps
// it. PR_SET_PDEATHSIG fires when the *thread* that started the child exits, not only the
// process: start a child that must outlive a helper thread from a thread that lives as long. Used
// by tools that launch ranks (hfreduce-bench) and by the integration tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace ff {

// The one fork/exec of the code base. The child gets its own process group (signal it as -pid),
// stdin from /dev/null, stdout and stderr on the given descriptors, an empty signal mask (daemons
// block SIGTERM/SIGINT in their threads), and the caller's environment with `env` added (or
// replacing). Everything is prepared before fork; the child makes only async-signal-safe calls.
struct SpawnOptions {
  std::vector<std::string> argv;           // argv[0] is the program's path
  std::map<std::string, std::string> env;  // added to (or replacing in) the caller's environment
  std::string workdir;                     // empty: the caller's; a failed chdir exits 127
  int stdout_fd = -1;                      // -1: the caller's
  int stderr_fd = -1;                      // -1: the caller's
  // Killed (SIGKILL) when the thread that spawned it exits: for tools and tests, never for a
  // job that must outlive its agent.
  bool die_with_parent = true;
};
Result<pid_t> Spawn(const SpawnOptions& options);

class Subprocess {
 public:
  struct Options {
    std::map<std::string, std::string> env;  // added to (or replacing in) the test's environment
    std::string output_dir;  // where <name>.out / <name>.err go; default: $TMPDIR or /tmp
  };

  static Result<Subprocess> Start(const std::vector<std::string>& argv, const Options& options);
  static Result<Subprocess> Start(const std::vector<std::string>& argv) {
    return Start(argv, Options{});
  }

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  void Signal(int sig) const;
  // The exit code (0..255), or 128 + signal number when killed by a signal; nullopt when still
  // running after `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool running() const { return pid_ > 0 && !exit_code_; }

  std::string Stdout() const;
  std::string Stderr() const;

 private:
  Subprocess(pid_t pid, std::string out_path, std::string err_path);

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string out_path_;
  std::string err_path_;
};

}  // namespace ff

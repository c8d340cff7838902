#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ff {
namespace {
std::atomic<int> next_id{0};
}  // namespace

Result<pid_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgument("Spawn: empty argv");
  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> args;
  for (std::string& a : argv_strings)
    args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    std::string key = entry.substr(0, entry.find('='));
    if (!options.env.contains(key)) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : options.env)
    env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string bad_dir = "cannot enter the working directory " + options.workdir + "\n";
  const std::string exec_failed = "cannot run " + options.argv[0] + "\n";

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    setpgid(0, 0);
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before the line above
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    if (options.stdout_fd >= 0) dup2(options.stdout_fd, STDOUT_FILENO);
    if (options.stderr_fd >= 0) dup2(options.stderr_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!options.workdir.empty() && chdir(options.workdir.c_str()) != 0) {
      (void)!write(STDERR_FILENO, bad_dir.data(), bad_dir.size());
      _exit(127);
    }
    execve(args[0], args.data(), envp.data());
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with a signal sent right after
  return pid;
}

Result<Subprocess> Subprocess::Start(const std::vector<std::string>& argv, const Options& options) {
  if (argv.empty()) return InvalidArgument("Subprocess::Start: empty argv");
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = !options.output_dir.empty() ? options.output_dir
                    : (tmp && *tmp)             ? std::string(tmp)
                                                : std::string("/tmp");
  std::string base = dir + "/" + std::filesystem::path(argv[0]).filename().string() + "." +
                     std::to_string(getpid()) + "." + std::to_string(next_id++);
  std::string out_path = base + ".out";
  std::string err_path = base + ".err";
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return Status::FromErrno(errno, "cannot create " + out_path);
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err < 0) {
    close(out);
    return Status::FromErrno(errno, "cannot create " + err_path);
  }
  Result<pid_t> pid = Spawn({.argv = argv,
                             .env = options.env,
                             .workdir = "",
                             .stdout_fd = out,
                             .stderr_fd = err,
                             .die_with_parent = true});
  close(out);
  close(err);
  if (!pid.ok()) return pid.status();
  return Subprocess(*pid, out_path, err_path);
}

Subprocess::Subprocess(pid_t pid, std::string out_path, std::string err_path)
    : pid_(pid), out_path_(std::move(out_path)), err_path_(std::move(err_path)) {}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_),
      exit_code_(other.exit_code_),
      out_path_(std::move(other.out_path_)),
      err_path_(std::move(other.err_path_)) {
  other.pid_ = -1;
}

Subprocess::~Subprocess() {
  if (pid_ <= 0) return;
  if (!exit_code_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  } else {
    kill(-pid_, SIGKILL);  // anything the child left in its group
  }
  std::remove(out_path_.c_str());
  std::remove(err_path_.c_str());
}

void Subprocess::Signal(int sig) const {
  if (pid_ > 0 && !exit_code_) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

namespace {
std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

std::string Subprocess::Stdout() const {
  return ReadWhole(out_path_);
}
std::string Subprocess::Stderr() const {
  return ReadWhole(err_path_);
}

}  // namespace ff

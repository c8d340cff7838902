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

  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
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

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 || err < 0) _exit(127);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(args[0], args.data(), envp.data());
    dprintf(STDERR_FILENO, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  return Subprocess(pid, out_path, err_path);
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

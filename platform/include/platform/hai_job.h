// The job side of HAI-Platform's suspend protocol, for C++ training code (header only).
//
// When the scheduler needs a job's nodes for a higher-priority job, the node agent sends the
// job's process group SIGUSR1 and creates the file named by $HAI_SUSPEND_FLAG, then waits a grace
// period before killing it. A job that wants to keep its progress:
//
//   hai::job::InstallSuspendHandler();          // once, at start
//   for (step = Restore(); ...; ++step) {        // $HAI_CHECKPOINT_DIR holds its checkpoints
//     Train(step);
//     if (hai::job::ShouldSuspend()) {           // asked to make room
//       SaveCheckpoint(step);
//       hai::job::SuspendNow();                  // "I have checkpointed, suspend me now"
//     }
//   }
//
// The job is requeued and later restarted with $HAI_RESTART_COUNT incremented; it resumes from its
// checkpoint. Its deadline comes from how long its checkpoints take, which it reports:
//
//   hai::job::ReportCheckpoint(step, bytes, write_seconds);   // after each completed checkpoint
//   double deadline = hai::job::SuspendDeadline();           // once asked: when it is killed
//
// A job reports its training metrics for `hai metrics` and hai-web's plots:
//
//   hai::job::Report(step, {{"loss", loss}, {"lr", lr}});
//
// (one JSON line in $HAI_METRICS_FILE; its format: platform/job_metrics.h).
//
// And its steps, for `hai top` and the platform's straggler detection (what haiscale does by
// itself for Python code; one JSON line per step in $HAI_STEPS_FILE):
//
//   hai::job::StepRecorder steps;                // does nothing outside HAI-Platform
//   for (...) {
//     { auto t = steps.Time(hai::job::Phase::kData); batch = NextBatch(); }
//     Forward(); Backward();
//     { auto t = steps.Time(hai::job::Phase::kComm); comm->Allreduce(...); }  // one collective
//     steps.Done();                              // the step's wall time, and where it went
//   }
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace hai::job {

namespace detail {
inline volatile sig_atomic_t g_signalled = 0;
inline void OnSignal(int) {
  g_signalled = 1;
}
}  // namespace detail

// Catches SIGUSR1 so that ShouldSuspend reports it. (Jobs start with SIGUSR1 ignored, so that a
// job that does not call this is not ended by the signal; it can still poll the flag.)
inline void InstallSuspendHandler() {
  struct sigaction sa {};
  sa.sa_handler = detail::OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

// True once the platform asked this job to suspend (the signal arrived or the flag exists).
inline bool ShouldSuspend() {
  if (detail::g_signalled) return true;
  const char* flag = std::getenv("HAI_SUSPEND_FLAG");
  return flag != nullptr && access(flag, F_OK) == 0;
}

// How many times the job was started before this run (0 on its first run).
inline int RestartCount() {
  const char* v = std::getenv("HAI_RESTART_COUNT");
  return v ? std::atoi(v) : 0;
}

// Where the job keeps checkpoints across runs ("" outside HAI-Platform).
inline std::string CheckpointDir() {
  const char* v = std::getenv("HAI_CHECKPOINT_DIR");
  return v ? v : "";
}

// When the platform kills this job if it has not exited (seconds since the epoch), once it was
// asked to suspend: the deadline its agent wrote into $HAI_SUSPEND_FLAG ({"deadline": ...}, from
// its checkpoints' write time). 0 before that, or outside HAI-Platform.
inline double SuspendDeadline() {
  const char* flag = std::getenv("HAI_SUSPEND_FLAG");
  if (flag == nullptr || !ShouldSuspend()) return 0;
  int fd = open(flag, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* at = std::strstr(buf, "\"deadline\":");
  return at != nullptr ? std::strtod(at + 11, nullptr) : 0;
}

// Tells the platform this rank completed the checkpoint of `step`: `bytes` written in `write_s`
// seconds (one line in $HAI_STEPS_FILE), so that it knows what suspending the job costs and how
// long to give it. Nothing outside HAI-Platform (true); false, writing nothing, for a negative or
// non-finite argument, or when the write failed.
inline bool ReportCheckpoint(int64_t step, double bytes, double write_s) {
  static int fd = [] {
    const char* path = std::getenv("HAI_STEPS_FILE");
    return path && *path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -2;
  }();
  if (step < 0 || !std::isfinite(bytes) || bytes < 0 || !std::isfinite(write_s) || write_s < 0) {
    return false;
  }
  if (fd == -2) return true;
  if (fd < 0) return false;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const char* run = std::getenv("HAI_RUN");
  char line[320];
  const int n = std::snprintf(
      line, sizeof line,
      "{\"step\": %lld, \"time\": %.3f%s%s, \"ckpt_step\": %lld, \"ckpt_bytes\": %.17g, "
      "\"ckpt_write_s\": %.6f}\n",
      static_cast<long long>(step), now, run && *run ? ", \"run\": " : "",
      run && *run ? std::to_string(std::atoi(run)).c_str() : "", static_cast<long long>(step),
      bytes, write_s);
  return n > 0 && n < static_cast<int>(sizeof line) && write(fd, line, n) == n;
}

// Ends the process after a checkpoint: the platform records the job as suspended (not failed)
// and requeues it.
[[noreturn]] inline void SuspendNow() {
  std::fflush(nullptr);
  std::_Exit(0);
}

namespace detail {
inline bool MetricName(std::string_view name) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (name.empty() || name.size() > 64 || !alpha(name.front())) return false;
  for (char c : name) {
    if (!alpha(c) && !(c >= '0' && c <= '9') && c != '.' && c != ':' && c != '/' && c != '-') {
      return false;
    }
  }
  return name != "step" && name != "time" && name != "run";
}
}  // namespace detail

// Records this rank's metrics for `step` (a non-finite value is kept as "not finite"). Outside
// HAI-Platform ($HAI_METRICS_FILE unset) it does nothing and returns true; it returns false, and
// writes nothing, for a step < 0 or a name that is not 1 to 64 of [A-Za-z0-9_.:/-] beginning with
// a letter or '_' (or is "step", "time" or "run"), or when the write failed.
inline bool Report(int64_t step,
                   std::initializer_list<std::pair<std::string_view, double>> values) {
  static int fd = [] {
    const char* path = std::getenv("HAI_METRICS_FILE");
    return path && *path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -2;
  }();
  if (step < 0) return false;
  for (const auto& [name, value] : values)
    if (!detail::MetricName(name)) return false;
  if (fd == -2) return true;
  if (fd < 0) return false;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const char* run = std::getenv("HAI_RUN");
  std::string line = "{\"step\": " + std::to_string(step);
  char number[64];
  std::snprintf(number, sizeof number, "%.3f", now);
  line += std::string(", \"time\": ") + number;
  if (run && *run) line += std::string(", \"run\": ") + std::to_string(std::atoi(run));
  for (const auto& [name, value] : values) {
    if (std::isfinite(value)) {
      std::snprintf(number, sizeof number, "%.17g", value);
    } else {
      std::snprintf(number, sizeof number, "null");
    }
    line += ", \"";
    line += name;
    line += "\": ";
    line += number;
  }
  line += "}\n";
  // One write of the whole line (O_APPEND): a reader never sees half of it beside another's.
  return write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

enum class Phase { kData, kCheckpoint, kComm };

// Records each step of this rank in $HAI_STEPS_FILE: step_s (from one Done() to the next; the
// first from construction), comm_s and collectives (the Time(kComm) spans: one collective each),
// data_s, ckpt_s, and compute_s (what they leave). Not thread-safe: one training thread.
class StepRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  StepRecorder() : last_(Clock::now()) {
    const char* path = std::getenv("HAI_STEPS_FILE");
    fd_ = path && *path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -2;
    const char* run = std::getenv("HAI_RUN");
    run_ = run && *run ? std::atoi(run) : -1;
  }
  ~StepRecorder() {
    if (fd_ >= 0) close(fd_);
  }
  StepRecorder(const StepRecorder&) = delete;
  StepRecorder& operator=(const StepRecorder&) = delete;

  // Whether steps are recorded (under HAI-Platform, the file open).
  bool recording() const { return fd_ >= 0; }

  // Counts `seconds` of the current step as `phase` (kComm: one collective).
  void Add(Phase phase, double seconds) {
    seconds_[static_cast<int>(phase)] += seconds;
    if (phase == Phase::kComm) ++collectives_;
  }

  // The time until it goes out of scope counts as `phase`.
  class Span {
   public:
    Span(StepRecorder* r, Phase p) : r_(r), p_(p), began_(Clock::now()) {}
    ~Span() { r_->Add(p_, std::chrono::duration<double>(Clock::now() - began_).count()); }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    StepRecorder* r_;
    Phase p_;
    Clock::time_point began_;
  };
  [[nodiscard]] Span Time(Phase phase) { return Span(this, phase); }

  // Ends the current step (numbered `step`, or one more than the last when < 0) and writes its
  // record. False when the write failed (true outside the platform).
  bool Done(int64_t step = -1) {
    const Clock::time_point now = Clock::now();
    const double step_s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    step_ = step >= 0 ? step : step_ + 1;
    const double data = seconds_[0], ckpt = seconds_[1], comm = seconds_[2];
    const int collectives = collectives_;
    seconds_[0] = seconds_[1] = seconds_[2] = 0;
    collectives_ = 0;
    if (fd_ == -2) return true;
    if (fd_ < 0) return false;
    const double wall =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    char line[512];
    const int n = std::snprintf(
        line, sizeof line,
        "{\"step\": %lld, \"time\": %.3f%s, \"step_s\": %.6f, \"compute_s\": %.6f, "
        "\"comm_s\": %.6f, \"collectives\": %d, \"data_s\": %.6f, \"ckpt_s\": %.6f}\n",
        static_cast<long long>(step_), wall,
        run_ >= 0 ? (", \"run\": " + std::to_string(run_)).c_str() : "", step_s,
        std::max(0.0, step_s - comm - data - ckpt), comm, collectives, data, ckpt);
    return n > 0 && write(fd_, line, static_cast<std::size_t>(n)) == n;
  }

 private:
  int fd_ = -2;  // -2: not under the platform
  int run_ = -1;
  int64_t step_ = 0;
  Clock::time_point last_;
  double seconds_[3] = {0, 0, 0};
  int collectives_ = 0;
};

}  // namespace hai::job

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
// checkpoint.
//
// A job reports its training metrics for `hai metrics` and hai-web's plots:
//
//   hai::job::Report(step, {{"loss", loss}, {"lr", lr}});
//
// (one JSON line in $HAI_METRICS_FILE; its format: platform/job_metrics.h).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

}  // namespace hai::job

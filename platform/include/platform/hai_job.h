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
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace hai::job

// The stateful probes of hai-health: a follower of the kernel log, the fs3 mount probe (which must
// survive a mount that hangs), and the periodic validators (memory bandwidth, an HFReduce
// allreduce between two local ranks). Not thread-safe: one monitor thread drives them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "platform/health/checks.h"

namespace ff::health {

// Follows a kernel log: /dev/kmsg (a character device: one record per read, from boot on, so a
// restarted hai-health still sees an error logged since boot), or a regular file with one record
// per line (tests, or a copy made by journald), read from its start and then as it grows.
class KernelLog {
 public:
  explicit KernelLog(std::string path) : path_(std::move(path)) {}
  ~KernelLog();
  KernelLog(const KernelLog&) = delete;
  KernelLog& operator=(const KernelLog&) = delete;

  // Hardware errors logged since the last call. When the log cannot be opened or read, returns
  // what it has and sets error() (retried on the next call).
  std::vector<KernelEvent> Poll();
  const std::string& error() const { return error_; }

 private:
  void HandleLine(std::string_view line, std::vector<KernelEvent>* out);

  std::string path_;
  int fd_ = -1;
  bool device_ = false;
  std::string partial_;  // a regular file's last line before its newline arrives
  std::string error_;
};

// Stats the fs3 mount's root in a helper thread so that a hung FUSE daemon cannot hang the
// monitor: a probe still running after `timeout` fails the check, and no second probe is started
// until it returns.
class MountProbe {
 public:
  MountProbe(std::string path, std::chrono::milliseconds timeout)
      : path_(std::move(path)), timeout_(timeout) {}
  CheckResult Check(double* seconds);

 private:
  struct State {
    std::atomic<bool> done{true};
    int error = 0;  // errno of the last stat / statvfs
    bool is_fuse = false;
    std::chrono::steady_clock::time_point started;
  };
  std::string path_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

// Copies a buffer of `bytes` back and forth and reports the copy rate in GB/s (read + write
// bytes per second), the best of a few passes.
double MeasureMemoryBandwidth(std::size_t bytes);
CheckResult CheckMemoryBandwidth(double gbps, double min_gbps);

// Two ranks in this process, one node (shared memory and the CPU reducer, HFReduce's intra-node
// path), allreduce `bytes` of float32 a few times: the result must be exact, and the rate (bytes
// per second of one rank's buffer) at least `min_gbps`. Any failure or a wrong value fails.
CheckResult RunLoopbackAllreduce(std::size_t bytes, double min_gbps,
                                 std::chrono::milliseconds timeout, double* gbps);

}  // namespace ff::health

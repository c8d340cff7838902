// hai-health's monitor: every `interval_ms` it runs the node's checks (GPUs, InfiniBand ports,
// hardware errors in the kernel log, disks, memory, the fs3 mount) and, every
// `validator_interval_s`, the validators (memory bandwidth, an HFReduce loopback allreduce);
// exports each result as metrics and reports them to hai-server, which drains the node while a
// check fails and undrains it when all pass (hai.proto, ReportHealth).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/thread_annotations.h"
#include "monitoring/metrics.h"
#include "platform/client.h"
#include "platform/health/checks.h"
#include "platform/health/probes.h"
#include "platform/proto/hai.grpc.pb.h"

namespace ff::health {

struct HealthOptions {
  static constexpr const char* kSection = "health";
  std::string node;        // this node's name in cluster.toml (required)
  std::string server;      // hai-server host:port; empty: export metrics only
  std::string token_file;  // the agent token (required with `server`)
  int64_t interval_ms = 5000;
  int64_t gpus = 0;      // GPUs the node must show through NVML (0: any number, none included)
  int64_t ib_ports = 0;  // ACTIVE InfiniBand ports the node must have (0: report only)
  std::string ib_sysfs = "/sys/class/infiniband";
  std::string kernel_log = "/dev/kmsg";  // or a file with one kernel record per line
  // How long a fatal hardware error (a GPU off the bus, an uncorrectable ECC error) keeps the
  // "kernel" check failing; 0: until hai-health restarts (with /dev/kmsg: until a reboot).
  int64_t hardware_error_hold_s = 0;
  std::vector<std::string> disks = {"/"};  // paths whose file systems need min_free_disk_mib
  int64_t min_free_disk_mib = 1024;
  std::string meminfo = "/proc/meminfo";
  int64_t min_available_memory_mib = 512;
  std::string fs3_mount;  // the fs3-fuse mount point to probe (empty: none)
  int64_t mount_timeout_ms = 5000;
  int64_t validator_interval_s = 300;  // 0: no validators
  int64_t memory_bandwidth_mib = 256;  // buffer copied by the memory-bandwidth validator
  double min_memory_bandwidth_gbps = 0;
  int64_t allreduce_mib = 16;  // float32 buffer of the HFReduce loopback validator
  double min_allreduce_gbps = 0;

  void Bind(ConfigSection& s);
};

class HealthMonitor {
 public:
  // `metrics` (not owned) must outlive the monitor.
  static Result<std::unique_ptr<HealthMonitor>> Create(const HealthOptions& options,
                                                       Metrics* metrics);
  ~HealthMonitor();

  // Runs every check once (validators included) and returns the results; Start() then repeats
  // them in a thread until Stop().
  std::vector<CheckResult> RunOnce(bool validators);
  void Start();
  void Stop();

  // Sends `checks` to hai-server (no-op without a server).
  Status Report(const std::vector<CheckResult>& checks);

 private:
  HealthMonitor(const HealthOptions& options, std::string token, Metrics* metrics);
  void Loop();
  CheckResult CheckKernel();

  const HealthOptions options_;
  const std::string token_;
  Metrics* metrics_;
  std::unique_ptr<platform::HaiClient> server_;  // none when no server is configured
  KernelLog kernel_log_;
  std::unique_ptr<MountProbe> mount_probe_;
  // The checks' state, touched by RunOnce only: by its caller before Start(), then by the loop.
  // Fatal hardware errors still within their hold: summary -> when seen.
  std::map<std::string, std::chrono::steady_clock::time_point> fatal_;
  std::vector<CheckResult> last_validators_;
  std::chrono::steady_clock::time_point next_validation_{};
  std::string last_drain_;  // what the server said last, to log changes only

  Mutex mu_;
  CondVar cv_;
  bool stopping_ FF_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ff::health

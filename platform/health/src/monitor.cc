#include "platform/health/monitor.h"

#include <spdlog/spdlog.h>

#include "common/rpc_client.h"
#include "platform/tokens.h"

namespace ff::health {

void HealthOptions::Bind(ConfigSection& s) {
  s.Required("node", node);
  s.Optional("server", server);
  s.Optional("token_file", token_file);
  s.Check(server.empty() || !token_file.empty(), "token_file",
          "is required with server (the agent token)");
  s.Optional("interval_ms", interval_ms);
  s.Check(interval_ms >= 100, "interval_ms", "must be at least 100");
  s.Optional("gpus", gpus);
  s.Check(gpus >= 0 && gpus <= 64, "gpus", "must be 0..64");
  s.Optional("ib_ports", ib_ports);
  s.Check(ib_ports >= 0, "ib_ports", "must not be negative");
  s.Optional("ib_sysfs", ib_sysfs);
  s.Optional("kernel_log", kernel_log);
  s.Optional("hardware_error_hold_s", hardware_error_hold_s);
  s.Check(hardware_error_hold_s >= 0, "hardware_error_hold_s", "must not be negative");
  s.Optional("disks", disks);
  s.Optional("min_free_disk_mib", min_free_disk_mib);
  s.Check(min_free_disk_mib >= 0, "min_free_disk_mib", "must not be negative");
  s.Optional("meminfo", meminfo);
  s.Optional("min_available_memory_mib", min_available_memory_mib);
  s.Check(min_available_memory_mib >= 0, "min_available_memory_mib", "must not be negative");
  s.Optional("fs3_mount", fs3_mount);
  s.Optional("mount_timeout_ms", mount_timeout_ms);
  s.Check(mount_timeout_ms > 0, "mount_timeout_ms", "must be positive");
  s.Optional("validator_interval_s", validator_interval_s);
  s.Check(validator_interval_s >= 0, "validator_interval_s", "must not be negative");
  s.Optional("memory_bandwidth_mib", memory_bandwidth_mib);
  s.Check(memory_bandwidth_mib >= 1 && memory_bandwidth_mib <= 8192, "memory_bandwidth_mib",
          "must be 1..8192");
  s.Optional("min_memory_bandwidth_gbps", min_memory_bandwidth_gbps);
  s.Optional("allreduce_mib", allreduce_mib);
  s.Check(allreduce_mib >= 1 && allreduce_mib <= 4096, "allreduce_mib", "must be 1..4096");
  s.Optional("min_allreduce_gbps", min_allreduce_gbps);
}

Result<std::unique_ptr<HealthMonitor>> HealthMonitor::Create(const HealthOptions& options,
                                                             Metrics* metrics) {
  std::string token;
  if (!options.server.empty()) {
    FF_ASSIGN_OR_RETURN(token, platform::ReadTokenFile(options.token_file, /*create=*/false));
  }
  return std::unique_ptr<HealthMonitor>(new HealthMonitor(options, std::move(token), metrics));
}

HealthMonitor::HealthMonitor(const HealthOptions& options, std::string token, Metrics* metrics)
    : options_(options),
      token_(std::move(token)),
      metrics_(metrics),
      kernel_log_(options.kernel_log) {
  if (!options_.server.empty())
    server_ = std::make_unique<platform::HaiClient>(options_.server, token_);
  if (!options_.fs3_mount.empty()) {
    mount_probe_ = std::make_unique<MountProbe>(
        options_.fs3_mount, std::chrono::milliseconds(options_.mount_timeout_ms));
  }
}

HealthMonitor::~HealthMonitor() {
  Stop();
}

CheckResult HealthMonitor::CheckKernel() {
  const auto now = std::chrono::steady_clock::now();
  for (const KernelEvent& e : kernel_log_.Poll()) {
    const std::string kind(KindName(e.kind));
    metrics_
        ->Counter("hai_health_hardware_errors_total",
                  "Hardware errors in the kernel log, by kind (xid, mce, edac, aer) and severity",
                  {{"kind", kind}, {"fatal", e.fatal ? "true" : "false"}})
        .Increment();
    if (e.kind == KernelEvent::Kind::kGpuXid) {
      metrics_
          ->Counter("hai_health_gpu_xid_total", "GPU Xid events in the kernel log",
                    {{"xid", std::to_string(e.xid)}})
          .Increment();
    }
    if (e.fatal) {
      if (!fatal_.contains(e.summary)) spdlog::error("hardware error: {}", e.summary);
      fatal_[e.summary] = now;
    } else {
      spdlog::warn("hardware event: {}", e.summary);
    }
  }
  if (options_.hardware_error_hold_s > 0) {
    std::erase_if(fatal_, [&](const auto& kv) {
      return now - kv.second > std::chrono::seconds(options_.hardware_error_hold_s);
    });
  }
  CheckResult r{"kernel", fatal_.empty(), ""};
  if (!fatal_.empty()) {
    for (const auto& [summary, when] : fatal_)
      r.message += (r.message.empty() ? "" : "; ") + summary;
  } else if (!kernel_log_.error().empty()) {
    // Unreadable (a container without /dev/kmsg): said, and exported, but not a node failure.
    r.message = "no hardware errors seen; " + kernel_log_.error();
  } else {
    r.message = "no fatal hardware errors";
  }
  metrics_->Gauge("hai_health_kernel_log_readable", "1 while hai-health can read the kernel log")
      .Set(kernel_log_.error().empty() ? 1 : 0);
  return r;
}

std::vector<CheckResult> HealthMonitor::RunOnce(bool validators) {
  std::vector<CheckResult> checks;

  std::string why_none;
  std::vector<GpuInfo> gpus = ProbeGpus(&why_none);
  checks.push_back(CheckGpus(gpus, static_cast<int>(options_.gpus), why_none));
  metrics_->Gauge("hai_health_gpus", "GPUs NVML shows").Set(static_cast<double>(gpus.size()));
  for (const GpuInfo& g : gpus) {
    if (g.temperature_c < 0) continue;
    metrics_
        ->Gauge("hai_health_gpu_temperature_celsius", "GPU core temperature",
                {{"gpu", std::to_string(g.index)}})
        .Set(g.temperature_c);
  }

  std::vector<IbPort> ports = ProbeIbPorts(options_.ib_sysfs);
  checks.push_back(CheckIbPorts(ports, static_cast<int>(options_.ib_ports)));
  for (const IbPort& p : ports) {
    const MetricLabels labels{{"device", p.device}, {"port", std::to_string(p.port)}};
    metrics_->Gauge("hai_health_ib_port_active", "1 while the InfiniBand port is ACTIVE", labels)
        .Set(p.state == "ACTIVE" ? 1 : 0);
    metrics_->Gauge("hai_health_ib_port_rate_gbps", "The port's link rate", labels)
        .Set(p.rate_gbps);
  }

  checks.push_back(CheckKernel());

  CheckResult disk{"disk", true, ""};
  for (const std::string& path : options_.disks) {
    int64_t free_bytes = 0;
    CheckResult one = CheckDisk(path, options_.min_free_disk_mib << 20, &free_bytes);
    metrics_->Gauge("hai_health_disk_free_bytes", "Bytes free to users", {{"path", path}})
        .Set(static_cast<double>(free_bytes));
    disk.ok = disk.ok && one.ok;
    // The failing paths first: they are the message's point.
    if (!one.ok)
      disk.message = one.message + (disk.message.empty() ? "" : "; ") + disk.message;
    else
      disk.message += (disk.message.empty() ? "" : "; ") + one.message;
  }
  checks.push_back(disk);

  int64_t available = 0;
  checks.push_back(
      CheckMemory(options_.meminfo, options_.min_available_memory_mib << 20, &available));
  metrics_->Gauge("hai_health_memory_available_bytes", "MemAvailable of /proc/meminfo")
      .Set(static_cast<double>(available));

  if (mount_probe_) {
    double seconds = 0;
    checks.push_back(mount_probe_->Check(&seconds));
    metrics_->Gauge("hai_health_fs3_mount_probe_seconds", "How long a stat of the fs3 mount took")
        .Set(seconds);
  }

  if (validators && options_.validator_interval_s > 0) {
    last_validators_.clear();
    const double bw =
        MeasureMemoryBandwidth(static_cast<std::size_t>(options_.memory_bandwidth_mib) << 20);
    metrics_->Gauge("hai_health_memory_bandwidth_gbps", "Memory copy rate of the last validation")
        .Set(bw);
    last_validators_.push_back(CheckMemoryBandwidth(bw, options_.min_memory_bandwidth_gbps));
    double gbps = 0;
    last_validators_.push_back(
        RunLoopbackAllreduce(static_cast<std::size_t>(options_.allreduce_mib) << 20,
                             options_.min_allreduce_gbps, std::chrono::seconds(30), &gbps));
    metrics_
        ->Gauge("hai_health_allreduce_gbps",
                "HFReduce loopback allreduce rate of the last validation (2 local ranks)")
        .Set(gbps);
    const int64_t ran_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    for (CheckResult& v : last_validators_)
      v.time_ms = ran_ms;
  }
  checks.insert(checks.end(), last_validators_.begin(), last_validators_.end());

  int failing = 0;
  for (const CheckResult& c : checks) {
    metrics_->Gauge("hai_health_check_ok", "1 while the check passes", {{"check", c.name}})
        .Set(c.ok ? 1 : 0);
    failing += c.ok ? 0 : 1;
  }
  metrics_->Gauge("hai_health_failing_checks", "Checks failing now").Set(failing);
  return checks;
}

Status HealthMonitor::Report(const std::vector<CheckResult>& checks) {
  if (!server_) return Status::Ok();
  hai::HealthReport req;
  req.set_node(options_.node);
  for (const CheckResult& c : checks) {
    hai::HealthCheck* out = req.add_checks();
    out->set_name(c.name);
    out->set_ok(c.ok);
    out->set_message(c.message.substr(0, 1024));
    out->set_time_ms(c.time_ms);
  }
  hai::HealthReportResponse resp;
  Status st = server_->Call("ReportHealth", CallOptions::Idempotent(),
                            [&](grpc::ClientContext* c, hai::Hai::Stub& stub) {
                              return stub.ReportHealth(c, req, &resp);
                            });
  metrics_
      ->Counter("hai_health_reports_total", "Reports sent to hai-server, by outcome",
                {{"result", st.ok() ? "ok" : "error"}})
      .Increment();
  if (!st.ok()) return st;
  const std::string drain = resp.drained() ? resp.drained_by() + ": " + resp.drain_reason() : "";
  if (drain != last_drain_) {
    if (resp.drained()) {
      spdlog::warn("hai-server has node {} drained (by {})", options_.node, drain);
    } else {
      spdlog::info("node {} is not drained", options_.node);
    }
    last_drain_ = drain;
  }
  return Status::Ok();
}

void HealthMonitor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void HealthMonitor::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::Loop() {
  int64_t last_warned_ms = 0;
  std::string last_failing;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    const bool validate = options_.validator_interval_s > 0 && now >= next_validation_;
    if (validate) next_validation_ = now + std::chrono::seconds(options_.validator_interval_s);
    std::vector<CheckResult> checks = RunOnce(validate);
    std::string failing;
    for (const CheckResult& c : checks)
      if (!c.ok) failing += (failing.empty() ? "" : "; ") + c.name + ": " + c.message;
    if (failing != last_failing) {
      if (failing.empty())
        spdlog::info("every check passes");
      else
        spdlog::warn("failing: {}", failing);
      last_failing = failing;
    }
    if (Status st = Report(checks); !st.ok() && platform::NowMs() - last_warned_ms > 10000) {
      spdlog::warn("{}", st.message());
      last_warned_ms = platform::NowMs();
    }
    UniqueLock lock(&mu_);
    if (cv_.wait_for(lock, std::chrono::milliseconds(options_.interval_ms), [&] {
          mu_.AssertHeld();
          return stopping_;
        })) {
      return;
    }
  }
}

}  // namespace ff::health

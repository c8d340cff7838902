// hai-health: one per node. Checks the node's GPUs, InfiniBand ports, kernel log, disks, memory
// and fs3 mount, runs periodic validators, exports /metrics and reports to hai-server.
//
//   hai-health --config deploy/config/hai-health.toml [--node NAME] [--set key=value ...]
//   hai-health --config ... --once     # every check once, as a table; exit 1 if any fails
#include <cstdio>

#include "common/daemon.h"
#include "platform/health/monitor.h"

namespace {

struct HealthConfig {
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::health::HealthOptions health;
  ff::TlsOptions tls;  // its channels to hai-server and fs3 (common/tls.h)

  void Bind(ff::ConfigSection& s) {
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("health", health);
    s.Section("tls", tls);
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool once = false;
  ff::DaemonSpec<HealthConfig> spec{"hai-health", "HAI-Platform node health checks", nullptr,
                                    nullptr};
  spec.add_flags = [&once](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--node", [&flags](const std::string& v) { flags.overrides.push_back("health.node=" + v); },
        "Shorthand for --set health.node=NAME");
    app.add_flag("--once", once, "Run every check once, print them, exit 1 if any fails");
  };
  spec.serve = [&once](HealthConfig& config, ff::DaemonContext& context) -> ff::Status {
    ff::Metrics metrics(context.name());
    FF_ASSIGN_OR_RETURN(auto monitor, ff::health::HealthMonitor::Create(config.health, &metrics));
    if (once) {
      bool all_ok = true;
      for (const ff::health::CheckResult& c : monitor->RunOnce(/*validators=*/true)) {
        std::printf("%-18s %-4s %s\n", c.name.c_str(), c.ok ? "ok" : "FAIL", c.message.c_str());
        all_ok = all_ok && c.ok;
      }
      std::fflush(stdout);
      if (!all_ok) std::_Exit(1);
      return ff::Status::Ok();
    }
    FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
    monitor->Start();
    FF_RETURN_IF_ERROR(context.Ready({{"metrics", metrics.address()}}));
    context.WaitForShutdown();
    monitor->Stop();
    return ff::Status::Ok();
  };
  return ff::RunDaemon(argc, argv, spec);
}

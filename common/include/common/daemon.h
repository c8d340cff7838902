// The skeleton every daemon's main() shares: flags, strict config, logging, signals, readiness.
//
//   struct MyConfig { RpcServerOptions server; LogOptions log; ...; void Bind(ConfigSection&); };
//   int main(int argc, char** argv) {
//     DaemonSpec<MyConfig> spec{"fs3-meta", "fs3 metadata service"};
//     spec.serve = [](MyConfig& cfg, DaemonContext& ctx) -> Status { ...; ctx.Ready(...);
//                                                                    ctx.WaitForShutdown(); ... };
//     return RunDaemon(argc, argv, spec);
//   }
//
// Common flags: --config FILE, --set KEY=VALUE (repeatable; overrides the file), --log-level,
// --log-format, --ready-file FILE, --print-config. Exit codes: 0 clean shutdown (SIGTERM/SIGINT),
// 1 serve failed, 64 bad command line, 78 bad configuration (sysexits' EX_CONFIG, which systemd
// units list in RestartPreventExitStatus). Every failure prints one line on stderr naming the
// daemon and the cause.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/tls.h"
#include "common/traffic.h"

namespace ff {

inline constexpr int kExitServeFailed = 1;
inline constexpr int kExitUsage = 64;
inline constexpr int kExitConfig = 78;

struct DaemonFlags {
  std::string config_path;
  std::vector<std::string> overrides;  // --set
  std::string log_level;               // --log-level: shorthand for --set log.level=...
  std::string log_format;              // --log-format
  std::string ready_file;
  bool print_config = false;

  // --set values plus the shorthands, in the order they apply.
  std::vector<std::string> AllOverrides() const;
};

// Sends `state` ("READY=1", "STOPPING=1", ...) to systemd when it started the daemon as a
// Type=notify service ($NOTIFY_SOCKET set); without it, does nothing.
Status NotifyServiceManager(const std::string& state);

// Handed to a daemon's serve function.
class DaemonContext {
 public:
  DaemonContext(std::string name, const DaemonFlags& flags)
      : name_(std::move(name)), flags_(flags) {}

  const std::string& name() const { return name_; }
  const DaemonFlags& flags() const { return flags_; }

  // Announces that the daemon serves: logs the endpoints, tells systemd (READY=1, for units of
  // Type=notify) and, with --ready-file, writes them as JSON (atomically, via rename) so scripts
  // and tests learn ports chosen at run time.
  Status Ready(const nlohmann::json& endpoints);

  // Blocks until SIGTERM or SIGINT (or RequestShutdown); returns the signal's name.
  std::string WaitForShutdown();
  // Makes WaitForShutdown return (from any thread).
  static void RequestShutdown();

 private:
  std::string name_;
  const DaemonFlags& flags_;
};

template <typename Config>
struct DaemonSpec {
  std::string name;
  std::string description;
  // Optional: adds daemon-specific flags (typically shorthands pushed into flags.overrides).
  std::function<void(CLI::App&, DaemonFlags&)> add_flags;
  std::function<Status(Config&, DaemonContext&)> serve;
};

namespace daemon_detail {
// Blocks SIGINT/SIGTERM in the calling thread (and the threads it starts later), so that
// WaitForShutdown can take them with sigwait.
void BlockShutdownSignals();
// Large buffers come from the heap and are reused rather than mapped and faulted in afresh.
void KeepLargeBuffersInTheHeap();
void AddCommonFlags(CLI::App& app, DaemonFlags& flags);
// Parses the command line; returns -1 to go on, or the exit code to return now.
int ParseCommandLine(CLI::App& app, const std::string& name, int argc, char** argv);
int Fail(const std::string& name, int code, const Status& status);
}  // namespace daemon_detail

// Runs a daemon (see the file comment). Config must have a LogOptions member named `log`; a
// TrafficOptions member named `traffic` (the [traffic] section) becomes the process's marks, a
// TlsOptions member named `tls` (the [tls] section, else FF_TLS_* from the environment) its TLS
// (common/tls.h).
template <typename Config>
int RunDaemon(int argc, char** argv, const DaemonSpec<Config>& spec) {
  daemon_detail::BlockShutdownSignals();
  daemon_detail::KeepLargeBuffersInTheHeap();
  CLI::App app(spec.description, spec.name);
  DaemonFlags flags;
  daemon_detail::AddCommonFlags(app, flags);
  if (spec.add_flags) spec.add_flags(app, flags);
  if (int code = daemon_detail::ParseCommandLine(app, spec.name, argc, argv); code >= 0) {
    return code;
  }

  Result<Config> config = LoadConfigFile<Config>(flags.config_path, flags.AllOverrides());
  if (!config.ok()) return daemon_detail::Fail(spec.name, kExitConfig, config.status());
  if (flags.print_config) {
    std::fputs(ConfigToToml(*config).c_str(), stdout);
    return 0;
  }
  if (Status st = InitLogging(spec.name, config->log); !st.ok()) {
    return daemon_detail::Fail(spec.name, kExitConfig, st);
  }
  if constexpr (requires(Config & c) { c.traffic; }) SetProcessTraffic(config->traffic);
  if constexpr (requires(Config & c) { c.tls; }) {
    const TlsOptions& tls = config->tls;
    if (Status st = tls.empty() ? InitProcessTlsFromEnvironment() : SetProcessTls(tls); !st.ok()) {
      return daemon_detail::Fail(spec.name, kExitConfig, st);
    }
  }
  DaemonContext context(spec.name, flags);
  if (Status st = spec.serve(*config, context); !st.ok()) {
    return daemon_detail::Fail(spec.name, kExitServeFailed, st);
  }
  return 0;
}

}  // namespace ff

#include "common/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace ff {

std::vector<std::string> DaemonFlags::AllOverrides() const {
  std::vector<std::string> all = overrides;
  if (!log_level.empty()) all.push_back("log.level=" + log_level);
  if (!log_format.empty()) all.push_back("log.format=" + log_format);
  return all;
}

Status DaemonContext::Ready(const nlohmann::json& endpoints) {
  spdlog::info("{} ready: {}", name_, endpoints.dump());
  if (flags_.ready_file.empty()) return Status::Ok();
  std::string tmp = flags_.ready_file + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << endpoints.dump() << "\n";
    if (!out.flush()) return Status::FromErrno(errno, "write ready file '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), flags_.ready_file.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return Status::FromErrno(err, "rename ready file to '" + flags_.ready_file + "'");
  }
  return Status::Ok();
}

std::string DaemonContext::WaitForShutdown() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  spdlog::info("{} received {}, shutting down", name_, name);
  return name;
}

void DaemonContext::RequestShutdown() {
  kill(getpid(), SIGTERM);
}

namespace daemon_detail {

void BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A client that goes away mid-write must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);
}

void AddCommonFlags(CLI::App& app, DaemonFlags& flags) {
  app.add_option("-c,--config", flags.config_path, "TOML config file (default: built-in defaults)");
  app.add_option("--set", flags.overrides, "Override a config key: KEY=VALUE (repeatable)")
      ->type_name("KEY=VALUE");
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error, critical, off");
  app.add_option("--log-format", flags.log_format, "text or json");
  app.add_option("--ready-file", flags.ready_file,
                 "Write the bound endpoints as JSON to this file once serving");
  app.add_flag("--print-config", flags.print_config, "Print the effective config as TOML and exit");
}

int ParseCommandLine(CLI::App& app, const std::string& name, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", name.c_str(), e.what());
    return kExitUsage;
  }
  return -1;
}

int Fail(const std::string& name, int code, const Status& status) {
  std::string line = EscapeLogText(status.message(), false);
  std::fprintf(stderr, "%s: %s\n", name.c_str(), line.c_str());
  return code;
}

}  // namespace daemon_detail
}  // namespace ff

#include "common/daemon.h"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "common/files.h"

namespace ff {

std::vector<std::string> DaemonFlags::AllOverrides() const {
  std::vector<std::string> all = overrides;
  if (!log_level.empty()) all.push_back("log.level=" + log_level);
  if (!log_format.empty()) all.push_back("log.format=" + log_format);
  return all;
}

Status NotifyServiceManager(const std::string& state) {
  const char* socket_path = std::getenv("NOTIFY_SOCKET");
  if (socket_path == nullptr || socket_path[0] == '\0') return Status::Ok();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::size_t len = std::strlen(socket_path);
  if ((socket_path[0] != '/' && socket_path[0] != '@') || len >= sizeof(addr.sun_path)) {
    return Status(StatusCode::kInvalidArgument,
                  "NOTIFY_SOCKET '" + std::string(socket_path) + "' is not a unix socket path");
  }
  std::memcpy(addr.sun_path, socket_path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket for NOTIFY_SOCKET");
  auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                     reinterpret_cast<const sockaddr*>(&addr), addr_len);
  int err = errno;
  close(fd);
  if (n < 0)
    return Status::FromErrno(err, "notify the service manager at " + std::string(socket_path));
  return Status::Ok();
}

Status DaemonContext::Ready(const nlohmann::json& endpoints) {
  spdlog::info("{} ready: {}", name_, endpoints.dump());
  std::string status = endpoints.dump();
  if (status.size() > 200) status = status.substr(0, 200) + "...";
  if (Status st = NotifyServiceManager("READY=1\nSTATUS=serving " + status); !st.ok()) {
    spdlog::warn("{}: {}", name_, st.ToString());
  }
  if (flags_.ready_file.empty()) return Status::Ok();
  return WriteFileAtomically(flags_.ready_file, endpoints.dump() + "\n").WithContext("ready file");
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
  if (Status st = NotifyServiceManager("STOPPING=1"); !st.ok())
    spdlog::warn("{}: {}", name_, st.ToString());
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

void KeepLargeBuffersInTheHeap() {
  // glibc serves blocks above its mmap threshold (128 KiB, adapting up to 32 MiB) with fresh
  // mappings and trims freed heap memory back to the kernel, so each new chunk-sized buffer
  // (fs3's 4 MiB writes, gRPC messages) was paid for again in page faults: a fifth of fs3-fuse's
  // time in a sequential write. Blocks up to 64 MiB now come from the heap, and up to 256 MiB of
  // freed memory stays there for the next buffer.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
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

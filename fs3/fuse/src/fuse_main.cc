// fs3-fuse: mounts fs3 with FUSE (libfuse3's low-level API).
//
//   fs3-fuse MOUNTPOINT --config deploy/config/fs3-fuse.toml [--set key=value ...]
//   fusermount3 -u MOUNTPOINT     # or SIGTERM: unmounts and exits
//
// Runs in the foreground (systemd or a script keeps it); --ready-file announces the mount.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <condition_variable>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/daemon.h"
#include "fuse_fs.h"
#include "monitoring/metrics.h"

namespace ff::fs3 {
namespace {

struct FuseConfig {
  FuseOptions fuse;
  // A machine may mount fs3 several times from one config (a job's private mount, a read-only
  // one): each mount after the first serves its metrics on a free port.
  MetricsOptions metrics = [] {
    MetricsOptions m;
    m.any_port_when_busy = true;
    return m;
  }();
  LogOptions log;
  TrafficOptions traffic;  // chunk data to and from storage is marked as storage
  TlsOptions tls;          // the channels to fs3's services (common/tls.h)
  void Bind(ConfigSection& s) {
    s.Section("fuse", fuse);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("traffic", traffic);
    s.Section("tls", tls);
  }
};

// Whether `path` is a mount point now (listed in /proc/self/mountinfo).
bool Mounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (point == path) return true;
  }
  return false;
}

Status CheckMountpoint(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOTCONN) {
      return Status(StatusCode::kBusy, "mount point " + path +
                                           " is a dead fs3 mount: unmount it first "
                                           "(fusermount3 -u " +
                                           path + ")");
    }
    return Status::FromErrno(errno, "mount point " + path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status(StatusCode::kNotADirectory, "mount point " + path + " is not a directory");
  }
  if (Mounted(path)) {
    return Status(StatusCode::kBusy, "mount point " + path +
                                         " is busy: something is mounted there (fusermount3 -u " +
                                         path + " first)");
  }
  return Status::Ok();
}

Status Serve(FuseConfig& config, DaemonContext& context) {
  FuseOptions& o = config.fuse;
  char resolved[PATH_MAX];
  if (realpath(o.mountpoint.c_str(), resolved) == nullptr) {
    if (errno == ENOTCONN) return CheckMountpoint(o.mountpoint);
    return Status::FromErrno(errno, "mount point " + o.mountpoint);
  }
  o.mountpoint = resolved;
  FF_RETURN_IF_ERROR(CheckMountpoint(o.mountpoint));

  Metrics metrics(context.name());
  ClientOptions co;
  co.mgmtd = o.mgmtd;
  co.max_inflight_read_bytes = o.max_inflight_read_bytes;
  co.retry_timeout = std::chrono::seconds(o.retry_timeout_s);
  auto storage = StorageClient::Create(co);
  if (!storage.ok()) return storage.status().WithContext("fs3 cluster at " + o.mgmtd);
  FuseFs fs(o, std::move(*storage), &metrics);
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics, {{"mountpoint", o.mountpoint}}));

  std::vector<std::string> argv = {"fs3-fuse", "-o", "fsname=fs3,subtype=fs3"};
  if (!o.mount_options.empty()) {
    argv.push_back("-o");
    argv.push_back(o.mount_options);
  }
  std::vector<char*> raw;
  for (std::string& a : argv)
    raw.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(raw.size()), raw.data());
  fuse_session* se = fuse_session_new(&args, &FuseFs::Ops(), sizeof(fuse_lowlevel_ops), &fs);
  if (se == nullptr) return InvalidArgument("bad mount options '" + o.mount_options + "'");
  fs.SetSession(se);
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_session_destroy(se);
    return Status(StatusCode::kIoError,
                  "cannot mount on " + o.mountpoint +
                      " (libfuse's message above; allow_other needs root or user_allow_other "
                      "in /etc/fuse.conf)");
  }
  std::mutex mu;
  std::condition_variable cv;
  bool loop_done = false;
  std::thread loop([&] {
    fuse_loop_config* lc = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(lc, o.threads);
    fuse_loop_cfg_set_idle_threads(lc, std::min<uint32_t>(o.threads, 8));
    fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
    {
      std::lock_guard lock(mu);
      loop_done = true;
    }
    cv.notify_all();
    DaemonContext::RequestShutdown();  // unmounted from outside (fusermount3 -u)
  });
  FF_RETURN_IF_ERROR(context.Ready({{"mountpoint", o.mountpoint}, {"metrics", metrics.address()}}));
  context.WaitForShutdown();
  {
    std::unique_lock lock(mu);
    if (!loop_done) {
      fuse_session_exit(se);
      lock.unlock();
      fuse_session_unmount(se);  // lazy: busy files keep the old mount alive until closed
      lock.lock();
      if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return loop_done; })) {
        spdlog::warn("{}: files are still open on the mount; exiting anyway", o.mountpoint);
        std::_Exit(0);
      }
    }
  }
  loop.join();
  fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  spdlog::info("unmounted {}", o.mountpoint);
  return Status::Ok();
}

}  // namespace
}  // namespace ff::fs3

int main(int argc, char** argv) {
  ff::DaemonSpec<ff::fs3::FuseConfig> spec{"fs3-fuse", "Mounts fs3 with FUSE", nullptr, nullptr};
  spec.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "mountpoint",
        [&flags](const std::string& v) { flags.overrides.push_back("fuse.mountpoint=" + v); },
        "Where to mount (shorthand for --set fuse.mountpoint=DIR)");
  };
  spec.serve = ff::fs3::Serve;
  return ff::RunDaemon(argc, argv, spec);
}

// fs3-mgmtd: fs3's cluster manager.
//
//   fs3-mgmtd --config deploy/config/fs3-mgmtd.toml [--set key=value ...]
#include "common/daemon.h"
#include "common/rpc_server.h"
#include "mgmtd.h"
#include "monitoring/metrics.h"

namespace {

struct MgmtdConfig {
  ff::RpcServerOptions server;
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::fs3::MgmtdOptions mgmtd;

  void Bind(ff::ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("mgmtd", mgmtd);
  }
};

ff::Status Serve(MgmtdConfig& config, ff::DaemonContext& context) {
  ff::Metrics metrics(context.name());
  FF_ASSIGN_OR_RETURN(auto mgmtd, ff::fs3::Mgmtd::Create(config.mgmtd, &metrics));
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
  FF_ASSIGN_OR_RETURN(auto server, ff::RpcServer::Start(config.server, {mgmtd.get()}));
  mgmtd->Start();
  FF_RETURN_IF_ERROR(context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
  context.WaitForShutdown();
  mgmtd->Stop();
  server->Shutdown();
  return ff::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<MgmtdConfig> spec{"fs3-mgmtd", "fs3 cluster manager", nullptr, Serve};
  spec.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--listen",
        [&flags](const std::string& v) { flags.overrides.push_back("server.listen=" + v); },
        "Shorthand for --set server.listen=ADDRESS");
  };
  return ff::RunDaemon(argc, argv, spec);
}

// hai-server: HAI-Platform's job API, node registry and scheduling loop.
//
//   hai-server --config deploy/config/hai-server.toml [--set key=value ...]
#include <spdlog/spdlog.h>

#include "common/daemon.h"
#include "common/rpc_server.h"
#include "monitoring/metrics.h"
#include "server.h"

namespace {

struct ServerConfig {
  ff::RpcServerOptions server;
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::platform::HaiOptions hai;

  void Bind(ff::ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("hai", hai);
  }
};

ff::Status Serve(ServerConfig& config, ff::DaemonContext& context) {
  ff::Metrics metrics(context.name());
  FF_ASSIGN_OR_RETURN(auto service, ff::platform::HaiServer::Create(config.hai, &metrics));
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
  FF_ASSIGN_OR_RETURN(auto server, ff::RpcServer::Start(config.server, {service.get()}));
  service->Start();
  FF_RETURN_IF_ERROR(context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
  context.WaitForShutdown();
  service->Stop();
  server->Shutdown();
  return ff::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<ServerConfig> spec{"hai-server", "HAI-Platform job server", nullptr, Serve};
  spec.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--listen",
        [&flags](const std::string& v) { flags.overrides.push_back("server.listen=" + v); },
        "Shorthand for --set server.listen=ADDRESS");
  };
  return ff::RunDaemon(argc, argv, spec);
}

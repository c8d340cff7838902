// ff-echod: a daemon built from the same skeleton as the real ones (common/daemon.h), serving the
// Echo test service and /metrics. Integration tests use it to check flags, strict config loading,
// readiness, metrics and clean shutdown as a user would meet them.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "common/daemon.h"
#include "common/rpc_server.h"
#include "monitoring/metrics.h"
#include "tests/support/echo_service.h"

namespace {

struct EchoOptions {
  std::string prefix;  // required: replies are "<prefix><text>"
  void Bind(ff::ConfigSection& s) { s.Required("prefix", prefix); }
};

struct EchoDaemonConfig {
  ff::RpcServerOptions server;
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  EchoOptions echo;

  void Bind(ff::ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("echo", echo);
  }
};

ff::Status Serve(EchoDaemonConfig& config, ff::DaemonContext& context) {
  ff::Metrics metrics(context.name());
  ff::test::EchoService service(config.echo.prefix);
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
  FF_ASSIGN_OR_RETURN(auto server, ff::RpcServer::Start(config.server, {&service}));
  FF_RETURN_IF_ERROR(context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
  prometheus::Gauge& up = metrics.Gauge("ff_echod_up", "1 while serving");
  up.Set(1);
  context.WaitForShutdown();
  server->Shutdown();
  spdlog::info("served {} calls", service.calls());
  return ff::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<EchoDaemonConfig> spec{"ff-echod", "Echo test daemon", nullptr, Serve};
  spec.add_flags = [](CLI::App& app, ff::DaemonFlags& flags) {
    app.add_option_function<std::string>(
        "--listen",
        [&flags](const std::string& v) { flags.overrides.push_back("server.listen=" + v); },
        "Shorthand for --set server.listen=ADDRESS");
  };
  return ff::RunDaemon(argc, argv, spec);
}

// fs3-meta: fs3's namespace service.
//
//   fs3-meta --config deploy/config/fs3-meta.toml [--set key=value ...]
#include "common/daemon.h"
#include "common/rpc_server.h"
#include "meta_service.h"
#include "monitoring/metrics.h"

namespace {

struct MetaConfig {
  ff::RpcServerOptions server;
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::fs3::MetaOptions meta;

  void Bind(ff::ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("meta", meta);
  }
};

ff::Status Serve(MetaConfig& config, ff::DaemonContext& context) {
  ff::Metrics metrics(context.name());
  FF_ASSIGN_OR_RETURN(auto service, ff::fs3::MetaService::Create(config.meta, &metrics));
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
  FF_ASSIGN_OR_RETURN(auto server, ff::RpcServer::Start(config.server, {service.get()}));
  FF_RETURN_IF_ERROR(context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
  context.WaitForShutdown();
  server->Shutdown();
  return ff::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<MetaConfig> spec{"fs3-meta", "fs3 metadata service", nullptr, Serve};
  return ff::RunDaemon(argc, argv, spec);
}

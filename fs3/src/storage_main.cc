// fs3-storage: fs3's storage service (one per storage node, several targets).
//
//   fs3-storage --config deploy/config/fs3-storage.toml [--set key=value ...]
#include "common/daemon.h"
#include "common/rpc_server.h"
#include "monitoring/metrics.h"
#include "storage_service.h"

namespace {

struct StorageConfig {
  ff::RpcServerOptions server;
  ff::MetricsOptions metrics;
  ff::LogOptions log;
  ff::fs3::StorageOptions storage;

  void Bind(ff::ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("storage", storage);
  }
};

ff::Status Serve(StorageConfig& config, ff::DaemonContext& context) {
  ff::Metrics metrics(context.name());
  FF_ASSIGN_OR_RETURN(auto service, ff::fs3::StorageService::Create(config.storage, &metrics));
  FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
  FF_ASSIGN_OR_RETURN(auto server, ff::RpcServer::Start(config.server, {service.get()}));
  service->Start(server->address());
  FF_RETURN_IF_ERROR(context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
  context.WaitForShutdown();
  service->Stop();
  server->Shutdown();
  return ff::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  ff::DaemonSpec<StorageConfig> spec{"fs3-storage", "fs3 storage service", nullptr, Serve};
  return ff::RunDaemon(argc, argv, spec);
}

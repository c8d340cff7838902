// hai-server: HAI-Platform's job API, node registry and scheduling loop.
//
//   hai-server --config deploy/config/hai-server.toml [--set key=value ...] [--listen HOST:PORT]
#include "monitoring/service_daemon.h"
#include "platform/server.h"

int main(int argc, char** argv) {
  using ff::platform::HaiOptions;
  using ff::platform::HaiServer;
  ff::ServiceDaemon<HaiOptions, HaiServer> daemon{"hai-server", "HAI-Platform job server"};
  daemon.make = [](HaiOptions& o, ff::Metrics& m) { return HaiServer::Create(o, &m); };
  daemon.start = [](HaiServer& s, const std::string& address) { s.Start(address); };
  daemon.stop = [](HaiServer& s) { s.Stop(); };
  daemon.failure = [](const HaiServer& s) { return s.WriteFailure(); };
  // Users' `hai` shows no certificate where the cluster runs TLS: their tokens say who they are.
  daemon.client_certs = ff::ClientCerts::kOptional;
  return daemon.Run(argc, argv);
}

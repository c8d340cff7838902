// The common shape of a daemon that serves one gRPC service and /metrics, on top of the daemon
// skeleton (common/daemon.h): config sections [server], [metrics], [log], [traffic], [tls] and the
// service's own section; build the service, serve metrics and RPCs, start its background work,
// announce readiness, and on SIGTERM stop the work before the server.
//
//   struct MyOptions { static constexpr const char* kSection = "mine"; ...; void Bind(...); };
//   ServiceDaemon<MyOptions, MyService> d{"my-daemon", "What it is"};
//   d.make = [](MyOptions& o, Metrics& m) { return MyService::Create(o, &m); };
//   d.start = [](MyService& s, const std::string& address) { s.Start(address); };
//   d.stop = [](MyService& s) { s.Stop(); };
//   return d.Run(argc, argv);
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/daemon.h"
#include "common/rpc_server.h"
#include "monitoring/metrics.h"

namespace ff {

template <typename Options>
struct ServiceConfig {
  RpcServerOptions server;
  MetricsOptions metrics;
  LogOptions log;
  TrafficOptions traffic;
  TlsOptions tls;
  Options options;

  void Bind(ConfigSection& s) {
    s.Section("server", server);
    s.Section("metrics", metrics);
    s.Section("log", log);
    s.Section("traffic", traffic);
    s.Section("tls", tls);
    s.Section(Options::kSection, options);
  }
};

template <typename Options, typename Service>
struct ServiceDaemon {
  ServiceDaemon(std::string daemon_name, std::string daemon_description)
      : name(std::move(daemon_name)), description(std::move(daemon_description)) {}

  std::string name;
  std::string description;
  // The traffic class of the service's own server: what its replies are marked with.
  TrafficClass traffic = TrafficClass::kOther;
  // Where the cluster runs TLS, whether its callers must show a certificate (common/tls.h).
  ClientCerts client_certs = ClientCerts::kRequire;
  std::function<Result<std::unique_ptr<Service>>(Options&, Metrics&)> make;
  std::function<void(Service&, const std::string& address)> start;  // optional
  std::function<void(Service&)> stop;                               // optional
  // Optional: after shutdown, why the service stopped itself (not OK: the daemon exits 1 with it).
  std::function<Status(const Service&)> failure;
  // Optional shorthand flags; `--listen` (server.listen) is always there.
  std::function<void(CLI::App&, DaemonFlags&)> add_flags;

  int Run(int argc, char** argv) const {
    DaemonSpec<ServiceConfig<Options>> spec{name, description, nullptr, nullptr};
    spec.add_flags = [this](CLI::App& app, DaemonFlags& flags) {
      app.add_option_function<std::string>(
          "--listen",
          [&flags](const std::string& v) { flags.overrides.push_back("server.listen=" + v); },
          "Shorthand for --set server.listen=ADDRESS");
      if (add_flags) add_flags(app, flags);
    };
    spec.serve = [this](ServiceConfig<Options>& config, DaemonContext& context) -> Status {
      Metrics metrics(context.name());
      FF_ASSIGN_OR_RETURN(std::unique_ptr<Service> service, make(config.options, metrics));
      FF_RETURN_IF_ERROR(metrics.Serve(config.metrics));
      config.server.traffic = traffic;
      config.server.client_certs = client_certs;
      FF_ASSIGN_OR_RETURN(auto server, RpcServer::Start(config.server, {service.get()}));
      if (start) start(*service, server->address());
      FF_RETURN_IF_ERROR(
          context.Ready({{"rpc", server->address()}, {"metrics", metrics.address()}}));
      context.WaitForShutdown();
      if (stop) stop(*service);
      server->Shutdown();
      return failure ? failure(*service) : Status::Ok();
    };
    return RunDaemon(argc, argv, spec);
  }
};

}  // namespace ff

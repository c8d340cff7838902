// A gRPC server on a configured address.
//
// The address is "host:port"; port 0 picks a free port, and address()/port() report the one
// bound, so tests and the local cluster can start daemons without fixed ports.
// Thread-safe: Shutdown may be called from any thread, once or more.
#pragma once

#include <grpcpp/server.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/result.h"
#include "common/tls.h"
#include "common/traffic.h"

namespace grpc {
class Channel;
class ServerContext;
class Service;
}  // namespace grpc

namespace ff {

class ConfigSection;

// The [server] section of a daemon's config.
struct RpcServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free port
  int64_t max_message_mib = 64;        // largest request or response accepted
  int64_t shutdown_grace_ms = 2000;    // in-flight calls get this long on shutdown
  // Not in the config: the daemon says which class its server carries; the class's DSCP comes
  // from the process's [traffic] marks (ProcessTraffic) and marks every accepted connection.
  TrafficClass traffic = TrafficClass::kOther;
  // Not in the config: where the process runs TLS (common/tls.h), whether callers must show a
  // certificate of the cluster's authority (only a service that authenticates its callers
  // otherwise, hai-server's API with its tokens, takes callers without one).
  ClientCerts client_certs = ClientCerts::kRequire;

  void Bind(ConfigSection& s);
};

class RpcServer {
 public:
  // Starts serving `services` (not owned; they must outlive the server), over TLS where the
  // process runs it (common/tls.h). Fails with kUnavailable when the address cannot be bound (in
  // use, bad host), with the TLS setup's error when that cannot serve.
  static Result<std::unique_ptr<RpcServer>> Start(const RpcServerOptions& options,
                                                  const std::vector<grpc::Service*>& services);

  ~RpcServer();  // Shutdown()

  // "host:port" with the bound port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // A channel to this server within the process (no socket): for fuzzing the handlers through
  // the real server, its limits and its message parsing.
  std::shared_ptr<grpc::Channel> InProcessChannel();

  // Stops accepting calls, lets in-flight calls finish within the configured grace, then cancels
  // them. Idempotent.
  void Shutdown();

 private:
  RpcServer(std::unique_ptr<grpc::Server> server, std::string address, int port,
            std::chrono::milliseconds grace);

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_;
  std::chrono::milliseconds grace_;
  std::once_flag shutdown_once_;
};

// How long a long poll may hold a call: at most `wait`, and not past the caller's deadline (a
// condition-variable wait is not woken when its call is cancelled, so without this a client that
// gave up still holds one of the server's threads for the whole wait).
std::chrono::milliseconds LongPollWait(const grpc::ServerContext* context,
                                       std::chrono::milliseconds wait);

}  // namespace ff

#include "common/rpc_server.h"

#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/config.h"
#include "common/net.h"
#include "common/tls.h"
#include "grpc_marks.h"

namespace ff {
namespace {

// Marks the server's listener and accepted connections with a DSCP.
class MarkSocketsOption final : public grpc::ServerBuilderOption {
 public:
  explicit MarkSocketsOption(int dscp) : dscp_(dscp) {}
  void UpdateArguments(grpc::ChannelArguments* args) override {
    rpc_detail::MarkSockets(*args, dscp_);
  }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}

 private:
  int dscp_;
};

}  // namespace

void RpcServerOptions::Bind(ConfigSection& s) {
  s.Optional("listen", listen);
  s.Optional("max_message_mib", max_message_mib);
  s.Check(max_message_mib > 0 && max_message_mib <= 2047, "max_message_mib", "must be in 1..2047");
  s.Optional("shutdown_grace_ms", shutdown_grace_ms);
  s.Check(shutdown_grace_ms >= 0, "shutdown_grace_ms", "must not be negative");
  if (s.mode() == ConfigSection::Mode::kRead) {
    std::string host;
    int port = 0;
    Status st = SplitHostPort(listen, &host, &port);
    s.Check(st.ok(), "listen", st.message());
  }
}

RpcServer::RpcServer(std::unique_ptr<grpc::Server> server, std::string address, int port,
                     std::chrono::milliseconds grace)
    : server_(std::move(server)), address_(std::move(address)), port_(port), grace_(grace) {}

RpcServer::~RpcServer() {
  Shutdown();
}

Result<std::unique_ptr<RpcServer>> RpcServer::Start(const RpcServerOptions& options,
                                                    const std::vector<grpc::Service*>& services) {
  std::string host;
  int requested_port = 0;
  FF_RETURN_IF_ERROR(SplitHostPort(options.listen, &host, &requested_port));

  FF_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      ProcessServerCredentials(options.client_certs));
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(options.listen, credentials, &bound_port);
  int max_bytes = static_cast<int>(options.max_message_mib * 1024 * 1024);
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  // One listener per address: a second daemon on the same port must fail, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (int dscp = ProcessTraffic().Dscp(options.traffic); dscp != 0) {
    builder.SetOption(std::make_unique<MarkSocketsOption>(dscp));
  }
  for (grpc::Service* service : services)
    builder.RegisterService(service);

  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return Unavailable("cannot listen on " + options.listen +
                       ": address in use or not available on this host");
  }
  std::string bound = JoinHostPort(host, bound_port);
  spdlog::info("rpc server listening on {}{}", bound, ProcessTlsEnabled() ? " (TLS)" : "");
  return std::unique_ptr<RpcServer>(new RpcServer(
      std::move(server), bound, bound_port, std::chrono::milliseconds(options.shutdown_grace_ms)));
}

std::shared_ptr<grpc::Channel> RpcServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return server_->InProcessChannel(args);
}

std::chrono::milliseconds LongPollWait(const grpc::ServerContext* context,
                                       std::chrono::milliseconds wait) {
  if (context == nullptr) return wait;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      context->deadline() - std::chrono::system_clock::now());
  return std::clamp(left, std::chrono::milliseconds(0), wait);
}

void RpcServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    server_->Shutdown(std::chrono::system_clock::now() + grace_);
    server_->Wait();
  });
}

}  // namespace ff

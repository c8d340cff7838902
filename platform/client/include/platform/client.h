// The client side of hai-server's API, shared by `hai`, hai-agent, hai-health and hai-bench: a
// channel to the server, and calls that carry the caller's token with common's deadlines and
// retries (rpc_client.h).
//
//   FF_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(path, /*create=*/false));
//   HaiClient hai(server_address, token);
//   hai::Job job;
//   Status st = hai.Call("Submit", CallOptions{}, [&](grpc::ClientContext* c, hai::Hai::Stub& s) {
//     return s.Submit(c, request, &job);
//   });
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/rpc_client.h"
#include "platform/proto/hai.grpc.pb.h"
#include "platform/tokens.h"

namespace ff::platform {

class HaiClient {
 public:
  // `server` is hai-server's "host:port"; `token` a user's token or the agents' shared one.
  HaiClient(std::string server, std::string token, const ChannelOptions& channel = {});
  // Over a channel the caller shares between clients (one per user, as hai-web has): channels
  // are thread-safe, and one keeps one connection.
  HaiClient(std::string server, std::string token, const std::shared_ptr<grpc::Channel>& channel);

  // One call: `fn(context, stub)` with the token set on each attempt, under `options`. Errors
  // read "hai-server <what>: <server's message>" and keep the server's code.
  template <typename Fn>
  Status Call(std::string_view what, const CallOptions& options, Fn&& fn) {
    return CallRpc("hai-server " + std::string(what), options, [&](grpc::ClientContext* c) {
      SetBearerToken(c, token_);
      return fn(c, *stub_);
    });
  }

  // For streaming calls, which CallRpc does not retry: the stub, and the token on a context.
  hai::Hai::Stub& stub() { return *stub_; }
  void Authorize(grpc::ClientContext* context) const { SetBearerToken(context, token_); }

  const std::string& server() const { return server_; }

 private:
  std::string server_;
  std::string token_;
  std::unique_ptr<hai::Hai::Stub> stub_;
};

}  // namespace ff::platform

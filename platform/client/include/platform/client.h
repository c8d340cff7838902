// The client side of hai-server's API, shared by `hai`, hai-agent, hai-health, hai-web and
// hai-bench: channels to the server (to each replica, when hai-server runs as leader and standbys
// on etcd: calls follow the leader, common/replicas.h), and calls that carry the caller's token
// with common's deadlines and retries (rpc_client.h).
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

#include "common/replicas.h"
#include "common/rpc_client.h"
#include "platform/proto/hai.grpc.pb.h"
#include "platform/tokens.h"

namespace ff::platform {

class HaiClient {
 public:
  using Servers = Replicas<hai::Hai>;

  // `server` is hai-server's "host:port", or every replica's, comma-separated; `token` a user's
  // token or the agents' shared one.
  HaiClient(std::string server, std::string token, const ChannelOptions& channel = {});
  // Over channels the caller shares between clients (one per user, as hai-web has): channels
  // are thread-safe, and one keeps one connection.
  HaiClient(std::string token, std::shared_ptr<Servers> servers);

  // One call: `fn(context, stub)` with the token set on each attempt, under `options`. Errors
  // read "hai-server <what>: <server's message>" and keep the server's code.
  template <typename Fn>
  Status Call(std::string_view what, const CallOptions& options, Fn&& fn) {
    return CallRpc("hai-server " + std::string(what), options, [&](grpc::ClientContext* c) {
      SetBearerToken(c, token_);
      return servers_->Attempt([&](hai::Hai::Stub& s) { return fn(c, s); });
    });
  }

  // For streaming calls, which CallRpc does not retry: the stub of the replica in use (a
  // follower's refusal moves the next call on: see Attempt), and the token on a context.
  hai::Hai::Stub& stub() { return servers_->stub(); }
  template <typename Fn>
  grpc::Status Attempt(Fn&& fn) {
    return servers_->Attempt(std::forward<Fn>(fn));
  }
  void Authorize(grpc::ClientContext* context) const { SetBearerToken(context, token_); }

  const std::string& server() const { return server_; }

 private:
  std::string server_;
  std::string token_;
  std::shared_ptr<Servers> servers_;
};

}  // namespace ff::platform

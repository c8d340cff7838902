// The client side of a service that runs as replicas with one leader (fs3-mgmtd, hai-server on
// etcd): the addresses of every replica, calls to the one that answered last. A replica that is
// unreachable, or a follower (which answers kUnavailable, "not the leader", naming the leader
// when it knows it), moves the next attempt to the replica it names, or else the next in the
// list; CallRpc's retries do the rest. One address works as before (a single server).
//
//   Replicas<fs3rpc::Mgmtd> mgmtd("10.0.0.1:7000,10.0.0.2:7000");
//   CallRpc("fs3-mgmtd Heartbeat", CallOptions::Idempotent(), [&](grpc::ClientContext* c) {
//     return mgmtd.Attempt([&](fs3rpc::Mgmtd::Stub& s) { return s.Heartbeat(c, req, &resp); });
//   });
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/rpc_client.h"
#include "common/rpc_status.h"

namespace ff {

// "a,b, c" -> {"a", "b", "c"} (blanks trimmed, empty parts dropped).
std::vector<std::string> SplitAddressList(const std::string& list);

// What a follower says instead of serving: kUnavailable with reason kNotLeader and, when known,
// the detail "leader" (its address), which Replicas follows.
inline constexpr const char* kNotLeader = "NOT_LEADER";
Status NotLeader(const std::string& service, const std::string& self, const std::string& leader);

template <typename Service>
class Replicas {
 public:
  using Stub = typename Service::Stub;

  explicit Replicas(const std::string& addresses, const ChannelOptions& options = {}) {
    for (const std::string& a : SplitAddressList(addresses))
      Add(a, options);
    if (replicas_.empty()) Add(addresses, options);  // a call then fails with gRPC's error
    options_ = options;
  }

  std::size_t size() const { return replicas_.size(); }
  // The replica calls go to now.
  std::string current() const { return replicas_[current_.load()]->address; }
  Stub& stub() { return *replicas_[current_.load()]->stub; }

  // One attempt: `call(stub)` on the current replica. When the replica cannot be reached or is
  // not the leader, the next attempt goes to the leader it named or to the next replica.
  template <typename F>
  grpc::Status Attempt(F&& call) {
    std::size_t at = current_.load();
    grpc::Status st = call(*replicas_[at]->stub);
    const bool unreachable =
        st.error_code() == grpc::StatusCode::UNAVAILABLE ||
        (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !IsHandlerStatus(st));
    if (unreachable && replicas_.size() > 1) {
      std::size_t next = (at + 1) % replicas_.size();
      const std::string leader = FromGrpcStatus(st).detail("leader");
      for (std::size_t i = 0; i < replicas_.size() && !leader.empty(); ++i) {
        if (replicas_[i]->address == leader && i != at) next = i;
      }
      current_.compare_exchange_strong(at, next);
    }
    return st;
  }

 private:
  struct Replica {
    std::string address;
    std::unique_ptr<Stub> stub;
  };
  void Add(const std::string& address, const ChannelOptions& options) {
    auto r = std::make_unique<Replica>();
    r->address = address;
    r->stub = Service::NewStub(MakeChannel(address, options));
    replicas_.push_back(std::move(r));
  }

  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<std::size_t> current_{0};
  ChannelOptions options_;
};

}  // namespace ff

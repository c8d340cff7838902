#include "fs3/routing.h"

#include "common/rpc_client.h"

namespace ff::fs3 {

Result<fs3rpc::RoutingInfo> FetchRouting(MgmtdReplicas& mgmtd, const RoutingFetch& fetch) {
  fs3rpc::GetRoutingRequest req;
  req.set_known_version(fetch.known_version);
  req.set_wait_ms(static_cast<int64_t>(fetch.wait.count()));
  CallOptions o = CallOptions::Idempotent(fetch.deadline + fetch.wait);
  o.max_attempts = fetch.attempts;
  fs3rpc::RoutingInfo info;
  FF_RETURN_IF_ERROR(CallRpc("fs3-mgmtd GetRouting", o, [&](grpc::ClientContext* c) {
    return mgmtd.Attempt([&](fs3rpc::Mgmtd::Stub& s) { return s.GetRouting(c, req, &info); });
  }));
  return info;
}

std::map<uint64_t, std::string> TargetAddresses(const fs3rpc::RoutingInfo& routing) {
  std::map<std::string, std::string> address_of_node;
  for (const auto& n : routing.nodes())
    address_of_node[n.name()] = n.address();
  std::map<uint64_t, std::string> out;
  for (const auto& t : routing.targets())
    out[t.id()] = address_of_node[t.node()];
  return out;
}

std::string TargetAddress(const fs3rpc::RoutingInfo& routing, uint64_t target) {
  for (const auto& t : routing.targets()) {
    if (t.id() != target) continue;
    for (const auto& n : routing.nodes()) {
      if (n.name() == t.node()) return n.address();
    }
  }
  return "";
}

std::string AddressOf(const std::map<uint64_t, std::string>& addresses, uint64_t target) {
  auto it = addresses.find(target);
  return it == addresses.end() ? std::string() : it->second;
}

}  // namespace ff::fs3

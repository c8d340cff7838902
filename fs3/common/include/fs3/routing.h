// Reading fs3-mgmtd's routing table, the one way every fs3 component does it (the storage client,
// the storage services, the fs3 CLI): one GetRouting call, long-polling for a version newer than
// the one known, and where each target's storage service answers. fs3-mgmtd is dialled through
// MgmtdReplicas: one address, or every replica's ("a:7000,b:7000"), following the leader.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "common/replicas.h"
#include "common/result.h"
#include "fs3/proto/mgmtd.grpc.pb.h"

namespace ff::fs3 {

using MgmtdReplicas = Replicas<fs3rpc::Mgmtd>;

struct RoutingFetch {
  // With a known version, fs3-mgmtd answers when a newer one exists or after `wait`.
  uint64_t known_version = 0;
  std::chrono::milliseconds wait{0};
  std::chrono::milliseconds deadline{2000};  // per attempt
  int attempts = 1;                          // retried while fs3-mgmtd is unreachable
};

Result<fs3rpc::RoutingInfo> FetchRouting(MgmtdReplicas& mgmtd, const RoutingFetch& fetch);

// Each target's service address (target id -> host:port); a target whose service the table does
// not name maps to "" (a call to it fails and is retried with fresh routing).
std::map<uint64_t, std::string> TargetAddresses(const fs3rpc::RoutingInfo& routing);

// The service address of one target, "" when the table names none (one lookup, no map built:
// for the write path, which asks once per request).
std::string TargetAddress(const fs3rpc::RoutingInfo& routing, uint64_t target);

// The address of `target` in such a map, "" when absent.
std::string AddressOf(const std::map<uint64_t, std::string>& addresses, uint64_t target);

}  // namespace ff::fs3

// `fs3 fsck --data`: do the serving replicas of every chunk agree? Every serving target of a
// chain must hold each chunk at the same committed version, with the same length and checksum,
// and (when the content is read) content that matches that checksum. A replica that differs has
// lost an acknowledged write or holds one the others do not: what CRAQ promises never happens.
//
// Writes may go on during the check: a chain whose replicas differ is dumped again after a pause,
// and only a difference that stays the same in every round is reported (a write in flight moves
// the versions on between rounds).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "fs3/proto/mgmtd.pb.h"
#include "fs3/proto/storage.pb.h"

namespace ff::fs3 {

struct ReplicaCheckOptions {
  bool read_content = true;  // also read each replica's content and check it against its checksum
  int rounds = 3;            // a difference is reported when it is seen in every one
  std::chrono::milliseconds pause{1000};      // between rounds
  std::chrono::milliseconds deadline{30000};  // per call to a storage service
};

struct ReplicaCheckReport {
  uint64_t chains = 0;      // checked (those with a serving target)
  uint64_t chunks = 0;      // distinct chunks compared
  uint64_t bytes_read = 0;  // content read (with read_content)
  // "chain 3 chunk 12:0: target 21 has version 7 (4096 bytes, crc32c 0x1a2b3c4d), target 31 has
  // version 6 (...)"; also a chain that has no serving target.
  std::vector<std::string> problems;
};

// One chain's replicas as their DumpMeta listed them (target -> chunks): the chunks on which they
// differ, keyed by "inode:index", with what differs.
std::map<std::string, std::string> CompareReplicas(
    const std::map<uint64_t, std::vector<fs3rpc::ChunkMetaRecord>>& dumps);

// Checks every chain of `routing` against its serving targets' storage services.
Result<ReplicaCheckReport> CheckReplicas(const fs3rpc::RoutingInfo& routing,
                                         const ReplicaCheckOptions& options = {});

}  // namespace ff::fs3

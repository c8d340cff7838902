#include "fs3/replica_check.h"

#include <grpcpp/grpcpp.h>

#include <cinttypes>
#include <cstdio>
#include <set>
#include <thread>

#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "fs3/crc32c.h"
#include "fs3/routing.h"
#include "fs3/transport.h"

namespace ff::fs3 {
namespace {

using Dumps = std::map<uint64_t, std::vector<fs3rpc::ChunkMetaRecord>>;

std::string ChunkKey(const fs3rpc::ChunkId& id) {
  return std::to_string(id.inode()) + ":" + std::to_string(id.index());
}

std::string Describe(uint64_t target, const fs3rpc::ChunkMetaRecord* r) {
  if (r == nullptr || r->committed_version() == 0) {
    return "target " + std::to_string(target) + " has no committed version";
  }
  char crc[16];
  std::snprintf(crc, sizeof crc, "0x%08" PRIx32, r->crc32c());
  return "target " + std::to_string(target) + " has version " +
         std::to_string(r->committed_version()) + " (" + std::to_string(r->length()) +
         " bytes, crc32c " + crc + ")";
}

// One round over one chain: its serving replicas' listings, compared, and (with read_content)
// their contents checked. Problems keyed by chunk ("" for the chain as a whole).
std::map<std::string, std::string> CheckChain(const std::vector<uint64_t>& serving,
                                              const std::map<uint64_t, std::string>& where,
                                              const ReplicaCheckOptions& options,
                                              StorageStubs& stubs, GrpcTransport& transport,
                                              ReplicaCheckReport* report) {
  Dumps dumps;
  std::map<std::string, std::string> problems;
  for (uint64_t target : serving) {
    const std::string address = AddressOf(where, target);
    fs3rpc::DumpMetaRequest req;
    req.set_target(target);
    fs3rpc::DumpMetaResponse resp;
    Status st = address.empty()
                    ? Unavailable("the routing table names no service for it")
                    : CallRpc("fs3-storage DumpMeta", CallOptions::Idempotent(options.deadline),
                              [&](grpc::ClientContext* c) {
                                return stubs.Get(address)->DumpMeta(c, req, &resp);
                              });
    if (!st.ok()) {
      problems["target " + std::to_string(target)] =
          "target " + std::to_string(target) + " could not be listed: " + st.message();
      continue;
    }
    dumps[target].assign(resp.chunks().begin(), resp.chunks().end());
  }
  for (auto& [key, text] : CompareReplicas(dumps))
    problems[key] = text;
  std::set<std::string> chunks;
  for (const auto& [target, records] : dumps)
    for (const auto& r : records)
      if (r.committed_version() != 0) chunks.insert(ChunkKey(r.id()));
  report->chunks += chunks.size();
  if (!options.read_content) return problems;
  for (const auto& [target, records] : dumps) {
    const std::string address = AddressOf(where, target);
    for (const auto& r : records) {
      if (r.committed_version() == 0 || r.length() == 0) continue;
      fs3rpc::ReadRequest req;
      req.set_target(target);
      *req.mutable_chunk() = r.id();
      req.set_length(r.length());
      fs3rpc::ReadResponse resp;
      Status st = transport.Read(address, req, &resp, options.deadline);
      const std::string key = ChunkKey(r.id());
      const std::string at = "target " + std::to_string(target);
      if (!st.ok()) {
        // A chunk being rewritten is retried by the next round; any other failure (a block that
        // fails its checksum) is the replica's.
        problems[key + "@" + std::to_string(target)] = at + " cannot be read: " + st.message();
        continue;
      }
      report->bytes_read += resp.data().size();
      if (resp.version() != r.committed_version()) {
        problems[key + "@" + std::to_string(target)] =
            at + " moved from version " + std::to_string(r.committed_version()) + " to " +
            std::to_string(resp.version()) + " while being read";
        continue;
      }
      if (resp.data().size() != r.length() || Crc32c(resp.data()) != r.crc32c()) {
        problems[key + "@" + std::to_string(target)] = at + ": the content of version " +
                                                       std::to_string(r.committed_version()) +
                                                       " does not match its checksum";
      }
    }
  }
  return problems;
}

}  // namespace

std::map<std::string, std::string> CompareReplicas(const Dumps& dumps) {
  std::map<std::string, std::map<uint64_t, const fs3rpc::ChunkMetaRecord*>> by_chunk;
  for (const auto& [target, records] : dumps)
    for (const auto& r : records)
      if (r.committed_version() != 0) by_chunk[ChunkKey(r.id())][target] = &r;
  std::map<std::string, std::string> problems;
  for (const auto& [key, held] : by_chunk) {
    const fs3rpc::ChunkMetaRecord* first = nullptr;
    bool same = held.size() == dumps.size();
    for (const auto& [target, r] : held) {
      if (first == nullptr) {
        first = r;
        continue;
      }
      same = same && r->committed_version() == first->committed_version() &&
             r->length() == first->length() && r->crc32c() == first->crc32c();
    }
    if (same) continue;
    std::string text;
    for (const auto& [target, records] : dumps) {
      auto it = held.find(target);
      if (!text.empty()) text += ", ";
      text += Describe(target, it == held.end() ? nullptr : it->second);
    }
    problems[key] = text;
  }
  return problems;
}

Result<ReplicaCheckReport> CheckReplicas(const fs3rpc::RoutingInfo& routing,
                                         const ReplicaCheckOptions& options) {
  ReplicaCheckReport report;
  const std::map<uint64_t, std::string> where = TargetAddresses(routing);
  StorageStubs stubs;
  GrpcTransport transport;
  for (const auto& chain : routing.chains()) {
    std::vector<uint64_t> serving;
    for (const auto& t : chain.targets())
      if (t.state() == "serving") serving.push_back(t.target());
    const std::string name = "chain " + std::to_string(chain.id());
    if (serving.empty()) {
      report.problems.push_back(name + " has no serving target");
      continue;
    }
    ++report.chains;
    // A difference counts when every round sees it, word for word: a write in flight changes
    // the versions between rounds, a lost or extra write does not.
    std::map<std::string, std::string> seen;
    for (int round = 0; round < std::max(1, options.rounds); ++round) {
      if (round > 0) std::this_thread::sleep_for(options.pause);
      ReplicaCheckReport counted;
      auto found =
          CheckChain(serving, where, options, stubs, transport, round == 0 ? &report : &counted);
      if (round == 0) {
        seen = std::move(found);
      } else {
        for (auto it = seen.begin(); it != seen.end();) {
          auto again = found.find(it->first);
          it = again != found.end() && again->second == it->second ? std::next(it) : seen.erase(it);
        }
      }
      if (seen.empty()) break;
    }
    for (const auto& [key, text] : seen) {
      const auto at = key.find('@');
      report.problems.push_back(
          name + (key.starts_with("target ") ? "" : " chunk " + key.substr(0, at)) + ": " + text);
    }
  }
  return report;
}

}  // namespace ff::fs3

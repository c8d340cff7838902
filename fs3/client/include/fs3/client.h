// libfs3client, data part: reads and writes of file data straight to the storage targets.
//
// A file (inode) is cut into chunks of the cluster's chunk size; chunk i lives on chain
// chains[i mod stripe] of the file's layout (chosen by fs3-meta at create), or, for callers
// without a layout, on the (n + i) mod chains'th chain of the routing table. Writes go to the
// chain's head; reads to a serving replica, rotated across replicas and tried in turn. Stale
// routing (the chain moved on), dead targets and heads that changed are retried with a refreshed
// routing table until `retry_timeout`; a request fails only when no replica can serve it. A write
// keeps its request id across retries, so it is applied once.
//
// Incast control (request-to-send): reads are granted by the client, which issues a read only
// when the bytes it may bring back fit under `max_inflight_read_bytes`; targets reply only to
// reads they were sent, so a batch over many targets never floods the client's link.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "fs3/proto/storage.grpc.pb.h"
#include "fs3/routing.h"
#include "fs3/transport.h"

namespace ff::fs3 {

struct ClientOptions {
  std::string mgmtd;  // fs3-mgmtd host:port
  std::chrono::milliseconds retry_timeout{std::chrono::seconds(60)};
  std::chrono::milliseconds rpc_timeout{std::chrono::seconds(10)};
  uint64_t max_inflight_read_bytes = uint64_t{64} << 20;
  // How chunk data travels; empty: gRPC (GrpcTransport).
  std::shared_ptr<ChunkTransport> transport;
};

// The chains a file's chunks rotate over (its layout; chunk i on chains[i % size]). Empty: the
// default placement, chunk i of inode n on the (n + i) mod chains'th chain of the routing table.
using Chains = std::span<const uint32_t>;

// The reads this process's clients issued to each storage target so far (every StorageClient
// together): how many a target answered, their bytes, and their time from issue to answer (its
// queue and disk, and the wire both ways). Step telemetry takes the differences over a step
// (hai_job's "read" peer clock, through fs3client.read_clock()): the target a job waits on.
struct TargetReads {
  uint64_t target = 0;
  uint64_t reads = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};
std::vector<TargetReads> ProcessTargetReads();

struct ReadOp {
  uint64_t inode = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  std::vector<uint32_t> chains;  // the file's layout (empty: default placement)
};

class StorageClient {
 public:
  static Result<std::unique_ptr<StorageClient>> Create(const ClientOptions& options);

  // Writes `data` at `offset` of file `inode` (across as many chunks as it spans).
  Status Write(uint64_t inode, uint64_t offset, std::string_view data, Chains chains = {});
  // The same, taking the buffer: data within one chunk goes out without a copy.
  Status WriteBuffer(uint64_t inode, uint64_t offset, std::string data, Chains chains = {});
  // Up to `length` bytes at `offset`; holes and the end of chunks read as zeros up to the
  // chunk's written length (callers know file lengths from metadata).
  Result<std::string> Read(uint64_t inode, uint64_t offset, uint32_t length, Chains chains = {});
  // Cuts (or zero-extends) chunk `index` of `inode` to `length` bytes, on every replica.
  Status TruncateChunk(uint64_t inode, uint32_t index, uint32_t length, Chains chains = {});
  // Removes chunk `index` of `inode` from every replica (absent is fine).
  Status RemoveChunk(uint64_t inode, uint32_t index, Chains chains = {});
  // Many reads at once (issued concurrently); results in order.
  Result<std::vector<std::string>> ReadBatch(const std::vector<ReadOp>& ops);

  // What the data of `inode` on storage implies, asked of every chain's tail: the length (the end
  // of its last committed chunk; 0 when it has no chunks) and the bytes one copy of it stores
  // (holes left out: a file's st_blocks).
  struct Extent {
    uint64_t length = 0;
    uint64_t stored_bytes = 0;
  };
  Result<Extent> StoredExtent(uint64_t inode);
  // StoredExtent's length.
  Result<uint64_t> StoredLength(uint64_t inode);
  // Cuts the data of `inode` to `length`: removes the chunks past it (up to `old_length`, which
  // the caller takes as at least the stored length) and shortens the one it ends in.
  Status TruncateData(uint64_t inode, uint64_t length, uint64_t old_length, Chains chains = {});
  // For fsck: every inode with chunks on storage and the length its chunks imply (from each
  // chain's tail), asked again with fresh routing for `retry_timeout` while a tail is replaced.
  Result<std::map<uint64_t, uint64_t>> StoredLengths();
  // Removes every chunk of `inode` (a deleted file's data); with no `chains`, from every chain.
  Status RemoveData(uint64_t inode, Chains chains = {});
  // The ids of the routing table's chains (fs3-meta picks a new file's chains from them).
  std::vector<uint32_t> ChainIds() const;
  // Over all serving targets, divided by the replication: what one copy of the data takes.
  struct Space {
    uint64_t used_bytes = 0;      // chunk contents held
    uint64_t free_bytes = 0;      // left for writes on the targets' disks (reserves left out)
    uint64_t capacity_bytes = 0;  // used + free
  };
  Result<Space> SpaceInfo();

  uint64_t chunk_size() const;
  // The most read bytes that were in flight at once (for tests and tuning).
  uint64_t peak_inflight_read_bytes() const;
  Status RefreshRouting();

 private:
  Result<std::map<uint64_t, uint64_t>> StoredLengthsOnce();
  explicit StorageClient(const ClientOptions& options);
  Status WriteChunk(uint64_t inode, uint32_t index, uint32_t offset, std::string_view data,
                    Chains chains);
  // Sends `req` (chunk, offset, data or flags set) to its chain's head, retrying.
  Status SendToHead(fs3rpc::WriteRequest& req, Chains chains);
  Result<std::string> ReadChunk(uint64_t inode, uint32_t index, uint32_t offset, uint32_t length,
                                Chains chains);
  // The position in routing_ of the chain holding chunk `index`.
  Result<int> ChainPositionLocked(uint64_t inode, uint32_t index, Chains chains) const
      FF_REQUIRES(mu_);
  // (target, address) of each chain's tail, for queries of committed state.
  std::vector<std::pair<uint64_t, std::string>> ChainTails();

  const ClientOptions options_;
  std::unique_ptr<MgmtdReplicas> mgmtd_;
  mutable Mutex mu_;
  fs3rpc::RoutingInfo routing_ FF_GUARDED_BY(mu_);
  std::shared_ptr<ChunkTransport> transport_;  // chunk data
  StorageStubs stubs_;                         // control calls
  std::atomic<uint64_t> next_request_;
  std::atomic<uint64_t> rotate_{0};
  // Read credits (request-to-send).
  mutable Mutex credit_mu_;
  CondVar credit_cv_;
  uint64_t inflight_ FF_GUARDED_BY(credit_mu_) = 0;
  uint64_t peak_ FF_GUARDED_BY(credit_mu_) = 0;
};

}  // namespace ff::fs3

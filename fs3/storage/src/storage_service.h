// fs3-storage: one per storage node, serving its targets (one per disk) with CRAQ.
//
// Writes enter at a chain's head, which serialises them per chunk (a lock per chunk), stores the
// new version as pending and forwards it to its successor; the tail commits and answers, and each
// replica commits as the answer travels back. A successor that lacks the base version gets the
// whole chunk instead. Retried requests (same request id) are applied once. Reads are served by
// any serving replica; one holding a pending version asks the tail which version is committed
// (CRAQ's apportioned query). A target that returns after a failure rejoins at the tail as
// syncing: its predecessor diffs chunk metadata and sends full-chunk replaces (and removals),
// then tells it the sync is done.
//
// The chain's invariants, and where the code keeps them:
//  - Version order: the head numbers a chunk's versions (committed + 1) under the chunk's lock,
//    and every replica applies them in that order (a replica lacking the base version answers
//    kStaleVersion and gets the whole chunk). A replica commits only after its successor has.
//  - A write's successor is decided under the chunk's lock, from routing that is still current
//    when the write registers (BeginWrite): a write never decides "no successor" from routing
//    that a resync has already moved past.
//  - A resync of a successor at chain version v starts (DumpMeta, List) only once every write
//    that registered under an older version is over (WaitForOlderWrites). Every write that
//    registers later forwards to the syncing successor; every one before is in the List. So no
//    write is acknowledged that the successor neither receives nor is sent.
//  - A chunk being overwritten during the resync is compared and sent under its lock; a chunk the
//    successor holds and we do not is removed under its lock only if we still do not hold it.
//  - A rejoining target serves nothing until its predecessor's SyncDone for the chain version it
//    is syncing in (a SyncDone from an older version is refused), and then only once fs3-mgmtd
//    has made it serving.
//
// Leases: the service heartbeats to fs3-mgmtd; when it cannot renew within half the lease it
// refuses I/O (fenced) until it can, so a partitioned service never serves stale data. After a
// restart it waits until mgmtd has marked its targets offline before heartbeating, so every
// target goes through recovery.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/config.h"
#include "common/thread_annotations.h"
#include "fs3/chain.h"
#include "fs3/chunk_store.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "fs3/proto/storage.grpc.pb.h"
#include "fs3/routing.h"
#include "fs3/transport.h"
#include "monitoring/metrics.h"

namespace ff::fs3 {

// Writes applied recently, by request id, so that a retried write is answered with what it did
// the first time instead of being applied again. An entry is kept for `retention`; past
// `max_entries` the oldest go first (never the whole table: the write applied just now is the
// one a client is most likely retrying).
class RecentWrites {
 public:
  using Clock = std::chrono::steady_clock;
  struct Applied {
    uint64_t version = 0;
    uint32_t length = 0;
  };
  RecentWrites(Clock::duration retention, std::size_t max_entries)
      : retention_(retention), max_entries_(max_entries) {}

  std::optional<Applied> Find(uint64_t request_id) const;
  // Request id 0 (none given) is not remembered.
  void Add(uint64_t request_id, Applied applied, Clock::time_point now);
  std::size_t size() const { return by_id_.size(); }
  // Entries dropped for lack of room while younger than `retention`.
  uint64_t evicted_early() const { return evicted_early_; }

 private:
  struct Entry {
    Applied applied;
    Clock::time_point at;
  };
  const Clock::duration retention_;
  const std::size_t max_entries_;
  std::unordered_map<uint64_t, Entry> by_id_;
  std::deque<std::pair<Clock::time_point, uint64_t>> order_;  // oldest first
  uint64_t evicted_early_ = 0;
};

// What a lease renewal requires before the service serves again: routing at least as new as the
// version fs3-mgmtd reported with the renewal. A service that paused past its lease was dropped
// from its chains meanwhile; until it has read that, its old routing still says it serves.
class LeaseRouting {
 public:
  void Renewed(uint64_t routing_version) { required_ = std::max(required_, routing_version); }
  bool RoutingCurrent(uint64_t have) const { return have >= required_; }
  uint64_t required_routing() const { return required_; }

 private:
  uint64_t required_ = 0;
};

// Whether a write may go on after its replica refreshed its routing mid-write: the target must
// still take writes, and a write that entered here as the head must still be at the head.
Status MayContinueWrite(PublicState state, bool head, bool forwarded, uint64_t target);

// Resync: whether the successor's record of a chunk (null: it has none) already holds our
// committed version of it, so that the chunk need not be sent.
bool SuccessorHoldsCommitted(const fs3rpc::ChunkMetaRecord& ours,
                             const fs3rpc::ChunkMetaRecord* theirs);

struct StorageTargetOptions {
  uint64_t id = 0;
  std::string path;
  void Bind(ConfigSection& s);
};

struct StorageOptions {
  static constexpr const char* kSection = "storage";  // its section in the config file
  std::string node;                                   // this service's name
  std::string mgmtd;                                  // fs3-mgmtd host:port
  std::string advertise;  // address others reach this service at; default: the bound one
  std::vector<StorageTargetOptions> targets;
  int64_t forward_timeout_ms = 30000;  // how long a write keeps retrying a failed successor
  // Applied writes are remembered by request id so a retry is not applied twice: each for
  // `dedup_retention_s` (longer than any client retries), at most `dedup_max_entries` of them.
  int64_t dedup_retention_s = 600;
  int64_t dedup_max_entries = 1000000;
  // Fault injection (tests and benches: a slow disk, a hot target): a file whose contents, while
  // it exists, are milliseconds every read waits before it is served. Looked at no more than
  // every 100 ms; empty: off.
  std::string fault_read_delay_file;

  void Bind(ConfigSection& s);
};

class StorageService final : public fs3rpc::Storage::Service {
 public:
  // `transport` carries chunk data to successors (empty: gRPC); tests pass one that injects
  // faults.
  static Result<std::unique_ptr<StorageService>> Create(
      const StorageOptions& options, Metrics* metrics,
      std::shared_ptr<ChunkTransport> transport = nullptr);
  ~StorageService() override;
  void Start(const std::string& address);
  void Stop();

  grpc::Status Write(grpc::ServerContext*, const fs3rpc::WriteRequest*,
                     fs3rpc::WriteResponse*) override;
  grpc::Status WriteStream(grpc::ServerContext*, grpc::ServerReader<fs3rpc::WritePiece>*,
                           fs3rpc::WriteResponse*) override;
  grpc::Status Read(grpc::ServerContext*, const fs3rpc::ReadRequest*,
                    fs3rpc::ReadResponse*) override;
  grpc::Status ReadStream(grpc::ServerContext*, const fs3rpc::ReadRequest*,
                          grpc::ServerWriter<fs3rpc::ReadResponse>*) override;
  grpc::Status QueryVersion(grpc::ServerContext*, const fs3rpc::QueryVersionRequest*,
                            fs3rpc::QueryVersionResponse*) override;
  grpc::Status DumpMeta(grpc::ServerContext*, const fs3rpc::DumpMetaRequest*,
                        fs3rpc::DumpMetaResponse*) override;
  grpc::Status SyncDone(grpc::ServerContext*, const fs3rpc::SyncDoneRequest*,
                        fs3rpc::SyncDoneResponse*) override;
  grpc::Status Extent(grpc::ServerContext*, const fs3rpc::ExtentRequest*,
                      fs3rpc::ExtentResponse*) override;
  grpc::Status SpaceInfo(grpc::ServerContext*, const fs3rpc::SpaceInfoRequest*,
                         fs3rpc::SpaceInfoResponse*) override;

 private:
  // Where a target sits in its chain, from the routing table.
  struct Position {
    uint32_t chain = 0;
    uint64_t chain_version = 0;
    PublicState state = PublicState::kOffline;
    std::string successor;  // address of the next writable target's service ("" at the tail)
    uint64_t successor_target = 0;
    std::string tail;  // address of the chain's tail service
    uint64_t tail_target = 0;
    bool head = false;
  };

  StorageService(const StorageOptions& options, Metrics* metrics,
                 std::shared_ptr<ChunkTransport> transport);
  Status DoWrite(const fs3rpc::WriteRequest& req, fs3rpc::WriteResponse* resp);
  grpc::Status DoRead(grpc::ServerContext*, const fs3rpc::ReadRequest*, fs3rpc::ReadResponse*);
  grpc::Status TimedWrite(const fs3rpc::WriteRequest& req, fs3rpc::WriteResponse* resp);
  Result<Position> Locate(uint64_t target, uint64_t chain_version_hint);
  // The refusals of a write at `pos` (wrong chain, stale version, not writable, not the head).
  Status CheckWritePosition(const fs3rpc::WriteRequest& req, const Position& pos) const;
  // A write in progress on `target` under `chain_version`, counted so that a resync waits for it
  // (the chain's invariants above). Begin fails (kAborted, stale) when the routing has moved past
  // `chain_version` since the caller located itself.
  Status BeginWrite(uint64_t target, uint64_t chain_version);
  void EndWrite(uint64_t target, uint64_t chain_version);
  // Waits until no write registered on `target` under a chain version older than `chain_version`
  // is in progress; kUnavailable after `timeout` or when stopping.
  Status WaitForOlderWrites(uint64_t target, uint64_t chain_version,
                            std::chrono::milliseconds timeout);
  Status CheckServing() const;
  std::mutex& ChunkLock(uint64_t target, const fs3rpc::ChunkId& id);
  fs3rpc::Storage::Stub* Peer(const std::string& address);
  Status RefreshRouting(bool wait, uint64_t known);
  void HeartbeatLoop();
  // Each target's free space into fs3_storage_target_{capacity,free,reserve}_bytes, and a log line
  // when a target crosses into or out of "nearly full" or "full" (at most once a second; from the
  // heartbeat thread).
  void WatchSpace();
  void RoutingLoop();
  void SyncLoop();
  Status SyncSuccessor(uint64_t target, const Position& pos);

  const StorageOptions options_;
  // fault_read_delay_file's delay, as last read.
  std::chrono::milliseconds FaultReadDelay();
  Mutex fault_mu_;
  std::chrono::steady_clock::time_point fault_checked_ FF_GUARDED_BY(fault_mu_){};
  std::chrono::milliseconds fault_delay_ FF_GUARDED_BY(fault_mu_){0};
  Metrics* metrics_;
  std::string address_;
  std::map<uint64_t, std::unique_ptr<ChunkStore>> stores_;
  std::unique_ptr<MgmtdReplicas> mgmtd_;       // every fs3-mgmtd replica; calls follow the leader
  std::shared_ptr<ChunkTransport> transport_;  // chunk data to successors
  StorageStubs peers_;                         // control calls to other services

  mutable Mutex mu_;
  CondVar routing_changed_;
  fs3rpc::RoutingInfo routing_ FF_GUARDED_BY(mu_);
  // From routing_: target -> its service.
  std::map<uint64_t, std::string> target_address_ FF_GUARDED_BY(mu_);
  std::string AddressOf(uint64_t target) const FF_REQUIRES(mu_);
  std::map<uint64_t, LocalState> local_ FF_GUARDED_BY(mu_);  // per target
  RecentWrites done_ FF_GUARDED_BY(mu_);
  // (chain, version, successor)
  std::set<std::tuple<uint32_t, uint64_t, uint64_t>> synced_ FF_GUARDED_BY(mu_);
  // (target, chain version) -> writes
  std::map<std::pair<uint64_t, uint64_t>, int> writing_ FF_GUARDED_BY(mu_);
  CondVar write_ended_;  // a write left writing_
  int64_t lease_ms_ FF_GUARDED_BY(mu_) = 10000;
  // When the last renewal was sent.
  std::chrono::steady_clock::time_point renewed_ FF_GUARDED_BY(mu_){};
  LeaseRouting lease_ FF_GUARDED_BY(mu_);
  bool registered_ FF_GUARDED_BY(mu_) = false;
  bool fetched_ FF_GUARDED_BY(mu_) = false;  // the routing table was fetched at least once

  // WatchSpace's: each target's last level (0 room, 1 nearly full, 2 full), and when it last ran.
  std::map<uint64_t, int> space_level_;
  std::chrono::steady_clock::time_point space_watched_{};

  // Striped: each serializes the writes of the chunks hashed to it (their files and records on
  // disk, not members of this object, so nothing is FF_GUARDED_BY them).
  std::array<std::mutex, 1024> chunk_locks_;
  std::atomic<bool> stopping_{false};
  std::thread heartbeat_, routing_thread_, sync_;
};

}  // namespace ff::fs3

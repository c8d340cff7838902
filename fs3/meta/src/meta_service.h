// fs3-meta: the namespace service, the MetaStore behind gRPC. Stateless above its store (so it
// can be restarted at any point): RocksDB on its own disk (one server), or etcd, where any number
// of fs3-meta servers serve one namespace at once (clients spread their calls over them) and the
// garbage collector runs on one of them at a time, elected. Mutating calls carry a request id: a
// retry of a call that already succeeded gets the first answer, also across a restart (creates
// through the inode's record, the others through request records kept for an hour).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/etcd.h"
#include "common/frame_rpc.h"
#include "common/leader_election.h"
#include "common/thread_annotations.h"
#include "fs3/client.h"
#include "fs3/meta_store.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "monitoring/metrics.h"

namespace ff::fs3 {

struct MetaOptions {
  static constexpr const char* kSection = "meta";  // its section in the config file
  // Where the namespace lives: "rocksdb" (in data_dir) or "etcd" (under etcd_prefix in the etcd
  // cluster at etcd_endpoints, shared by every server configured alike).
  std::string engine = "rocksdb";
  std::string data_dir;                     // rocksdb
  std::vector<std::string> etcd_endpoints;  // etcd: "host:port" of the members
  std::string etcd_prefix = "/fireflyer/fs3/meta/";
  // This server's name in the garbage collector's election ("" = its RPC address).
  std::string name;
  uint64_t chunk_size = 4 << 20;  // the root directory's layout, inherited below it
  uint32_t stripe = 16;
  // fs3-mgmtd's address: with it, fs3-meta settles file lengths from storage on close and fsync,
  // cuts chunks on truncate, reports space in statfs and deletes removed files' chunks.
  std::string mgmtd;
  uint32_t gc_interval_ms = 1000;  // how often the garbage collector looks for removed files
  // How long a client's lease on its open files' sessions lasts without renewal (it renews every
  // third of that): a client silent that long is taken for dead and its sessions end.
  uint32_t client_lease_s = 30;
  // How long a chunk write may still commit in its chain after its client stopped waiting for it
  // (the chain's forwarding retries, fs3-storage's forward_timeout_ms, 30 s by default, outlast
  // the client's last try): the length of a file whose write failed, or whose writer went without
  // closing, is settled from storage again after this.
  uint32_t late_write_s = 60;
  // The frame transport (common/frame_rpc.h) clients use for metadata calls: "" listens on the
  // gRPC address's host, any free port (clients learn it with Endpoints), except where the
  // cluster runs TLS (frames are plain: common/tls.h); "host:port"; or "off" (clients then use
  // gRPC).
  std::string frames_listen;
  // What an answer promises (the RocksDB engine; on etcd every change is on a majority's disks
  // before it is answered). 0: every answer waits until what the operation did or saw is on
  // disk (concurrent operations share one sync). N: an answer waits for the log to be written to
  // the kernel (it survives a crash of fs3-meta), and the log is synced every N ms by a thread of
  // its own, so a crash of the machine loses at most the changes of the last N ms (and the sync's
  // own time), as a local file system loses its uncommitted journal; a Sync (a mount's fsync or
  // fsyncdir, the native client's fsync) and a shrinking truncate answer only once everything
  // logged before them is on disk, and removed files' chunks are deleted only after their
  // removal is.
  uint32_t sync_interval_ms = 20;
  void Bind(ConfigSection& s);
};

class MetaService final : public fs3rpc::Meta::Service {
 public:
  static Result<std::unique_ptr<MetaService>> Create(const MetaOptions& options, Metrics* metrics);

  grpc::Status Lookup(grpc::ServerContext*, const fs3rpc::NameRequest*, fs3rpc::Inode*) override;
  grpc::Status GetAttr(grpc::ServerContext*, const fs3rpc::InoRequest*, fs3rpc::Inode*) override;
  grpc::Status Make(grpc::ServerContext*, const fs3rpc::MakeRequest*, fs3rpc::Inode*) override;
  grpc::Status Link(grpc::ServerContext*, const fs3rpc::LinkRequest*, fs3rpc::Inode*) override;
  grpc::Status Readlink(grpc::ServerContext*, const fs3rpc::InoRequest*,
                        fs3rpc::XattrReply*) override;
  grpc::Status Unlink(grpc::ServerContext*, const fs3rpc::NameRequest*,
                      fs3rpc::DirsReply*) override;
  grpc::Status Rmdir(grpc::ServerContext*, const fs3rpc::NameRequest*, fs3rpc::DirsReply*) override;
  grpc::Status Rename(grpc::ServerContext*, const fs3rpc::RenameRequest*,
                      fs3rpc::DirsReply*) override;
  grpc::Status Readdir(grpc::ServerContext*, const fs3rpc::ReaddirRequest*,
                       fs3rpc::ReaddirReply*) override;
  grpc::Status SetAttr(grpc::ServerContext*, const fs3rpc::SetAttrRequest*,
                       fs3rpc::Inode*) override;
  grpc::Status SetXattr(grpc::ServerContext*, const fs3rpc::XattrRequest*, fs3rpc::Empty*) override;
  grpc::Status GetXattr(grpc::ServerContext*, const fs3rpc::XattrRequest*,
                        fs3rpc::XattrReply*) override;
  grpc::Status ListXattrs(grpc::ServerContext*, const fs3rpc::InoRequest*,
                          fs3rpc::XattrReply*) override;
  grpc::Status RemoveXattr(grpc::ServerContext*, const fs3rpc::XattrRequest*,
                           fs3rpc::Empty*) override;
  grpc::Status Open(grpc::ServerContext*, const fs3rpc::InoRequest*, fs3rpc::Inode*) override;
  grpc::Status Close(grpc::ServerContext*, const fs3rpc::CloseRequest*, fs3rpc::Empty*) override;
  grpc::Status CloseMany(grpc::ServerContext*, const fs3rpc::CloseBatch*, fs3rpc::Empty*) override;
  grpc::Status KeepClient(grpc::ServerContext*, const fs3rpc::ClientRequest*,
                          fs3rpc::ClientReply*) override;
  grpc::Status Sync(grpc::ServerContext*, const fs3rpc::CloseRequest*, fs3rpc::Inode*) override;
  grpc::Status Statfs(grpc::ServerContext*, const fs3rpc::Empty*, fs3rpc::StatfsReply*) override;
  grpc::Status SetLayout(grpc::ServerContext*, const fs3rpc::SetLayoutRequest*,
                         fs3rpc::Inode*) override;
  grpc::Status Fsck(grpc::ServerContext*, const fs3rpc::FsckRequest*,
                    grpc::ServerWriter<fs3rpc::FsckReply>*) override;
  // The check Fsck streams: `out` gets the final message (done set); `progress`, when given,
  // progress messages about once a second.
  Status RunFsck(const fs3rpc::FsckRequest& r, fs3rpc::FsckReply* out,
                 const std::function<void(const fs3rpc::FsckReply&)>& progress = nullptr);
  grpc::Status Endpoints(grpc::ServerContext*, const fs3rpc::Empty*,
                         fs3rpc::EndpointsReply*) override;

  // The frame transport (on `rpc_address`'s host unless configured) and the garbage collector,
  // which deletes the chunks of removed files (with `mgmtd` set).
  void Start(const std::string& rpc_address = "");
  void Stop();
  // One pass of the collector; returns how many files' data it deleted.
  Result<std::size_t> CollectGarbage();

 private:
  MetaService(const MetaOptions& options, std::unique_ptr<etcd::Client> etcd,
              std::unique_ptr<MetaStore> store, Metrics* metrics);
  // The storage client (made on first use: the cluster may be initialised after fs3-meta starts).
  Result<StorageClient*> Storage();
  // After a write: grows the recorded length of `ino` to `at_least` and to what storage holds,
  // and moves mtime / ctime.
  Result<fs3rpc::Inode> Settle(uint64_t ino, uint64_t at_least);
  // A write to `ino` failed: its length is settled again once late writes are over.
  Status Recheck(uint64_t ino);
  // The sweep's settling of lengths (MetaStore::DueSettles): returns how many marks it took.
  Result<std::size_t> SettleMarked();
  // Runs `body` as the operation `op` (its latency, errors and the log's counters in the
  // metrics). The answer waits for the disk when `durable`, or for every operation when
  // sync_interval_ms is 0.
  grpc::Status Serve(const char* op, const std::function<Status()>& body, bool durable = false);
  void ReportLog();  // the group commit's counters
  // Appends the attributes of directories `inos` (after a change in them) to `dirs`: as the
  // change left them when it wrote them (`changed`), else read; one that cannot be read is left
  // out (the client then asks).
  void AddDirs(google::protobuf::RepeatedPtrField<fs3rpc::Inode>* dirs,
               const MetaStore::Dirs& changed, std::initializer_list<uint64_t> inos);

  // Threads that run one CloseMany's closes side by side (etcd engine).
  static constexpr int kCloseWorkers = 32;
  // Whether this server runs the garbage collector now (always on RocksDB; the elected one on
  // etcd).
  bool CollectsGarbage() const;

  MetaOptions options_;
  std::unique_ptr<etcd::Client> etcd_;  // the etcd engine's client (outlives the store)
  std::unique_ptr<MetaStore> store_;
  std::unique_ptr<LeaderElection> gc_election_;
  Metrics* metrics_;
  prometheus::Counter* logged_batches_ = nullptr;  // with metrics_
  prometheus::Counter* log_syncs_ = nullptr;
  prometheus::Counter* conflicts_ = nullptr;
  std::atomic<uint64_t> reported_conflicts_{0};
  prometheus::Counter* grouped_ = nullptr;
  std::atomic<uint64_t> reported_grouped_{0};
  std::atomic<uint64_t> reported_batches_{0};
  std::atomic<uint64_t> reported_syncs_{0};
  Mutex storage_mu_;
  std::unique_ptr<StorageClient> storage_ FF_GUARDED_BY(storage_mu_);
  Mutex gc_mu_;
  CondVar gc_cv_;
  bool stopping_ FF_GUARDED_BY(gc_mu_) = false;
  // When the collector (its thread alone) next prunes request ids and sweeps sessions.
  std::chrono::steady_clock::time_point next_prune_{}, next_sweep_{};
  std::string settle_cursor_;  // where the sweep goes on through the settle marks

  std::thread gc_;
  std::thread syncer_;  // syncs the log every sync_interval_ms (when not 0)
  prometheus::Gauge* unsynced_ = nullptr;
  std::unique_ptr<FrameServer> frames_;
};

}  // namespace ff::fs3

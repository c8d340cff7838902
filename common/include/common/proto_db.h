// Protobuf records under string keys, for daemons' durable state (hai-server's jobs, fs3-mgmtd's
// chains, fs3-meta's namespace through txn_kv.h), in one of two engines chosen by configuration:
//
//   RocksDB (Open): embedded, on the daemon's own disk; the default for one machine. Every write
//   is synced before it returns, so what a daemon acknowledged survives a crash; several records
//   can go in one atomic, synced batch. Writes are refused (kResourceExhausted, "No space left on
//   device") while the file system has less free than a reserve (ReserveFor: 64 MiB, or a
//   twentieth of a smaller file system): RocksDB needs room to flush and compact, and Debian's
//   build aborts the process on a write that hits a full disk. The reserve is there for what frees
//   space: a batch of deletions only, or one written with SpaceUse::kFrees, goes through below it,
//   so that removing data always works on a full disk. The database is sized for its file system
//   (memtable, and so the write-ahead log RocksDB preallocates, and the manifest's preallocation
//   scale down on small disks), so that a small disk is not half taken by preallocation.
//
//   etcd (OpenEtcd): the records live under a key prefix in an etcd cluster (Raft: a write
//   returns once a majority has it on disk), so a replica on another machine reads what this one
//   wrote. With a fence (a leader's LeaderElection::Fence), every write is one etcd transaction
//   conditional on the writer still being leader: a deposed leader's writes fail with
//   kFailedPrecondition and change nothing. Limits (etcd's): one record at most 1.5 MiB (the
//   server's --max-request-bytes), one batch at most --max-txn-ops records (128 by default;
//   deploy/ sets 1024), the whole store within --quota-backend-bytes (2 GiB by default; past it
//   every write fails with kResourceExhausted until an operator compacts and defragments).
#pragma once

#include <google/protobuf/message.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace etcdserverpb {
class Compare;
}  // namespace etcdserverpb

namespace ff {
namespace etcd {
class Client;
}  // namespace etcd

class ProtoDb {
 public:
  // Opens (creating it, and its parent folders, if missing) the RocksDB database in directory
  // `path`. kUnavailable names the path and RocksDB's reason (e.g. another process holds its
  // lock).
  static Result<std::unique_ptr<ProtoDb>> Open(const std::string& path);
  // The etcd engine: records under `prefix` (e.g. "/fireflyer/fs3/mgmtd/"); `fence`, when given,
  // is asked for the comparison every write is conditional on. `client` outlives the store.
  using Fence = std::function<etcdserverpb::Compare()>;
  static Result<std::unique_ptr<ProtoDb>> OpenEtcd(etcd::Client* client, std::string prefix,
                                                   Fence fence = nullptr);
  virtual ~ProtoDb() = default;

  static constexpr uint64_t kMaxReserveBytes = 64ull << 20;
  // The free space a file system of `capacity` bytes keeps for deletions and the database's own
  // work: a twentieth of it, at most kMaxReserveBytes. Other stores on the same disk (a storage
  // target's chunk files) stop at the same line.
  static uint64_t ReserveFor(uint64_t capacity) {
    return capacity / 20 < kMaxReserveBytes ? capacity / 20 : kMaxReserveBytes;
  }

  // What a write does to the disk's free space. kGrows: refused below the reserve. kFrees: it
  // removes data, or records what already holds its space (a chunk's commit, whose content is
  // on disk): it may use the reserve. A batch of deletions only is always kFrees.
  enum class SpaceUse { kGrows, kFrees };

  // "rocksdb" or "etcd" (logs, metrics).
  virtual const char* engine() const = 0;

  // Lets go of the database without closing it: closing writes (and on a full disk Debian's
  // RocksDB aborts the process there). Every acknowledged write is already synced; the next
  // Open recovers from the log as after a crash. For a daemon that stops because a write failed.
  virtual void Abandon() {}

  // A record's bytes, or a null value to delete its key.
  using RawWrite = std::pair<std::string, std::optional<std::string>>;

  Status Put(const std::string& key, const google::protobuf::Message& value,
             SpaceUse use = SpaceUse::kGrows);
  // All of them or none; a null value deletes its key.
  Status PutBatch(const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs,
                  SpaceUse use = SpaceUse::kGrows);
  Status Delete(const std::string& key);
  // PutBatch of bytes (txn_kv.h's engine over this store).
  Status WriteRaw(const std::vector<RawWrite>& kvs) { return WriteRaw(kvs, SpaceUse::kGrows); }
  virtual Status WriteRaw(const std::vector<RawWrite>& kvs, SpaceUse use) = 0;

  // Group commit, for a daemon that serialises its own read-modify-write operations under a lock
  // and would otherwise hold that lock through one disk sync per operation. PutBatchLogged applies
  // the batch and writes it to the log without waiting for the disk, and returns its sequence
  // number: readers see it at once, and it survives a kill of the process (the log is in the
  // kernel's page cache), not a crash of the machine. AwaitDurable(seq), called after letting go
  // of the lock, returns once everything up to `seq` is on disk; concurrent callers share one
  // sync. A failed sync is sticky: what readers saw may never reach the disk, so every later
  // AwaitDurable fails too, and the daemon must restart (recovering from the log). On etcd a
  // batch is durable when it returns, and AwaitDurable has nothing to wait for.
  Result<uint64_t> PutBatchLogged(
      const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs);
  virtual Result<uint64_t> WriteRawLogged(const std::vector<RawWrite>& kvs) = 0;
  virtual Status AwaitDurable(uint64_t seq) = 0;
  // Syncs everything logged so far (AwaitDurable of the newest batch), and how many key writes
  // were logged and are not on disk yet (0 on etcd).
  virtual Status SyncAll() { return Status::Ok(); }
  virtual uint64_t UnsyncedWrites() const { return 0; }
  // Batches written by PutBatchLogged, and the log syncs AwaitDurable made for them (metrics).
  uint64_t LoggedBatches() const { return logged_batches_; }
  uint64_t GroupSyncs() const { return group_syncs_; }

  // kNotFound when absent; kDataLoss when the record does not parse as `out`'s type.
  Status Get(const std::string& key, google::protobuf::Message* out) const;
  // A record's bytes; nullopt when absent.
  virtual Result<std::optional<std::string>> GetRaw(const std::string& key) const = 0;

  // Up to `limit` (key, serialized record) pairs whose key starts with `prefix` and sorts after
  // `after` ("" from the first), in key order.
  virtual Result<std::vector<std::pair<std::string, std::string>>> ScanKeys(
      const std::string& prefix, const std::string& after, std::size_t limit) const = 0;

  // A consistent view of the store as it is now, for long reads beside live writes (fsck): reads
  // through it see none of the writes made after it was taken, and hold back no writer. RocksDB
  // keeps a snapshot for it until it is destroyed; the etcd engine has none (null: read the
  // store, one call at a time). The view must not outlive its store.
  class View {
   public:
    virtual ~View() = default;
    virtual Result<std::optional<std::string>> GetRaw(const std::string& key) const = 0;
    virtual Result<std::vector<std::pair<std::string, std::string>>> ScanKeys(
        const std::string& prefix, const std::string& after, std::size_t limit) const = 0;
  };
  virtual std::unique_ptr<View> Snapshot() const { return nullptr; }

  // Every record whose key starts with `prefix`, in key order.
  template <typename T>
  Result<std::vector<T>> Scan(const std::string& prefix) const {
    std::vector<T> out;
    std::string after;
    for (;;) {
      FF_ASSIGN_OR_RETURN(auto rows, ScanKeys(prefix, after, kScanPage));
      for (const auto& [key, bytes] : rows) {
        T value;
        if (!value.ParseFromString(bytes)) return DataLoss("record " + key + " is corrupt");
        out.push_back(std::move(value));
      }
      if (rows.size() < kScanPage) return out;
      after = rows.back().first;
    }
  }

 protected:
  static constexpr std::size_t kScanPage = 1000;
  ProtoDb() = default;
  std::atomic<uint64_t> group_syncs_{0};
  std::atomic<uint64_t> logged_batches_{0};
};

}  // namespace ff

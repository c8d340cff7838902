// A RocksDB database of protobuf records under string keys, for daemons' durable state
// (hai-server's jobs, fs3-mgmtd's chains). Every write is synced before it returns, so what a
// daemon acknowledged survives a crash; several records can go in one atomic, synced batch.
// Writes are refused (kResourceExhausted, "No space left on device") while the file system has
// less free than a reserve (64 MiB, or a twentieth of a smaller file system): RocksDB needs room
// to flush and compact, and Debian's build aborts the process on a write that hits a full disk.
#pragma once

#include <google/protobuf/message.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace ff {

class ProtoDb {
 public:
  // Opens (creating it, and its parent folders, if missing) the database in directory `path`.
  // kUnavailable names the path and RocksDB's reason (e.g. another process holds its lock).
  static Result<std::unique_ptr<ProtoDb>> Open(const std::string& path);
  ~ProtoDb();

  static constexpr uint64_t kMaxReserveBytes = 64ull << 20;

  // Lets go of the database without closing it: closing writes (and on a full disk Debian's
  // RocksDB aborts the process there). Every acknowledged write is already synced; the next
  // Open recovers from the log as after a crash. For a daemon that stops because a write failed.
  void Abandon();

  Status Put(const std::string& key, const google::protobuf::Message& value);
  // All of them or none; a null value deletes its key.
  Status PutBatch(const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs);
  Status Delete(const std::string& key);

  // Group commit, for a daemon that serialises its own read-modify-write operations under a lock
  // and would otherwise hold that lock through one disk sync per operation. PutBatchLogged applies
  // the batch and writes it to the log without waiting for the disk, and returns its sequence
  // number: readers see it at once, and it survives a kill of the process (the log is in the
  // kernel's page cache), not a crash of the machine. AwaitDurable(seq), called after letting go
  // of the lock, returns once everything up to `seq` is on disk; concurrent callers share one
  // sync. A failed sync is sticky: what readers saw may never reach the disk, so every later
  // AwaitDurable fails too, and the daemon must restart (recovering from the log).
  Result<uint64_t> PutBatchLogged(
      const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs);
  Status AwaitDurable(uint64_t seq);
  // Batches written by PutBatchLogged, and the log syncs AwaitDurable made for them (metrics).
  uint64_t LoggedBatches() const { return logged_batches_; }
  uint64_t GroupSyncs() const { return group_syncs_; }
  // kNotFound when absent; kDataLoss when the record does not parse as `out`'s type.
  Status Get(const std::string& key, google::protobuf::Message* out) const;

  // Up to `limit` (key, serialized record) pairs whose key starts with `prefix` and sorts after
  // `after` ("" from the first), in key order.
  Result<std::vector<std::pair<std::string, std::string>>> ScanKeys(const std::string& prefix,
                                                                    const std::string& after,
                                                                    std::size_t limit) const;

  // Every record whose key starts with `prefix`, in key order.
  template <typename T>
  Result<std::vector<T>> Scan(const std::string& prefix) const {
    std::vector<T> out;
    Status st = ScanRaw(prefix, [&](const std::string& key, const std::string& bytes) {
      T value;
      if (!value.ParseFromString(bytes)) return DataLoss("record " + key + " is corrupt");
      out.push_back(std::move(value));
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return out;
  }

 private:
  explicit ProtoDb(rocksdb::DB* db, std::string path);
  Status CheckSpace() const;  // kResourceExhausted below the reserve
  Status ScanRaw(const std::string& prefix,
                 const std::function<Status(const std::string&, const std::string&)>& fn) const;

  std::unique_ptr<rocksdb::DB> db_;
  std::string path_;

  std::mutex sync_mu_;  // group commit
  std::condition_variable sync_cv_;
  uint64_t synced_ = 0;  // every sequence number up to this one is on disk
  bool syncing_ = false;
  Status sync_error_;
  std::atomic<uint64_t> group_syncs_{0};
  std::atomic<uint64_t> logged_batches_{0};
};

}  // namespace ff

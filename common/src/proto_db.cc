#include "common/proto_db.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "common/thread_annotations.h"

namespace ff {
namespace {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  return IoError(what + ": " + s.ToString());
}

void FillBatch(const std::vector<ProtoDb::RawWrite>& kvs, rocksdb::WriteBatch* batch) {
  for (const auto& [key, value] : kvs) {
    if (value) {
      batch->Put(key, *value);
    } else {
      batch->Delete(key);
    }
  }
}

Result<std::vector<ProtoDb::RawWrite>> Serialise(
    const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs) {
  std::vector<ProtoDb::RawWrite> out;
  out.reserve(kvs.size());
  for (const auto& [key, value] : kvs) {
    if (value == nullptr) {
      out.emplace_back(key, std::nullopt);
      continue;
    }
    std::string bytes;
    if (!value->SerializeToString(&bytes)) return Internal("cannot serialise " + key);
    out.emplace_back(key, std::move(bytes));
  }
  return out;
}

class RocksProtoDb : public ProtoDb {
 public:
  RocksProtoDb(rocksdb::DB* db, std::string path)
      : db_(db), path_(std::move(path)), synced_(db->GetLatestSequenceNumber()) {}
  const char* engine() const override { return "rocksdb"; }
  void Abandon() override;
  using ProtoDb::WriteRaw;
  Status WriteRaw(const std::vector<RawWrite>& kvs, SpaceUse use) override;
  Result<uint64_t> WriteRawLogged(const std::vector<RawWrite>& kvs) override;
  Status AwaitDurable(uint64_t seq) override;
  Status SyncAll() override { return AwaitDurable(db_->GetLatestSequenceNumber()); }
  uint64_t UnsyncedWrites() const override;
  Result<std::optional<std::string>> GetRaw(const std::string& key) const override;
  Result<std::vector<std::pair<std::string, std::string>>> ScanKeys(
      const std::string& prefix, const std::string& after, std::size_t limit) const override;
  std::unique_ptr<View> Snapshot() const override;

 private:
  // kResourceExhausted below the reserve, unless the batch frees space (see the header).
  Status CheckSpace(const std::vector<RawWrite>& kvs, SpaceUse use) const;

  std::unique_ptr<rocksdb::DB> db_;
  std::string path_;

  mutable Mutex sync_mu_;  // group commit
  CondVar sync_cv_;
  uint64_t synced_ FF_GUARDED_BY(sync_mu_) = 0;  // every sequence number up to this one is on disk
  bool syncing_ FF_GUARDED_BY(sync_mu_) = false;
  Status sync_error_ FF_GUARDED_BY(sync_mu_);
};

// Scales what RocksDB preallocates to the file system it lives on: the memtable (64 MiB by default;
// RocksDB preallocates the write-ahead log at 1.1 times it) and the manifest (4 MiB). On a disk of
// 200 MiB the defaults took 76 MiB before the first record; here they take a thirty-second and a
// two-hundred-fifty-sixth of the disk at most.
void SizeForDisk(const std::string& dir, rocksdb::Options* options) {
  struct statvfs fs {};
  if (statvfs(dir.empty() ? "." : dir.c_str(), &fs) != 0) return;  // the defaults
  const uint64_t capacity = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  options->write_buffer_size =
      std::clamp<uint64_t>(capacity / 32, uint64_t{1} << 20, options->write_buffer_size);
  options->manifest_preallocation_size = std::clamp<uint64_t>(capacity / 256, uint64_t{64} << 10,
                                                              options->manifest_preallocation_size);
}

}  // namespace

Status ProtoDb::Put(const std::string& key, const google::protobuf::Message& value, SpaceUse use) {
  return PutBatch({{key, &value}}, use);
}

Status ProtoDb::PutBatch(
    const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs,
    SpaceUse use) {
  if (kvs.empty()) return Status::Ok();
  FF_ASSIGN_OR_RETURN(auto raw, Serialise(kvs));
  return WriteRaw(raw, use);
}

Status ProtoDb::Delete(const std::string& key) {
  return WriteRaw({{key, std::nullopt}});
}

Result<uint64_t> ProtoDb::PutBatchLogged(
    const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs) {
  FF_ASSIGN_OR_RETURN(auto raw, Serialise(kvs));
  return WriteRawLogged(raw);
}

Status ProtoDb::Get(const std::string& key, google::protobuf::Message* out) const {
  FF_ASSIGN_OR_RETURN(std::optional<std::string> bytes, GetRaw(key));
  if (!bytes) return NotFound("no record " + key);
  if (!out->ParseFromString(*bytes)) return DataLoss("record " + key + " is corrupt");
  return Status::Ok();
}

Status RocksProtoDb::CheckSpace(const std::vector<RawWrite>& kvs, SpaceUse use) const {
  if (use == SpaceUse::kFrees) return Status::Ok();
  if (std::all_of(kvs.begin(), kvs.end(), [](const RawWrite& w) { return !w.second; })) {
    return Status::Ok();  // deletions only
  }
  struct statvfs fs {};
  if (statvfs(path_.c_str(), &fs) != 0) return Status::FromErrno(errno, "statvfs " + path_);
  const uint64_t size = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  const uint64_t free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const uint64_t reserve = ReserveFor(size);
  if (free > reserve) return Status::Ok();
  return ResourceExhausted("No space left on device for " + path_ + ": " +
                           std::to_string(free >> 20) + " MiB free, below the reserve of " +
                           std::to_string(reserve >> 20) + " MiB kept for the database's own work");
}

Result<std::unique_ptr<ProtoDb>> ProtoDb::Open(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return IoError("cannot create the folder of " + path + ": " + ec.message());
  rocksdb::Options options;
  options.create_if_missing = true;
  SizeForDisk(std::filesystem::path(path).parent_path().string(), &options);
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) return Unavailable("cannot open the database at " + path + ": " + s.ToString());
  return std::unique_ptr<ProtoDb>(new RocksProtoDb(db, path));
}

void RocksProtoDb::Abandon() {
  rocksdb::DB* leaked = db_.release();
  (void)leaked;  // on purpose: see the header
}

Status RocksProtoDb::WriteRaw(const std::vector<RawWrite>& kvs, SpaceUse use) {
  if (kvs.empty()) return Status::Ok();
  FF_RETURN_IF_ERROR(CheckSpace(kvs, use));
  rocksdb::WriteBatch batch;
  FillBatch(kvs, &batch);
  rocksdb::WriteOptions options;
  options.sync = true;
  return FromRocks(db_->Write(options, &batch), "write to " + path_);
}

Result<uint64_t> RocksProtoDb::WriteRawLogged(const std::vector<RawWrite>& kvs) {
  if (kvs.empty()) return db_->GetLatestSequenceNumber();
  {
    MutexLock lock(&sync_mu_);
    FF_RETURN_IF_ERROR(sync_error_);  // nothing more is acknowledged after a failed sync
  }
  FF_RETURN_IF_ERROR(CheckSpace(kvs, SpaceUse::kGrows));
  rocksdb::WriteBatch batch;
  FillBatch(kvs, &batch);
  rocksdb::WriteOptions options;  // logged (the log is written to the kernel), not synced
  FF_RETURN_IF_ERROR(FromRocks(db_->Write(options, &batch), "write to " + path_));
  ++logged_batches_;
  // The caller's lock keeps other writers out, so the newest sequence number is this batch's
  // last (or a later one, which only makes the wait cover more).
  return db_->GetLatestSequenceNumber();
}

Status RocksProtoDb::AwaitDurable(uint64_t seq) {
  UniqueLock lock(&sync_mu_);
  while (sync_error_.ok() && synced_ < seq) {
    if (syncing_) {  // a sync is under way: it may cover us; if not, the next one will
      sync_cv_.wait(lock, [&] {
        sync_mu_.AssertHeld();
        return !syncing_;
      });
      continue;
    }
    syncing_ = true;
    // Everything logged so far goes in this sync, whoever wrote it.
    const uint64_t upto = db_->GetLatestSequenceNumber();
    lock.unlock();
    const rocksdb::Status s = db_->SyncWAL();
    lock.lock();
    syncing_ = false;
    ++group_syncs_;
    if (s.ok()) {
      synced_ = std::max(synced_, upto);
    } else {
      sync_error_ = FromRocks(s, "sync the log of " + path_);
    }
    sync_cv_.notify_all();
  }
  return sync_error_;
}

uint64_t RocksProtoDb::UnsyncedWrites() const {
  const uint64_t latest = db_->GetLatestSequenceNumber();
  MutexLock lock(&sync_mu_);
  return latest > synced_ ? latest - synced_ : 0;
}

namespace {

Result<std::optional<std::string>> RocksGet(rocksdb::DB& db, const rocksdb::ReadOptions& options,
                                            const std::string& key, const std::string& path) {
  std::string bytes;
  rocksdb::Status s = db.Get(options, key, &bytes);
  if (s.IsNotFound()) return std::optional<std::string>();
  FF_RETURN_IF_ERROR(FromRocks(s, "read " + key + " in " + path));
  return std::optional<std::string>(std::move(bytes));
}

// The least key past every key that starts with `prefix` ("" when there is none: all 0xff bytes).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff)
    prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

Result<std::vector<std::pair<std::string, std::string>>> RocksScan(
    rocksdb::DB& db, rocksdb::ReadOptions options, const std::string& prefix,
    const std::string& after, std::size_t limit, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  // The iterator stops at the prefix's end: without the bound it would step over every deleted
  // key past the prefix until it found a live one (fs3-meta's "any session of this inode?" asked
  // after thousands of closed sessions of later inodes walked all their deletions).
  const std::string end = PrefixEnd(prefix);
  const rocksdb::Slice bound(end);
  if (!end.empty()) options.iterate_upper_bound = &bound;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(options));
  it->Seek(after.empty() ? prefix : after);
  if (!after.empty() && it->Valid() && it->key() == rocksdb::Slice(after)) it->Next();
  for (; it->Valid() && it->key().starts_with(prefix) && out.size() < limit; it->Next()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  FF_RETURN_IF_ERROR(FromRocks(it->status(), "scan " + prefix + " in " + path));
  return out;
}

// Reads at one RocksDB snapshot, released with the view; they leave the block cache as it is (a
// long scan would push out what live operations use).
class RocksView : public ProtoDb::View {
 public:
  RocksView(rocksdb::DB* db, std::string path)
      : db_(db), path_(std::move(path)), snapshot_(db->GetSnapshot()) {
    options_.snapshot = snapshot_;
    options_.fill_cache = false;
  }
  ~RocksView() override { db_->ReleaseSnapshot(snapshot_); }
  Result<std::optional<std::string>> GetRaw(const std::string& key) const override {
    return RocksGet(*db_, options_, key, path_);
  }
  Result<std::vector<std::pair<std::string, std::string>>> ScanKeys(
      const std::string& prefix, const std::string& after, std::size_t limit) const override {
    return RocksScan(*db_, options_, prefix, after, limit, path_);
  }

 private:
  rocksdb::DB* db_;
  std::string path_;
  const rocksdb::Snapshot* snapshot_;
  rocksdb::ReadOptions options_;
};

}  // namespace

Result<std::optional<std::string>> RocksProtoDb::GetRaw(const std::string& key) const {
  return RocksGet(*db_, rocksdb::ReadOptions(), key, path_);
}

Result<std::vector<std::pair<std::string, std::string>>> RocksProtoDb::ScanKeys(
    const std::string& prefix, const std::string& after, std::size_t limit) const {
  return RocksScan(*db_, rocksdb::ReadOptions(), prefix, after, limit, path_);
}

std::unique_ptr<ProtoDb::View> RocksProtoDb::Snapshot() const {
  return std::make_unique<RocksView>(db_.get(), path_);
}

}  // namespace ff

#include "common/proto_db.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace ff {
namespace {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  return IoError(what + ": " + s.ToString());
}

Status FillBatch(const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs,
                 rocksdb::WriteBatch* batch) {
  for (const auto& [key, value] : kvs) {
    if (value == nullptr) {
      batch->Delete(key);
      continue;
    }
    std::string bytes;
    if (!value->SerializeToString(&bytes)) return Internal("cannot serialise " + key);
    batch->Put(key, bytes);
  }
  return Status::Ok();
}

}  // namespace

Status ProtoDb::CheckSpace() const {
  struct statvfs fs {};
  if (statvfs(path_.c_str(), &fs) != 0) return Status::FromErrno(errno, "statvfs " + path_);
  const uint64_t size = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
  const uint64_t free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  const uint64_t reserve = std::min<uint64_t>(kMaxReserveBytes, size / 20);
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
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) return Unavailable("cannot open the database at " + path + ": " + s.ToString());
  return std::unique_ptr<ProtoDb>(new ProtoDb(db, path));
}

ProtoDb::ProtoDb(rocksdb::DB* db, std::string path) : db_(db), path_(std::move(path)) {}

ProtoDb::~ProtoDb() = default;

void ProtoDb::Abandon() {
  rocksdb::DB* leaked = db_.release();
  (void)leaked;  // on purpose: see the header
}

Status ProtoDb::Put(const std::string& key, const google::protobuf::Message& value) {
  return PutBatch({{key, &value}});
}

Status ProtoDb::PutBatch(
    const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs) {
  if (kvs.empty()) return Status::Ok();
  FF_RETURN_IF_ERROR(CheckSpace());
  rocksdb::WriteBatch batch;
  FF_RETURN_IF_ERROR(FillBatch(kvs, &batch));
  rocksdb::WriteOptions options;
  options.sync = true;
  return FromRocks(db_->Write(options, &batch), "write to " + path_);
}

Result<uint64_t> ProtoDb::PutBatchLogged(
    const std::vector<std::pair<std::string, const google::protobuf::Message*>>& kvs) {
  if (kvs.empty()) return db_->GetLatestSequenceNumber();
  {
    std::lock_guard lock(sync_mu_);
    FF_RETURN_IF_ERROR(sync_error_);  // nothing more is acknowledged after a failed sync
  }
  FF_RETURN_IF_ERROR(CheckSpace());
  rocksdb::WriteBatch batch;
  FF_RETURN_IF_ERROR(FillBatch(kvs, &batch));
  rocksdb::WriteOptions options;  // logged (the log is written to the kernel), not synced
  FF_RETURN_IF_ERROR(FromRocks(db_->Write(options, &batch), "write to " + path_));
  ++logged_batches_;
  // The caller's lock keeps other writers out, so the newest sequence number is this batch's
  // last (or a later one, which only makes the wait cover more).
  return db_->GetLatestSequenceNumber();
}

Status ProtoDb::AwaitDurable(uint64_t seq) {
  std::unique_lock lock(sync_mu_);
  while (sync_error_.ok() && synced_ < seq) {
    if (syncing_) {  // a sync is under way: it may cover us; if not, the next one will
      sync_cv_.wait(lock);
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

Status ProtoDb::Delete(const std::string& key) {
  FF_RETURN_IF_ERROR(CheckSpace());
  rocksdb::WriteOptions options;
  options.sync = true;
  return FromRocks(db_->Delete(options, key), "delete " + key + " in " + path_);
}

Status ProtoDb::Get(const std::string& key, google::protobuf::Message* out) const {
  std::string bytes;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &bytes);
  if (s.IsNotFound()) return NotFound("no record " + key);
  FF_RETURN_IF_ERROR(FromRocks(s, "read " + key + " in " + path_));
  if (!out->ParseFromString(bytes)) return DataLoss("record " + key + " is corrupt");
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> ProtoDb::ScanKeys(
    const std::string& prefix, const std::string& after, std::size_t limit) const {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(after.empty() ? prefix : after);
  if (!after.empty() && it->Valid() && it->key() == rocksdb::Slice(after)) it->Next();
  for (; it->Valid() && it->key().starts_with(prefix) && out.size() < limit; it->Next()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  FF_RETURN_IF_ERROR(FromRocks(it->status(), "scan " + prefix + " in " + path_));
  return out;
}

Status ProtoDb::ScanRaw(
    const std::string& prefix,
    const std::function<Status(const std::string&, const std::string&)>& fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    FF_RETURN_IF_ERROR(fn(it->key().ToString(), it->value().ToString()));
  }
  return FromRocks(it->status(), "scan " + prefix + " in " + path_);
}

}  // namespace ff

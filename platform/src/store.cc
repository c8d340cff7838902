#include "store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <cstdio>

namespace ff::platform {
namespace {

std::string JobKey(int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "job/%020lld", static_cast<long long>(id));
  return buf;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  return IoError("hai-server store: " + what + ": " + s.ToString());
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) {
    return Unavailable("cannot open the job database at " + path + ": " + s.ToString());
  }
  return std::unique_ptr<Store>(new Store(db));
}

Store::Store(rocksdb::DB* db) : db_(db) {}

Store::~Store() = default;

Status Store::Put(const std::string& key, const google::protobuf::Message& value) {
  std::string bytes;
  if (!value.SerializeToString(&bytes)) return Internal("cannot serialise " + key);
  rocksdb::WriteOptions options;
  options.sync = true;
  return FromRocks(db_->Put(options, key, bytes), "write " + key);
}

Status Store::PutJob(const hai::Job& job) {
  return Put(JobKey(job.id()), job);
}
Status Store::PutJobs(const std::vector<const hai::Job*>& jobs) {
  if (jobs.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const hai::Job* job : jobs) {
    std::string bytes;
    if (!job->SerializeToString(&bytes)) return Internal("cannot serialise job");
    batch.Put(JobKey(job->id()), bytes);
  }
  rocksdb::WriteOptions options;
  options.sync = true;
  return FromRocks(db_->Write(options, &batch), "write " + std::to_string(jobs.size()) + " jobs");
}

Status Store::PutUser(const hai::User& user) {
  return Put("user/" + user.name(), user);
}
Status Store::PutNode(const hai::Node& node) {
  return Put("node/" + node.name(), node);
}

template <typename T>
Result<std::vector<T>> Store::Load(const std::string& prefix) {
  std::vector<T> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    T value;
    if (!value.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return DataLoss("hai-server store: record " + it->key().ToString() + " is corrupt");
    }
    out.push_back(std::move(value));
  }
  FF_RETURN_IF_ERROR(FromRocks(it->status(), "scan " + prefix));
  return out;
}

Result<std::vector<hai::Job>> Store::LoadJobs() {
  return Load<hai::Job>("job/");
}
Result<std::vector<hai::User>> Store::LoadUsers() {
  return Load<hai::User>("user/");
}
Result<std::vector<hai::Node>> Store::LoadNodes() {
  return Load<hai::Node>("node/");
}

}  // namespace ff::platform

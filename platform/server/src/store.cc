#include "store.h"

#include <cstdio>

namespace ff::platform {
namespace {

std::string JobKey(int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "job/%020lld", static_cast<long long>(id));
  return buf;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  FF_ASSIGN_OR_RETURN(auto db, ProtoDb::Open(path));
  return std::unique_ptr<Store>(new Store(std::move(db)));
}

Result<std::unique_ptr<Store>> Store::OpenEtcd(etcd::Client* client, const std::string& prefix,
                                               ProtoDb::Fence fence) {
  FF_ASSIGN_OR_RETURN(auto db, ProtoDb::OpenEtcd(client, prefix, std::move(fence)));
  return std::unique_ptr<Store>(new Store(std::move(db)));
}

Status Store::PutJob(const hai::Job& job) {
  return db_->Put(JobKey(job.id()), job);
}

Status Store::PutJobs(const std::vector<const hai::Job*>& jobs) {
  std::vector<std::pair<std::string, const google::protobuf::Message*>> kvs;
  for (const hai::Job* job : jobs)
    kvs.emplace_back(JobKey(job->id()), job);
  return db_->PutBatch(kvs);
}

Status Store::PutUser(const hai::User& user) {
  return db_->Put("user/" + user.name(), user);
}

Status Store::PutNode(const hai::Node& node) {
  return db_->Put("node/" + node.name(), node);
}

}  // namespace ff::platform

// hai-server's durable records (on ProtoDb: every write synced before it returns): jobs with
// their runs, users, node drain state.
#pragma once

#include <memory>
#include <vector>

#include "common/etcd.h"
#include "common/proto_db.h"
#include "platform/proto/hai.pb.h"

namespace ff::platform {

class Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  // In etcd under `prefix`, every write conditional on `fence` (the leader's).
  static Result<std::unique_ptr<Store>> OpenEtcd(etcd::Client* client, const std::string& prefix,
                                                 ProtoDb::Fence fence);

  Status PutJob(const hai::Job& job);
  // Several jobs in one synced write (a scheduling round's changes).
  Status PutJobs(const std::vector<const hai::Job*>& jobs);
  Status PutUser(const hai::User& user);
  Status PutNode(const hai::Node& node);

  Result<std::vector<hai::Job>> LoadJobs() { return db_->Scan<hai::Job>("job/"); }
  Result<std::vector<hai::User>> LoadUsers() { return db_->Scan<hai::User>("user/"); }
  Result<std::vector<hai::Node>> LoadNodes() { return db_->Scan<hai::Node>("node/"); }
  // After a failed write: leaves the database as it is on disk (see ProtoDb::Abandon).
  void Abandon() { db_->Abandon(); }

 private:
  explicit Store(std::unique_ptr<ProtoDb> db) : db_(std::move(db)) {}
  std::unique_ptr<ProtoDb> db_;
};

}  // namespace ff::platform

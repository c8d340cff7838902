// hai-server's durable records in RocksDB: jobs (with their runs), users, node drain state.
// Every write is synced before it returns, so what the server acknowledged survives a crash.
#pragma once

#include <memory>
#include <vector>

#include "common/result.h"
#include "platform/proto/hai.pb.h"

namespace rocksdb {
class DB;
}

namespace ff::platform {

class Store {
 public:
  static Result<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  Status PutJob(const hai::Job& job);
  // Several jobs in one synced write (a scheduling round's changes).
  Status PutJobs(const std::vector<const hai::Job*>& jobs);
  Status PutUser(const hai::User& user);
  Status PutNode(const hai::Node& node);

  Result<std::vector<hai::Job>> LoadJobs();
  Result<std::vector<hai::User>> LoadUsers();
  Result<std::vector<hai::Node>> LoadNodes();

 private:
  explicit Store(rocksdb::DB* db);
  Status Put(const std::string& key, const google::protobuf::Message& value);
  template <typename T>
  Result<std::vector<T>> Load(const std::string& prefix);

  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace ff::platform

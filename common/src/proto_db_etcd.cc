// ProtoDb's etcd engine (see proto_db.h).
#include <algorithm>
#include <atomic>
#include <map>

#include "common/etcd.h"
#include "common/proto_db.h"

namespace ff {
namespace {

class EtcdProtoDb : public ProtoDb {
 public:
  EtcdProtoDb(etcd::Client* client, std::string prefix, Fence fence)
      : client_(client), prefix_(std::move(prefix)), fence_(std::move(fence)) {}

  const char* engine() const override { return "etcd"; }

  using ProtoDb::WriteRaw;
  Status WriteRaw(const std::vector<RawWrite>& kvs, SpaceUse) override {
    if (kvs.empty()) return Status::Ok();
    etcdserverpb::TxnRequest txn;
    if (fence_) *txn.add_compare() = fence_();
    // etcd refuses a transaction that names a key twice: the last write of a key wins, as in a
    // RocksDB batch.
    std::map<std::string, const std::optional<std::string>*> last;
    for (const auto& [key, value] : kvs)
      last[key] = &value;
    for (const auto& [key, value] : last) {
      if (*value) {
        etcd::AddPut(&txn, prefix_ + key, **value);
      } else {
        etcd::AddDelete(&txn, prefix_ + key);
      }
    }
    FF_ASSIGN_OR_RETURN(etcdserverpb::TxnResponse r, client_->Txn(txn));
    if (!r.succeeded()) {
      return FailedPrecondition("write to etcd under " + prefix_ +
                                " refused: this replica is no longer the leader");
    }
    return Status::Ok();
  }

  Result<uint64_t> WriteRawLogged(const std::vector<RawWrite>& kvs) override {
    FF_RETURN_IF_ERROR(WriteRaw(kvs));  // durable (on a majority's disks) once it returns
    ++logged_batches_;
    return ++seq_;
  }

  Status AwaitDurable(uint64_t) override { return Status::Ok(); }

  Result<std::optional<std::string>> GetRaw(const std::string& key) const override {
    FF_ASSIGN_OR_RETURN(std::optional<etcd::Kv> kv, client_->Get(prefix_ + key));
    if (!kv) return std::optional<std::string>();
    return std::optional<std::string>(std::move(kv->value));
  }

  Result<std::vector<std::pair<std::string, std::string>>> ScanKeys(
      const std::string& prefix, const std::string& after, std::size_t limit) const override {
    std::vector<std::pair<std::string, std::string>> out;
    if (limit == 0) return out;
    const std::string end = etcd::PrefixEnd(prefix_ + prefix);
    std::string from = after.empty() ? prefix_ + prefix : prefix_ + after + std::string(1, '\0');
    if (from < prefix_ + prefix) from = prefix_ + prefix;
    // Pages of at most kScanPage keys, all read at the revision of the first.
    int64_t revision = 0;
    while (out.size() < limit) {
      const int64_t want = static_cast<int64_t>(std::min(limit - out.size(), kScanPage));
      FF_ASSIGN_OR_RETURN(etcd::RangeResult r, client_->Range(from, end, want, revision));
      revision = r.revision;
      for (etcd::Kv& kv : r.kvs)
        out.emplace_back(kv.key.substr(prefix_.size()), std::move(kv.value));
      if (!r.more || r.kvs.empty()) break;
      from = r.kvs.back().key + std::string(1, '\0');
    }
    return out;
  }

 private:
  etcd::Client* const client_;
  const std::string prefix_;
  const Fence fence_;
  std::atomic<uint64_t> seq_{0};
};

}  // namespace

Result<std::unique_ptr<ProtoDb>> ProtoDb::OpenEtcd(etcd::Client* client, std::string prefix,
                                                   Fence fence) {
  if (client == nullptr) return InvalidArgument("the etcd engine needs a client");
  if (prefix.empty()) return InvalidArgument("the etcd engine needs a key prefix");
  return std::unique_ptr<ProtoDb>(new EtcdProtoDb(client, std::move(prefix), std::move(fence)));
}

}  // namespace ff

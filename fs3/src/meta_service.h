// fs3-meta: the namespace service, the MetaStore behind gRPC. Stateless above RocksDB (so it can
// be restarted at any point). Mutating calls carry a request id: a retry of a call that already
// succeeded gets the first answer (create and mkdir also across a restart, through the inode's
// record; the others while this process lives).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "common/config.h"
#include "fs3/meta_store.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "monitoring/metrics.h"

namespace ff::fs3 {

struct MetaOptions {
  static constexpr const char* kSection = "meta";  // its section in the config file
  std::string data_dir;
  uint64_t chunk_size = 4 << 20;  // the root directory's layout, inherited below it
  uint32_t stripe = 16;
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
  grpc::Status Unlink(grpc::ServerContext*, const fs3rpc::NameRequest*, fs3rpc::Empty*) override;
  grpc::Status Rmdir(grpc::ServerContext*, const fs3rpc::NameRequest*, fs3rpc::Empty*) override;
  grpc::Status Rename(grpc::ServerContext*, const fs3rpc::RenameRequest*, fs3rpc::Empty*) override;
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
  grpc::Status Fsck(grpc::ServerContext*, const fs3rpc::FsckRequest*, fs3rpc::FsckReply*) override;

 private:
  MetaService(std::unique_ptr<MetaStore> store, Metrics* metrics)
      : store_(std::move(store)), metrics_(metrics) {}
  // Runs a mutating call once per request id (0: no deduplication).
  Status Once(uint64_t request_id, const std::function<Status()>& body);
  grpc::Status Serve(const char* op, const std::function<Status()>& body);

  std::unique_ptr<MetaStore> store_;
  Metrics* metrics_;
  std::mutex done_mu_;
  std::map<uint64_t, Status> done_;  // recent request ids and their outcome
  std::deque<uint64_t> done_order_;
};

}  // namespace ff::fs3

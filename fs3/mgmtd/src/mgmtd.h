// fs3-mgmtd: the cluster manager. Storage services heartbeat to hold a lease; the manager keeps
// the chain table and every target's public state (fs3/chain.h), publishes a versioned routing
// table, and persists what it decides (ProtoDb): in RocksDB (one fs3-mgmtd), or in etcd, where
// two or more replicas run and one, elected (common/leader_election.h), leads.
//
// Replicas. Only the leader serves; the others answer kUnavailable naming the leader, and
// clients (common/replicas.h) follow. A replica that becomes leader loads the state from etcd
// and gives storage services the restart grace before judging their targets (they find the new
// leader within a heartbeat or two), so a leader change flaps no chain; routing versions keep
// increasing (each is persisted with what it publishes). Every write is fenced by the leader
// key: a deposed leader's writes fail and change nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/config.h"
#include "common/etcd.h"
#include "common/leader_election.h"
#include "common/proto_db.h"
#include "common/thread_annotations.h"
#include "fs3/chain.h"
#include "fs3/proto/mgmtd.grpc.pb.h"
#include "monitoring/metrics.h"

namespace ff::fs3 {

struct MgmtdOptions {
  static constexpr const char* kSection = "mgmtd";  // its section in the config file
  // "rocksdb" (in data_dir; one fs3-mgmtd) or "etcd" (replicas sharing etcd_prefix).
  std::string engine = "rocksdb";
  std::string data_dir;
  std::vector<std::string> etcd_endpoints;
  std::string etcd_prefix = "/fireflyer/fs3/mgmtd/";
  // The address clients should dial this replica at ("" = its RPC address).
  std::string advertise;
  int64_t election_ttl_s = 3;       // a dead leader is replaced within about this
  int64_t lease_ms = 10000;         // a service not heard from this long is down
  int64_t check_interval_ms = 200;  // how often leases and chains are re-evaluated
  // After a restart, how long services have to report before their targets count as down
  // (0: three leases). Their gRPC clients reconnect with backoff, so give them time.
  int64_t restart_grace_ms = 0;

  void Bind(ConfigSection& s);
};

class Mgmtd final : public fs3rpc::Mgmtd::Service {
 public:
  static Result<std::unique_ptr<Mgmtd>> Create(const MgmtdOptions& options, Metrics* metrics);
  ~Mgmtd() override;
  // `address`: where this replica serves (its name in the election, unless `advertise` is set).
  void Start(const std::string& address = "");
  void Stop();
  // One pass: expire leases, update chains. The loop calls it; tests may too.
  void Check();

  grpc::Status Heartbeat(grpc::ServerContext*, const fs3rpc::HeartbeatRequest*,
                         fs3rpc::HeartbeatResponse*) override;
  grpc::Status GetRouting(grpc::ServerContext*, const fs3rpc::GetRoutingRequest*,
                          fs3rpc::RoutingInfo*) override;
  grpc::Status InitCluster(grpc::ServerContext*, const fs3rpc::InitRequest*,
                           fs3rpc::RoutingInfo*) override;
  grpc::Status SetTargetOffline(grpc::ServerContext*, const fs3rpc::TargetRef*,
                                fs3rpc::RoutingInfo*) override;
  grpc::Status AddTarget(grpc::ServerContext*, const fs3rpc::AddTargetRequest*,
                         fs3rpc::RoutingInfo*) override;

 private:
  struct NodeRuntime {
    fs3rpc::NodeRecord record;
    bool heard = false;  // since this process started
    std::chrono::steady_clock::time_point last_heartbeat;
    int64_t last_heartbeat_ms = 0;
  };

  Mgmtd(const MgmtdOptions& options, std::unique_ptr<etcd::Client> etcd, Metrics* metrics);
  Status Load() FF_REQUIRES(mu_);
  // OK on the leader (and on a lone RocksDB fs3-mgmtd); kUnavailable naming the leader elsewhere.
  Status Leading() const FF_REQUIRES(mu_);
  void OnLeadership(bool leader) FF_EXCLUDES(mu_);
  LocalState LocalOf(TargetId id) const FF_REQUIRES(mu_);
  // Persists the cluster record, the given chains and targets in one batch and bumps the
  // routing version; wakes long polls.
  Status Commit(const std::vector<ChainId>& chains, const std::vector<TargetId>& targets)
      FF_REQUIRES(mu_);
  void Fill(fs3rpc::RoutingInfo* out) const FF_REQUIRES(mu_);
  void UpdateGauges() FF_REQUIRES(mu_);

  const MgmtdOptions options_;
  std::unique_ptr<etcd::Client> etcd_;  // the etcd engine's client (outlives db_ and election_)
  std::unique_ptr<ProtoDb> db_;
  std::unique_ptr<LeaderElection> election_;
  Metrics* metrics_;
  std::string self_;  // this replica's address

  mutable Mutex mu_;
  // Since when this process holds its state (started, or elected): the grace period's start.
  std::chrono::steady_clock::time_point started_ FF_GUARDED_BY(mu_);
  bool loaded_ FF_GUARDED_BY(mu_) = false;  // the state is this leader's (etcd engine)
  CondVar changed_;                         // with mu_: the routing version moved, or stopping
  fs3rpc::ClusterRecord cluster_ FF_GUARDED_BY(mu_);
  std::map<ChainId, Chain> chains_ FF_GUARDED_BY(mu_);
  std::map<TargetId, fs3rpc::TargetRecord> targets_ FF_GUARDED_BY(mu_);
  std::map<TargetId, LocalState> reported_ FF_GUARDED_BY(mu_);  // last reported local state
  std::map<std::string, NodeRuntime> nodes_ FF_GUARDED_BY(mu_);
  bool stopping_ FF_GUARDED_BY(mu_) = false;
  std::thread loop_;
};

}  // namespace ff::fs3

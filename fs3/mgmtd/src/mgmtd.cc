#include "mgmtd.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "common/replicas.h"
#include "common/rpc_server.h"
#include "common/rpc_status.h"

namespace ff::fs3 {
namespace {

constexpr uint64_t kMinChunkSize = 4096;
constexpr uint64_t kMaxChunkSize = uint64_t{64} << 20;
constexpr uint32_t kMaxReplication = 16;

std::string ChainKey(ChainId id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "chain/%010u", id);
  return buf;
}

std::string TargetKey(TargetId id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "target/%020llu", static_cast<unsigned long long>(id));
  return buf;
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

fs3rpc::ChainInfo ToProto(const Chain& c) {
  fs3rpc::ChainInfo out;
  out.set_id(c.id);
  out.set_version(c.version);
  for (const ChainTarget& t : c.targets) {
    fs3rpc::ChainTargetInfo* ct = out.add_targets();
    ct->set_target(t.target);
    ct->set_state(std::string(Name(t.state)));
  }
  return out;
}

Chain FromProto(const fs3rpc::ChainInfo& c) {
  Chain out{c.id(), c.version(), {}};
  for (const fs3rpc::ChainTargetInfo& t : c.targets()) {
    out.targets.push_back(
        {t.target(), ParsePublicState(t.state()).value_or(PublicState::kOffline)});
  }
  return out;
}

}  // namespace

void MgmtdOptions::Bind(ConfigSection& s) {
  const bool reading = s.mode() == ConfigSection::Mode::kRead;
  s.Optional("engine", engine);
  s.Check(engine == "rocksdb" || engine == "etcd", "engine", "must be \"rocksdb\" or \"etcd\"");
  s.Optional("data_dir", data_dir);
  s.Check(engine != "rocksdb" || !data_dir.empty() || !reading, "data_dir",
          "is required with engine = \"rocksdb\"");
  s.Optional("etcd_endpoints", etcd_endpoints);
  s.Check(engine != "etcd" || !etcd_endpoints.empty() || !reading, "etcd_endpoints",
          "is required with engine = \"etcd\"");
  s.Optional("etcd_prefix", etcd_prefix);
  s.Check(!etcd_prefix.empty(), "etcd_prefix", "must not be empty");
  s.Optional("advertise", advertise);
  s.Optional("election_ttl_s", election_ttl_s);
  s.Check(election_ttl_s >= 1 && election_ttl_s <= 60, "election_ttl_s", "must be 1..60");
  s.Optional("lease_ms", lease_ms);
  s.Check(lease_ms >= 100, "lease_ms", "must be at least 100");
  s.Optional("restart_grace_ms", restart_grace_ms);
  s.Check(restart_grace_ms >= 0, "restart_grace_ms", "must not be negative");
  s.Optional("check_interval_ms", check_interval_ms);
  s.Check(check_interval_ms > 0 && check_interval_ms < lease_ms, "check_interval_ms",
          "must be positive and below lease_ms");
}

Result<std::unique_ptr<Mgmtd>> Mgmtd::Create(const MgmtdOptions& options, Metrics* metrics) {
  if (options.engine == "etcd") {
    FF_ASSIGN_OR_RETURN(auto client, etcd::Client::Connect(options.etcd_endpoints));
    std::unique_ptr<Mgmtd> m(new Mgmtd(options, std::move(client), metrics));
    FF_ASSIGN_OR_RETURN(m->db_,
                        ProtoDb::OpenEtcd(m->etcd_.get(), options.etcd_prefix + "state/",
                                          [mp = m.get()] { return mp->election_->Fence(); }));
    spdlog::info("state in etcd under {} ({}); serving once elected", options.etcd_prefix,
                 fmt::join(options.etcd_endpoints, ","));
    return m;  // loads its state when elected
  }
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) return IoError("cannot create data_dir " + options.data_dir + ": " + ec.message());
  std::unique_ptr<Mgmtd> m(new Mgmtd(options, nullptr, metrics));
  FF_ASSIGN_OR_RETURN(m->db_, ProtoDb::Open(options.data_dir + "/db"));
  MutexLock lock(&m->mu_);
  FF_RETURN_IF_ERROR(m->Load());
  return m;
}

Mgmtd::Mgmtd(const MgmtdOptions& options, std::unique_ptr<etcd::Client> etcd, Metrics* metrics)
    : options_(options), etcd_(std::move(etcd)), metrics_(metrics) {
  MutexLock lock(&mu_);
  started_ = std::chrono::steady_clock::now();
}

Mgmtd::~Mgmtd() {
  Stop();
}

Status Mgmtd::Load() {
  cluster_.Clear();
  chains_.clear();
  targets_.clear();
  reported_.clear();
  nodes_.clear();
  Status st = db_->Get("cluster", &cluster_);
  if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
  FF_ASSIGN_OR_RETURN(auto chains, db_->Scan<fs3rpc::ChainInfo>("chain/"));
  for (const auto& c : chains)
    chains_[c.id()] = FromProto(c);
  FF_ASSIGN_OR_RETURN(auto targets, db_->Scan<fs3rpc::TargetRecord>("target/"));
  for (auto& t : targets)
    targets_[t.id()] = t;
  FF_ASSIGN_OR_RETURN(auto nodes, db_->Scan<fs3rpc::NodeRecord>("node/"));
  for (auto& n : nodes)
    nodes_[n.name()].record = n;
  started_ = std::chrono::steady_clock::now();
  loaded_ = true;
  spdlog::info("routing version {}: {} chains, {} targets, {} storage services known",
               cluster_.routing_version(), chains_.size(), targets_.size(), nodes_.size());
  return Status::Ok();
}

Status Mgmtd::Leading() const {
  if (!election_) {
    if (etcd_) return Unavailable("fs3-mgmtd is starting");
    return Status::Ok();
  }
  if (election_->IsLeader() && loaded_) return Status::Ok();
  return NotLeader("fs3-mgmtd", self_, election_->IsLeader() ? "" : election_->Leader());
}

void Mgmtd::OnLeadership(bool leader) {
  if (metrics_) {
    metrics_->Gauge("fs3_mgmtd_leader", "1 while this replica leads (serves), 0 as a follower")
        .Set(leader ? 1 : 0);
    if (leader) {
      metrics_->Counter("fs3_mgmtd_elections_won_total", "Times this replica became leader")
          .Increment();
    }
  }
  MutexLock lock(&mu_);
  if (!leader) {
    loaded_ = false;
    changed_.notify_all();  // long polls answer: not the leader
    return;
  }
  // Everything from etcd, as this replica's predecessor left it (its writes are all there:
  // each returned only once a majority had it).
  for (int attempt = 0; attempt < 5; ++attempt) {
    Status st = Load();
    if (st.ok()) return;
    spdlog::error("fs3-mgmtd elected but cannot load its state: {}", st.message());
  }
}

void Mgmtd::Start(const std::string& address) {
  self_ = options_.advertise.empty() ? address : options_.advertise;
  if (metrics_) {  // a lone fs3-mgmtd always leads; a replica once elected
    metrics_->Gauge("fs3_mgmtd_leader", "1 while this replica leads (serves), 0 as a follower")
        .Set(etcd_ ? 0 : 1);
    metrics_->Counter("fs3_mgmtd_elections_won_total", "Times this replica became leader");
  }
  if (etcd_) {
    election_ = LeaderElection::StartReplica(etcd_.get(), options_.etcd_prefix, self_,
                                             options_.election_ttl_s,
                                             [this](bool leader) { OnLeadership(leader); });
  }
  loop_ = std::thread([this] {
    UniqueLock lock(&mu_);
    while (!stopping_) {
      changed_.wait_for(lock, std::chrono::milliseconds(options_.check_interval_ms));
      if (stopping_) break;
      lock.unlock();
      Check();
      lock.lock();
    }
  });
}

void Mgmtd::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (election_) election_->Resign();  // a successor is elected at once
}

LocalState Mgmtd::LocalOf(TargetId id) const {
  auto t = targets_.find(id);
  if (t == targets_.end() || t->second.admin_offline()) return LocalState::kOffline;
  auto n = nodes_.find(t->second.node());
  const auto now = std::chrono::steady_clock::now();
  const auto lease = std::chrono::milliseconds(options_.lease_ms);
  if (n == nodes_.end() || !n->second.heard || now - n->second.last_heartbeat >= lease) {
    return LocalState::kOffline;
  }
  auto r = reported_.find(id);
  return r == reported_.end() ? LocalState::kOffline : r->second;
}

void Mgmtd::Check() {
  MutexLock lock(&mu_);
  if (election_ && election_->IsLeader() && !loaded_) {
    if (Status st = Load(); !st.ok()) spdlog::error("fs3-mgmtd: reloading: {}", st.message());
  }
  if (!Leading().ok() || !cluster_.initialized()) return;
  // After a restart, services get a grace period to report before their targets count as down
  // (their clients reconnect with backoff).
  const auto now = std::chrono::steady_clock::now();
  const int64_t grace_ms =
      options_.restart_grace_ms > 0 ? options_.restart_grace_ms : 3 * options_.lease_ms;
  const bool grace = now - started_ < std::chrono::milliseconds(grace_ms);
  std::vector<ChainId> changed;
  for (auto& [id, chain] : chains_) {
    std::map<TargetId, LocalState> local;
    bool unknown = false;
    for (const ChainTarget& t : chain.targets) {
      auto rec = targets_.find(t.target);
      auto node = rec == targets_.end() ? nodes_.end() : nodes_.find(rec->second.node());
      if (grace && node != nodes_.end() && !node->second.heard) unknown = true;
      local[t.target] = LocalOf(t.target);
    }
    if (unknown) continue;
    Chain before = chain;
    if (UpdateChain(chain, local)) {
      changed.push_back(id);
      std::string from, to;
      for (const ChainTarget& t : before.targets)
        from += std::to_string(t.target) + ":" + std::string(Name(t.state)) + " ";
      for (const ChainTarget& t : chain.targets)
        to += std::to_string(t.target) + ":" + std::string(Name(t.state)) + " ";
      spdlog::info("chain {} v{}: {}-> {}", id, chain.version, from, to);
    }
  }
  if (!changed.empty()) {
    if (Status st = Commit(changed, {}); !st.ok()) spdlog::error("{}", st.message());
  }
  UpdateGauges();
}

Status Mgmtd::Commit(const std::vector<ChainId>& chains, const std::vector<TargetId>& targets) {
  cluster_.set_routing_version(cluster_.routing_version() + 1);
  std::vector<fs3rpc::ChainInfo> chain_protos;
  chain_protos.reserve(chains.size());
  std::vector<std::pair<std::string, const google::protobuf::Message*>> kvs;
  kvs.emplace_back("cluster", &cluster_);
  for (ChainId id : chains)
    chain_protos.push_back(ToProto(chains_.at(id)));
  for (const fs3rpc::ChainInfo& c : chain_protos)
    kvs.emplace_back(ChainKey(c.id()), &c);
  for (TargetId id : targets)
    kvs.emplace_back(TargetKey(id), &targets_.at(id));
  Status st = db_->PutBatch(kvs);
  if (!st.ok() && etcd_) {
    // What was just decided is not in etcd (deposed, or etcd unreachable): nothing of it may be
    // published. Serve again only from what etcd holds (Check reloads while still leader).
    loaded_ = false;
    spdlog::error("fs3-mgmtd: cannot persist routing version {}: {}", cluster_.routing_version(),
                  st.message());
  }
  changed_.notify_all();
  return st;
}

void Mgmtd::Fill(fs3rpc::RoutingInfo* out) const {
  out->set_version(cluster_.routing_version());
  out->set_initialized(cluster_.initialized());
  out->set_chunk_size(cluster_.chunk_size());
  out->set_replication(cluster_.replication());
  std::map<TargetId, std::pair<ChainId, PublicState>> in_chain;
  for (const auto& [id, chain] : chains_) {
    *out->add_chains() = ToProto(chain);
    for (const ChainTarget& t : chain.targets)
      in_chain[t.target] = {id, t.state};
  }
  for (const auto& [id, rec] : targets_) {
    fs3rpc::TargetInfo* t = out->add_targets();
    t->set_id(id);
    t->set_node(rec.node());
    t->set_path(rec.path());
    t->set_admin_offline(rec.admin_offline());
    t->set_local_state(std::string(Name(LocalOf(id))));
    if (auto it = in_chain.find(id); it != in_chain.end()) {
      t->set_chain(it->second.first);
      t->set_public_state(std::string(Name(it->second.second)));
    }
  }
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [name, n] : nodes_) {
    fs3rpc::NodeInfo* ni = out->add_nodes();
    ni->set_name(name);
    ni->set_address(n.record.address());
    ni->set_state(!n.heard ? "unknown"
                  : now - n.last_heartbeat < std::chrono::milliseconds(options_.lease_ms) ? "up"
                                                                                          : "down");
    ni->set_last_heartbeat_ms(n.last_heartbeat_ms);
    for (const auto& [id, rec] : targets_) {
      if (rec.node() == name) ni->add_targets(id);
    }
  }
}

void Mgmtd::UpdateGauges() {
  if (!metrics_) return;
  metrics_->Gauge("fs3_mgmtd_routing_version", "Version of the routing table")
      .Set(static_cast<double>(cluster_.routing_version()));
  std::map<std::string, int> by_state;
  for (const auto& [id, chain] : chains_) {
    for (const ChainTarget& t : chain.targets)
      ++by_state[std::string(Name(t.state))];
  }
  for (auto s : {PublicState::kServing, PublicState::kSyncing, PublicState::kWaiting,
                 PublicState::kLastSrv, PublicState::kOffline}) {
    std::string name(Name(s));
    metrics_->Gauge("fs3_mgmtd_targets", "Chain targets by public state", {{"state", name}})
        .Set(by_state[name]);
  }
  metrics_->Gauge("fs3_mgmtd_chains", "Chains").Set(static_cast<double>(chains_.size()));
  int unavailable = 0, degraded = 0;
  for (const auto& [id, chain] : chains_) {
    const std::size_t serving = chain.Readable().size();
    unavailable += serving == 0 ? 1 : 0;
    degraded += serving > 0 && serving < chain.targets.size() ? 1 : 0;
  }
  metrics_->Gauge("fs3_mgmtd_chains_unavailable", "Chains without a serving replica")
      .Set(unavailable);
  metrics_
      ->Gauge("fs3_mgmtd_chains_degraded",
              "Chains with a serving replica but not all targets serving")
      .Set(degraded);
}

// ---- RPCs -------------------------------------------------------------------------------------

grpc::Status Mgmtd::Heartbeat(grpc::ServerContext*, const fs3rpc::HeartbeatRequest* req,
                              fs3rpc::HeartbeatResponse* resp) {
  return ServeRpc("Heartbeat", [&]() -> Status {
    if (req->node().empty() || req->node().size() > 256) {
      return InvalidArgument("a storage service needs a name of 1..256 bytes");
    }
    std::set<TargetId> seen;
    for (const fs3rpc::ReportedTarget& t : req->targets()) {
      if (t.id() == 0) return InvalidArgument("target id 0 is reserved");
      if (!seen.insert(t.id()).second) {
        return InvalidArgument("target " + std::to_string(t.id()) + " is reported twice");
      }
      if (!ParseLocalState(t.local_state())) {
        return InvalidArgument("target " + std::to_string(t.id()) + ": unknown local state '" +
                               t.local_state() + "'");
      }
    }
    MutexLock lock(&mu_);
    FF_RETURN_IF_ERROR(Leading());
    for (const fs3rpc::ReportedTarget& t : req->targets()) {
      auto it = targets_.find(t.id());
      if (it != targets_.end() && it->second.node() != req->node()) {
        return FailedPrecondition("target " + std::to_string(t.id()) + " belongs to " +
                                  it->second.node() + ", not " + req->node());
      }
    }
    NodeRuntime& node = nodes_[req->node()];
    std::vector<TargetId> new_targets;
    const bool new_address = node.record.address() != req->address();
    if (new_address) {
      node.record.set_name(req->node());
      node.record.set_address(req->address());
      FF_RETURN_IF_ERROR(db_->Put("node/" + req->node(), node.record));
    }
    if (!node.heard) spdlog::info("storage service {} at {} is up", req->node(), req->address());
    node.heard = true;
    node.last_heartbeat = std::chrono::steady_clock::now();
    node.last_heartbeat_ms = WallMs();
    for (const auto& [id, rec] : targets_) {
      if (rec.node() == req->node() && !seen.contains(id)) reported_[id] = LocalState::kOffline;
    }
    for (const fs3rpc::ReportedTarget& t : req->targets()) {
      reported_[t.id()] = *ParseLocalState(t.local_state());
      auto it = targets_.find(t.id());
      if (it == targets_.end() || it->second.path() != t.path()) {
        fs3rpc::TargetRecord& rec = targets_[t.id()];
        rec.set_id(t.id());
        rec.set_node(req->node());
        rec.set_path(t.path());
        new_targets.push_back(t.id());
      }
    }
    if (!new_targets.empty() || new_address) FF_RETURN_IF_ERROR(Commit({}, new_targets));
    resp->set_lease_ms(options_.lease_ms);
    resp->set_routing_version(cluster_.routing_version());
    return Status::Ok();
  });
}

grpc::Status Mgmtd::GetRouting(grpc::ServerContext* ctx, const fs3rpc::GetRoutingRequest* req,
                               fs3rpc::RoutingInfo* resp) {
  return ServeRpc("GetRouting", [&]() -> Status {
    UniqueLock lock(&mu_);
    FF_RETURN_IF_ERROR(Leading());
    if (req->wait_ms() > 0 && req->known_version() == cluster_.routing_version()) {
      const auto wait =
          LongPollWait(ctx, std::chrono::milliseconds(std::min<int64_t>(req->wait_ms(), 30000)));
      changed_.wait_for(lock, wait, [&] {
        mu_.AssertHeld();
        return stopping_ || ctx->IsCancelled() || !loaded_ ||
               cluster_.routing_version() != req->known_version();
      });
      FF_RETURN_IF_ERROR(Leading());  // deposed while waiting
    }
    Fill(resp);
    return Status::Ok();
  });
}

grpc::Status Mgmtd::InitCluster(grpc::ServerContext*, const fs3rpc::InitRequest* req,
                                fs3rpc::RoutingInfo* resp) {
  return ServeRpc("InitCluster", [&]() -> Status {
    const uint64_t size = req->chunk_size();
    if (size < kMinChunkSize || size > kMaxChunkSize || (size & (size - 1)) != 0) {
      return InvalidArgument("the chunk size must be a power of two from 4 KiB to 64 MiB (got " +
                             std::to_string(size) + ")");
    }
    if (req->replication() < 1 || req->replication() > kMaxReplication) {
      return InvalidArgument("the replication factor must be 1.." +
                             std::to_string(kMaxReplication));
    }
    MutexLock lock(&mu_);
    FF_RETURN_IF_ERROR(Leading());
    if (cluster_.initialized()) {
      return FailedPrecondition("the cluster is already initialised (chunk size " +
                                std::to_string(cluster_.chunk_size()) + ", replication " +
                                std::to_string(cluster_.replication()) + ")");
    }
    // Chains of `replication` targets on distinct services: the i-th target of every service
    // in turn, so that each chain spreads over services.
    std::map<std::string, std::vector<TargetId>> by_node;
    for (const auto& [id, rec] : targets_) {
      if (LocalOf(id) != LocalState::kOffline) by_node[rec.node()].push_back(id);
    }
    if (by_node.size() < req->replication()) {
      return FailedPrecondition("replication " + std::to_string(req->replication()) + " needs " +
                                std::to_string(req->replication()) +
                                " storage services with live targets; " +
                                std::to_string(by_node.size()) + " have registered");
    }
    std::vector<std::pair<TargetId, std::string>> order;
    for (std::size_t round = 0;; ++round) {
      bool any = false;
      for (const auto& [node, ids] : by_node) {
        if (round < ids.size()) {
          order.emplace_back(ids[round], node);
          any = true;
        }
      }
      if (!any) break;
    }
    std::vector<ChainId> made;
    ChainId next = 1;
    for (std::size_t i = 0; i + req->replication() <= order.size(); i += req->replication()) {
      Chain chain{next, 1, {}};
      std::set<std::string> nodes;
      for (std::size_t k = i; k < i + req->replication(); ++k) {
        chain.targets.push_back({order[k].first, PublicState::kServing});
        nodes.insert(order[k].second);
      }
      if (nodes.size() < req->replication()) break;  // the rest would double up on a service
      chains_[next] = chain;
      made.push_back(next++);
    }
    if (made.empty()) return FailedPrecondition("no chain can be built from the targets");
    cluster_.set_initialized(true);
    cluster_.set_chunk_size(size);
    cluster_.set_replication(req->replication());
    FF_RETURN_IF_ERROR(Commit(made, {}));
    spdlog::info("cluster initialised: {} chains of {} targets, chunk size {}", made.size(),
                 req->replication(), size);
    Fill(resp);
    return Status::Ok();
  });
}

grpc::Status Mgmtd::SetTargetOffline(grpc::ServerContext*, const fs3rpc::TargetRef* req,
                                     fs3rpc::RoutingInfo* resp) {
  return ServeRpc("SetTargetOffline", [&]() -> Status {
    {
      MutexLock lock(&mu_);
      FF_RETURN_IF_ERROR(Leading());
      auto it = targets_.find(req->id());
      if (it == targets_.end()) return NotFound("no target " + std::to_string(req->id()));
      it->second.set_admin_offline(true);
      FF_RETURN_IF_ERROR(Commit({}, {req->id()}));
      spdlog::info("target {} taken offline by an admin", req->id());
    }
    Check();
    MutexLock lock(&mu_);
    Fill(resp);
    return Status::Ok();
  });
}

grpc::Status Mgmtd::AddTarget(grpc::ServerContext*, const fs3rpc::AddTargetRequest* req,
                              fs3rpc::RoutingInfo* resp) {
  return ServeRpc("AddTarget", [&]() -> Status {
    {
      MutexLock lock(&mu_);
      FF_RETURN_IF_ERROR(Leading());
      if (!cluster_.initialized()) return FailedPrecondition("initialise the cluster first");
      auto t = targets_.find(req->target());
      if (t == targets_.end()) {
        return NotFound("no target " + std::to_string(req->target()) +
                        " has registered (its storage service must heartbeat first)");
      }
      auto c = chains_.find(req->chain());
      if (c == chains_.end()) return NotFound("no chain " + std::to_string(req->chain()));
      for (const auto& [id, chain] : chains_) {
        for (const ChainTarget& ct : chain.targets) {
          if (ct.target == req->target()) {
            return AlreadyExists("target " + std::to_string(req->target()) + " is in chain " +
                                 std::to_string(id));
          }
        }
      }
      for (const ChainTarget& ct : c->second.targets) {
        if (targets_.at(ct.target).node() == t->second.node()) {
          return FailedPrecondition("chain " + std::to_string(req->chain()) +
                                    " already has a target on " + t->second.node());
        }
      }
      // It joins at the end, offline; the next pass makes it waiting, then syncing.
      t->second.set_admin_offline(false);
      c->second.targets.push_back({req->target(), PublicState::kOffline});
      ++c->second.version;
      FF_RETURN_IF_ERROR(Commit({req->chain()}, {req->target()}));
      spdlog::info("target {} added to chain {}", req->target(), req->chain());
    }
    Check();
    MutexLock lock(&mu_);
    Fill(resp);
    return Status::Ok();
  });
}

}  // namespace ff::fs3

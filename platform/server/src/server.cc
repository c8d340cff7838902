#include "platform/server.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "common/replicas.h"
#include "common/rpc_server.h"
#include "common/rpc_status.h"
#include "hfreduce/store.h"
#include "internal.h"
#include "platform/lifecycle.h"
#include "platform/names.h"
#include "platform/tokens.h"
#include "store.h"

namespace ff::platform {

using server_internal::HostOf;

void HaiOptions::Bind(ConfigSection& s) {
  s.Optional("engine", engine);
  s.Check(engine == "rocksdb" || engine == "etcd", "engine", "must be \"rocksdb\" or \"etcd\"");
  s.Required("data_dir", data_dir);
  s.Optional("etcd_endpoints", etcd_endpoints);
  s.Check(engine != "etcd" || !etcd_endpoints.empty() || s.mode() != ConfigSection::Mode::kRead,
          "etcd_endpoints", "is required with engine = \"etcd\"");
  s.Optional("etcd_prefix", etcd_prefix);
  s.Check(!etcd_prefix.empty(), "etcd_prefix", "must not be empty");
  s.Optional("advertise", advertise);
  s.Optional("election_ttl_s", election_ttl_s);
  s.Check(election_ttl_s >= 1 && election_ttl_s <= 60, "election_ttl_s", "must be 1..60");
  s.Optional("cluster", cluster);
  s.Required("agent_token_file", agent_token_file);
  s.Optional("checkpoint_root", checkpoint_root);
  s.Optional("heartbeat_timeout_ms", heartbeat_timeout_ms);
  s.Check(heartbeat_timeout_ms > 0, "heartbeat_timeout_ms", "must be positive");
  s.Optional("heartbeat_interval_ms", heartbeat_interval_ms);
  s.Check(heartbeat_interval_ms > 0 && heartbeat_interval_ms < heartbeat_timeout_ms,
          "heartbeat_interval_ms", "must be positive and below heartbeat_timeout_ms");
  s.Optional("schedule_interval_ms", schedule_interval_ms);
  s.Check(schedule_interval_ms > 0, "schedule_interval_ms", "must be positive");
  s.Optional("suspend_grace_ms", suspend_grace_ms);
  s.Check(suspend_grace_ms >= 0, "suspend_grace_ms", "must not be negative");
  s.Optional("suspend_max_grace_ms", suspend_max_grace_ms);
  s.Check(suspend_max_grace_ms >= suspend_grace_ms, "suspend_max_grace_ms",
          "must be at least suspend_grace_ms");
  s.Optional("suspend_grace_margin", suspend_grace_margin);
  s.Check(suspend_grace_margin >= 1 && suspend_grace_margin <= 100, "suspend_grace_margin",
          "must be between 1 and 100");
  s.Optional("suspend_grace_slack_ms", suspend_grace_slack_ms);
  s.Check(suspend_grace_slack_ms >= 0, "suspend_grace_slack_ms", "must not be negative");
  s.Optional("victim_order", victim_order);
  s.Check(victim_order == "least-lost" || victim_order == "newest-first", "victim_order",
          "must be least-lost or newest-first");
  s.Optional("checkpoint_write_gbps", checkpoint_write_gbps);
  s.Check(checkpoint_write_gbps >= 0, "checkpoint_write_gbps", "must not be negative");
  s.Optional("checkpoint_max_delay_ms", checkpoint_max_delay_ms);
  s.Check(checkpoint_max_delay_ms >= 0, "checkpoint_max_delay_ms", "must not be negative");
  s.Optional("restart_cost_s", restart_cost_s);
  s.Check(restart_cost_s >= 0, "restart_cost_s", "must not be negative");
  s.Optional("master_port_base", master_port_base);
  s.Check(master_port_base > 0 && master_port_base < 65000, "master_port_base",
          "must be a port number below 65000");
  s.Optional("policy", policy);
  s.OneOf("policy", policy, {"first-fit", "slurm-tree", "congestion-aware"});
  s.Optional("locality_wait_s", locality_wait_s);
  s.Check(locality_wait_s.value_or(0) >= 0, "locality_wait_s", "must not be negative");
  s.Optional("locality_wait_share", locality_wait_share);
  s.Check(locality_wait_share.value_or(0) >= 0 && locality_wait_share.value_or(0) <= 1,
          "locality_wait_share", "must be between 0 and 1");
  s.Optional("preemption", preemption);
  s.Optional("backfill", backfill);
  s.Optional("replacement_quick_failure_s", replacement_quick_failure_s);
  s.Check(replacement_quick_failure_s >= 0, "replacement_quick_failure_s", "must not be negative");
  s.Optional("replacement_backoff_s", replacement_backoff_s);
  s.Check(replacement_backoff_s >= 1, "replacement_backoff_s", "must be at least 1");
  s.Optional("replacement_backoff_max_s", replacement_backoff_max_s);
  s.Check(replacement_backoff_max_s >= replacement_backoff_s, "replacement_backoff_max_s",
          "must be at least replacement_backoff_s");
  s.Optional("straggler_suspect_findings", straggler_suspect_findings);
  s.Check(straggler_suspect_findings >= 0, "straggler_suspect_findings", "must not be negative");
  s.Optional("straggler_window_s", straggler_window_s);
  s.Check(straggler_window_s >= 1, "straggler_window_s", "must be at least 1");
  s.Optional("straggler_drain", straggler_drain);
  s.Optional("straggler_requeue_gangs", straggler_requeue_gangs);
  s.Optional("straggler_requeue_cost_s", straggler_requeue_cost_s);
  s.Check(straggler_requeue_cost_s >= 0, "straggler_requeue_cost_s", "must not be negative");
  s.Optional("straggler_replace_groups", straggler_replace_groups);
  s.Optional("straggler_replace_cost_s", straggler_replace_cost_s);
  s.Check(straggler_replace_cost_s >= 0, "straggler_replace_cost_s", "must not be negative");
}

scheduler::SchedulerOptions SchedulerOptionsOf(const HaiOptions& options) {
  scheduler::SchedulerOptions sched;
  sched.preemption = options.preemption;
  sched.backfill = options.backfill;
  sched.replacements.quick_failure = options.replacement_quick_failure_s;
  sched.replacements.first_backoff = options.replacement_backoff_s;
  sched.replacements.max_backoff = options.replacement_backoff_max_s;
  // The scheduler prices suspensions in whole seconds, with the deadlines SuspendGraceMs gives.
  scheduler::SuspendPolicy& suspend = sched.suspend;
  suspend.order = options.victim_order == "newest-first"
                      ? scheduler::SuspendPolicy::VictimOrder::kNewestFirst
                      : scheduler::SuspendPolicy::VictimOrder::kLeastLost;
  suspend.min_deadline = (options.suspend_grace_ms + 999) / 1000;
  suspend.max_deadline = (options.suspend_max_grace_ms + 999) / 1000;
  suspend.margin = options.suspend_grace_margin;
  suspend.slack = (options.suspend_grace_slack_ms + 999) / 1000;
  suspend.restart_s = options.restart_cost_s;
  return sched;
}

scheduler::PolicyOptions PolicyOptionsOf(const HaiOptions& options) {
  scheduler::PolicyOptions policy;  // the library's defaults, unless the config sets one
  if (options.locality_wait_s) policy.locality_wait = *options.locality_wait_s;
  if (options.locality_wait_share) policy.locality_wait_share = *options.locality_wait_share;
  return policy;
}

Result<std::unique_ptr<HaiServer>> HaiServer::Create(const HaiOptions& options, Metrics* metrics) {
  FF_ASSIGN_OR_RETURN(scheduler::Topology topology, scheduler::Topology::Load(options.cluster));
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) return IoError("cannot create data_dir " + options.data_dir + ": " + ec.message());
  std::unique_ptr<etcd::Client> client;
  std::unique_ptr<Store> store;
  if (options.engine == "etcd") {
    FF_ASSIGN_OR_RETURN(client, etcd::Client::Connect(options.etcd_endpoints));
  } else {
    FF_ASSIGN_OR_RETURN(store, Store::Open(options.data_dir + "/db"));
  }
  std::unique_ptr<HaiServer> server(
      new HaiServer(options, std::move(topology), std::move(store), metrics));
  FF_ASSIGN_OR_RETURN(std::string agent_token,
                      ReadTokenFile(options.agent_token_file, /*create=*/true));
  server->agent_token_hash_ = HashToken(agent_token);
  if (client) {
    server->etcd_ = std::move(client);
    FF_ASSIGN_OR_RETURN(server->store_,
                        Store::OpenEtcd(server->etcd_.get(), options.etcd_prefix + "state/",
                                        [s = server.get()] { return s->election_->Fence(); }));
    spdlog::info("records in etcd under {}; serving once elected", options.etcd_prefix);
    return server;  // loads the records when elected
  }
  MutexLock lock(&server->mu_);
  FF_RETURN_IF_ERROR(server->Load());
  return server;
}

HaiServer::HaiServer(const HaiOptions& options, scheduler::Topology topology,
                     std::unique_ptr<Store> store, Metrics* metrics)
    : options_(options),
      topology_(std::move(topology)),
      store_(std::move(store)),
      metrics_(metrics) {
  scheduler_ = std::make_unique<scheduler::Scheduler>(
      scheduler::MakePlacementPolicy(options_.policy, PolicyOptionsOf(options_)),
      SchedulerOptionsOf(options_));
  const auto now = std::chrono::steady_clock::now();
  for (const scheduler::Node& n : topology_.nodes()) {
    NodeRuntime& rt = nodes_[n.name];
    rt.record.set_name(n.name);
    rt.record.set_zone(topology_.zones()[n.zone].name);
    rt.record.set_leaf(topology_.leaves()[n.leaf].name);
    rt.record.set_gpus(n.gpus);
    rt.record.set_state(hai::NODE_UNKNOWN);
    rt.last_heartbeat = now;
  }
}

HaiServer::~HaiServer() {
  Stop();
}

Status HaiServer::Load() {
  jobs_.clear();
  users_.clear();
  user_by_token_.clear();
  next_id_ = 1;
  const auto now = std::chrono::steady_clock::now();
  for (auto& [name, rt] : nodes_) {  // as at a start: heard from within a timeout, or lost
    rt.record.set_state(hai::NODE_UNKNOWN);
    rt.record.set_drained(false);
    rt.last_heartbeat = now;
    rt.probation_since.reset();
    rt.reported_running.clear();
    ++rt.generation;
  }
  FF_ASSIGN_OR_RETURN(auto jobs, store_->LoadJobs());
  for (hai::Job& j : jobs) {
    next_id_ = std::max(next_id_, j.id() + 1);
    jobs_[j.id()] = std::move(j);
  }
  FF_ASSIGN_OR_RETURN(auto users, store_->LoadUsers());
  for (hai::User& u : users) {
    user_by_token_[u.token_sha256()] = u.name();
    users_[u.name()] = std::move(u);
  }
  FF_ASSIGN_OR_RETURN(auto nodes, store_->LoadNodes());
  for (hai::Node& n : nodes) {
    auto it = nodes_.find(n.name());
    if (it == nodes_.end()) continue;  // no longer in cluster.toml
    it->second.record.set_drained(n.drained());
    it->second.record.set_drain_reason(n.drain_reason());
    it->second.record.set_drained_by(n.drained_by());
    it->second.record.set_agent_address(n.agent_address());
    // A node that was up counts as up until its heartbeat timeout runs out.
    if (n.state() == hai::NODE_UP) it->second.record.set_state(hai::NODE_UP);
  }
  if (users_.empty()) {
    // First start: an admin user whose token only the operator can read.
    const std::string path = options_.data_dir + "/admin.token";
    FF_ASSIGN_OR_RETURN(std::string token, ReadTokenFile(path, /*create=*/true));
    hai::User admin;
    admin.set_name("admin");
    admin.set_admin(true);
    admin.set_token_sha256(HashToken(token));
    FF_RETURN_IF_ERROR(store_->PutUser(admin));
    user_by_token_[admin.token_sha256()] = "admin";
    users_["admin"] = admin;
    spdlog::info("created user 'admin'; its token is in {}", path);
  }
  spdlog::info("loaded {} jobs, {} users; {} nodes in {}", jobs_.size(), users_.size(),
               nodes_.size(), options_.cluster);
  loaded_ = true;
  return Status::Ok();
}

Status HaiServer::Leading() const {
  if (!etcd_) return Status::Ok();
  if (election_ && election_->IsLeader() && loaded_) return Status::Ok();
  return NotLeader("hai-server", self_,
                   election_ && !election_->IsLeader() ? election_->Leader() : "");
}

void HaiServer::OnLeadership(bool leader) {
  if (metrics_) {
    metrics_->Gauge("hai_server_leader", "1 while this replica leads (schedules, serves)")
        .Set(leader ? 1 : 0);
    if (leader) {
      metrics_->Counter("hai_server_elections_won_total", "Times this replica became leader")
          .Increment();
    }
  }
  if (quorum_server_) {
    // Quorums decided here before another replica led are stale: a new epoch forgets them (the
    // groups ask again and re-form under prefixes never used before). A replica that leads again
    // under the fence it had (its lease outlived an etcd blip) knows nobody led in between: its
    // quorums stand, and the groups carry on without re-forming.
    if (leader) {
      const int64_t fence = election_ ? election_->FenceRevision() : 0;
      if (fence != 0 && fence == ft_fence_revision_) {
        spdlog::info("hai-server leads again under fence revision {}: its quorums stand", fence);
      } else {
        quorum_server_->quorum().NewEpoch(std::to_string(std::random_device{}()));
      }
      ft_fence_revision_ = fence;
    }
    ft_leading_ = leader;
  }
  if (leader) RefreshFtStores();
  {
    MutexLock lock(&mu_);
    if (!leader) {
      loaded_ = false;
      work_cv_.notify_all();  // held heartbeats answer: not the leader
      return;
    }
    for (int attempt = 0; attempt < 5 && !loaded_; ++attempt) {
      Status st = Load();
      if (!st.ok())
        spdlog::error("hai-server elected but cannot load its records: {}", st.message());
    }
    work_cv_.notify_all();
  }
  Kick();
}

void HaiServer::Start(const std::string& address) {
  self_ = options_.advertise.empty() ? address : options_.advertise;
  // Jobs reach it where they reach this replica. Without it fault-tolerant jobs get no
  // HAI_FT_STORE and say so; every other job is unaffected.
  const std::string host = HostOf(self_);
  // With replicas (etcd), each runs one, and only the leader's serves: HAI_FT_STORE lists every
  // replica's, so that a job's groups follow the leader through a failover (they re-form once).
  std::function<Status()> serving;
  ft_leading_ = !etcd_;  // a replica serves once elected
  if (etcd_) {
    serving = [this] {
      return ft_leading_.load() ? Status::Ok()
                                : NotLeader("hai-server's quorum service", self_, "");
    };
  }
  auto quorum =
      hfreduce::StoreServer::Start((host.empty() ? "127.0.0.1" : host) + ":0", std::move(serving));
  if (quorum.ok()) {
    quorum_server_ = std::move(*quorum);
    quorum_server_->SetStores(quorum_server_->address());
    quorum_server_->quorum().SetCheck(
        [this](hfreduce::QuorumRequest& request) { return CheckQuorumRequest(request); });
    {
      MutexLock lock(&mu_);
      quorum_address_ = quorum_server_->address();
    }
    spdlog::info("serving replica quorums (HAI_FT_STORE) on {}", quorum_server_->address());
    if (etcd_) {
      Result<int64_t> put =
          etcd_->Put(options_.etcd_prefix + "ft-stores/" + self_, quorum_server_->address());
      if (!put.ok()) {
        spdlog::error("cannot publish this replica's quorum service in etcd: {}",
                      put.status().message());
      }
    }
  } else {
    spdlog::error("cannot serve replica quorums: {}", quorum.status().message());
  }
  if (metrics_) {  // a lone hai-server always leads; a replica once elected
    metrics_->Gauge("hai_server_leader", "1 while this replica leads (schedules, serves)")
        .Set(etcd_ ? 0 : 1);
    metrics_->Counter("hai_server_elections_won_total", "Times this replica became leader");
  }
  if (etcd_) {
    // Made, then started: its callback reads election_ (the fence it leads under).
    election_ = LeaderElection::ForReplica(etcd_.get(), options_.etcd_prefix, self_,
                                           options_.election_ttl_s,
                                           [this](bool leader) { OnLeadership(leader); });
    election_->Start();
  }
  loop_ = std::thread([this] {
    UniqueLock lock(&loop_mu_);
    while (!stopping_) {
      loop_cv_.wait_for(lock, std::chrono::milliseconds(options_.schedule_interval_ms), [this] {
        loop_mu_.AssertHeld();
        return stopping_ || kicked_;
      });
      if (stopping_) break;
      kicked_ = false;
      lock.unlock();
      Tick();
      lock.lock();
    }
  });
}

void HaiServer::Stop() {
  {
    MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  work_cv_.notify_all();
  {
    MutexLock lock(&loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (election_) election_->Resign();  // a standby takes over at once
  MutexLock lock(&mu_);
  if (!write_failure_.ok() && store_) store_->Abandon();
}

void HaiServer::RefreshFtStores() {
  if (!etcd_ || !quorum_server_) return;
  Result<etcd::RangeResult> stores = etcd_->RangePrefix(options_.etcd_prefix + "ft-stores/");
  if (!stores.ok()) {
    spdlog::warn("cannot read the replicas' quorum services from etcd: {}",
                 stores.status().message());
    return;
  }
  std::string list = quorum_server_->address();  // this replica's first: it serves now
  for (const auto& kv : stores->kvs) {
    if (kv.value != quorum_server_->address()) list += "," + kv.value;
  }
  quorum_server_->SetStores(list);  // the groups learn of replicas started after them
  MutexLock lock(&mu_);
  quorum_address_ = list;
}

void HaiServer::Tick() {
  auto start = std::chrono::steady_clock::now();
  // Replicas that started since: looked up every 5 s, and every round while a fault-tolerant
  // job waits (its ranks take the list when they start, for good).
  bool ft_waiting = false;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, job] : jobs_) {
      ft_waiting |= FaultTolerant(job.spec()) && !Active(job) && !Terminal(job);
    }
  }
  if (ft_waiting || start - ft_stores_read_ > std::chrono::seconds(5)) {
    ft_stores_read_ = start;
    RefreshFtStores();
  }
  {
    MutexLock lock(&mu_);
    if (!write_failure_.ok() || !Leading().ok()) return;
    CheckLostNodes();
    if (write_failure_.ok()) ScheduleRound();
    if (write_failure_.ok()) DetectStragglers();
    if (write_failure_.ok()) AdmitCheckpoints(NowMs());
    UpdateGauges();
  }
  if (metrics_) {
    metrics_
        ->Histogram("hai_scheduling_round_seconds", "Time of one scheduling pass",
                    Metrics::LatencyBuckets())
        .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

// ---- authentication ---------------------------------------------------------------------------

Result<hai::User> HaiServer::Authenticate(const grpc::ServerContext& context) const {
  std::string token = BearerToken(context);
  if (token.empty()) {
    return Status(StatusCode::kUnauthenticated,
                  "no token: set HAI_TOKEN or token in ~/.hai/config.toml");
  }
  MutexLock lock(&mu_);
  FF_RETURN_IF_ERROR(Leading());
  auto it = user_by_token_.find(HashToken(token));
  if (it == user_by_token_.end()) return Status(StatusCode::kUnauthenticated, "invalid token");
  return users_.at(it->second);
}

Status HaiServer::AuthenticateAgent(const grpc::ServerContext& context) const {
  std::string token = BearerToken(context);
  if (token.empty() || HashToken(token) != agent_token_hash_) {
    return Status(StatusCode::kUnauthenticated, "invalid agent token");
  }
  MutexLock lock(&mu_);
  return Leading();
}

Result<hai::Job*> HaiServer::OwnJob(const hai::User& user, int64_t id) {
  auto it = jobs_.find(id);
  // Someone else's job is reported exactly like a missing one: ids reveal nothing.
  if (it == jobs_.end() || (it->second.user() != user.name() && !user.admin())) {
    return NotFound("no job " + std::to_string(id));
  }
  return &it->second;
}

Status HaiServer::Save(const hai::Job& job) {
  Status st = store_->PutJob(job);
  if (!st.ok()) spdlog::error("job {}: {}", job.id(), st.message());
  return st;
}

Status HaiServer::MustPersist(Status st, const std::string& what) {
  if (st.ok()) return st;
  if (etcd_ && !Leading().ok()) {
    // Deposed: the write was refused by the fence (or etcd is out of reach and the lease will
    // lapse). What memory holds is no longer the truth: it is reloaded if this replica leads again.
    loaded_ = false;
    work_cv_.notify_all();
    return NotLeader("hai-server", self_, election_ ? election_->Leader() : "");
  }
  if (write_failure_.ok()) {
    write_failure_ =
        Status(st.code(), "could not write " + what + " to " + options_.data_dir + ": " +
                              st.message() + "; stopped so that a restart serves what is on disk");
    spdlog::error("hai-server: {}", write_failure_.message());
    shutting_down_ = true;
    work_cv_.notify_all();
    kill(getpid(), SIGTERM);  // the daemon's shutdown; it exits 1 with WriteFailure()
  }
  return write_failure_;
}

Status HaiServer::ApplyEvent(hai::Job& job, const JobEvent& event, OnWriteFailure on_failure) {
  if (!write_failure_.ok()) return write_failure_;
  FF_ASSIGN_OR_RETURN(Transition t, Apply(job, event, NowMs()));
  if (!t.changed) return Status::Ok();
  Status saved = Save(t.job);
  if (on_failure == OnWriteFailure::kStopServer) {
    saved = MustPersist(saved, "job " + std::to_string(job.id()));
  }
  FF_RETURN_IF_ERROR(saved);
  job = std::move(t.job);
  if (!t.log.empty()) spdlog::info("{}", t.log);
  for (const std::string& n : t.wake) {
    if (auto it = nodes_.find(n); it != nodes_.end()) ++it->second.generation;
  }
  if (!t.wake.empty()) work_cv_.notify_all();
  if (t.run_ended || t.round_due) Kick();
  return Status::Ok();
}

void HaiServer::Kick() {
  {
    MutexLock lock(&loop_mu_);
    kicked_ = true;
  }
  loop_cv_.notify_all();
}

Status HaiServer::WriteFailure() const {
  MutexLock lock(&mu_);
  return write_failure_;
}

void HaiServer::UpdateGauges() {
  if (!metrics_) return;
  std::map<hai::JobState, int> by_state;
  const int64_t now = NowMs();
  std::map<int64_t, int64_t> suspending;
  int64_t longest_ms = 0;
  for (const auto& [id, job] : jobs_) {
    ++by_state[job.state()];
    if (job.state() != hai::SUSPENDING) continue;
    auto it = suspending_since_ms_.find(id);
    const int64_t since = it == suspending_since_ms_.end() ? now : it->second;
    suspending[id] = since;
    longest_ms = std::max(longest_ms, now - since);
  }
  suspending_since_ms_ = std::move(suspending);
  metrics_
      ->Gauge("hai_job_suspending_seconds_max",
              "How long the longest-suspending job has been SUSPENDING (0: none)")
      .Set(static_cast<double>(longest_ms) / 1000.0);
  for (int s = hai::QUEUED; s <= hai::STOPPED; ++s) {
    auto state = static_cast<hai::JobState>(s);
    metrics_->Gauge("hai_jobs", "Jobs by state", {{"state", StateName(state)}})
        .Set(by_state[state]);
  }
  std::map<std::string, int> nodes_by_state;
  for (const auto& [name, n] : nodes_)
    ++nodes_by_state[n.record.drained() ? "drained" : NodeStateName(n.record.state())];
  for (const char* s : {"up", "lost", "unknown", "drained"}) {
    metrics_->Gauge("hai_nodes", "Nodes by state", {{"state", s}}).Set(nodes_by_state[s]);
  }
  for (const auto& [name, n] : nodes_) {
    int failing = 0;
    for (const hai::HealthCheck& c : n.record.health())
      failing += c.ok() ? 0 : 1;
    metrics_
        ->Gauge("hai_node_failing_health_checks",
                "Failing checks in the node's last hai-health report", {{"node", name}})
        .Set(failing);
    metrics_->Gauge("hai_node_drained", "1 while the node is drained", {{"node", name}})
        .Set(n.record.drained() ? 1 : 0);
  }
}

}  // namespace ff::platform

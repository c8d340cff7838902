#include "server.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string_view>

#include "auth.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/rpc_status.h"

namespace ff::platform {
namespace {

using scheduler::ClusterState;
using scheduler::JobRequest;
using scheduler::Placement;

constexpr int kMaxNameBytes = 128;
constexpr std::size_t kMaxCommandBytes = 64 * 1024;
constexpr std::size_t kMaxEnvEntries = 256;
constexpr std::size_t kMaxEnvValueBytes = 64 * 1024;
constexpr std::size_t kMaxPathBytes = 4096;
constexpr int kMaxProcsPerNode = 64;
constexpr int kDefaultMaxRestarts = 3;
constexpr int kLostExitCode = -1;  // a rank whose node was lost: its exit is unknown

std::string StateName(hai::JobState s) {
  std::string n = hai::JobState_Name(s);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  return n;
}

// [A-Za-z_][A-Za-z0-9_]{0,255}: what a POSIX shell accepts as a variable name.
bool IsEnvName(std::string_view k) {
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (k.empty() || k.size() > 256 || !letter(k.front())) return false;
  return std::all_of(k.begin(), k.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

// [a-z][a-z0-9_-]{0,31}: also a Unix login name.
bool IsUserName(std::string_view n) {
  if (n.empty() || n.size() > 32 || n.front() < 'a' || n.front() > 'z') return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// A node's state, as hai.proto's Node.state spells it on the wire and in `hai nodes`.
enum class NodeState { kUnknown, kUp, kLost };

std::string NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kUp:
      return "up";
    case NodeState::kLost:
      return "lost";
    case NodeState::kUnknown:
      break;
  }
  return "unknown";
}

NodeState StateOf(const hai::Node& n) {
  if (n.state() == NodeStateName(NodeState::kUp)) return NodeState::kUp;
  if (n.state() == NodeStateName(NodeState::kLost)) return NodeState::kLost;
  return NodeState::kUnknown;
}

bool Active(const hai::Job& job) {
  return job.state() == hai::RUNNING || job.state() == hai::SUSPENDING;
}

bool Terminal(const hai::Job& job) {
  return job.state() == hai::SUCCEEDED || job.state() == hai::FAILED || job.state() == hai::STOPPED;
}

int ProcsPerNode(const hai::JobSpec& spec) {
  return spec.procs_per_node() > 0 ? spec.procs_per_node() : 1;
}

int WorldSize(const hai::JobSpec& spec) {
  return spec.nodes() * ProcsPerNode(spec);
}

// The host of an agent's "host:port" ("[v6]:port" gives v6, without brackets, as MASTER_ADDR and
// HFREDUCE_LISTEN_HOST take it).
std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

void HaiOptions::Bind(ConfigSection& s) {
  s.Required("data_dir", data_dir);
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
  s.Optional("master_port_base", master_port_base);
  s.Check(master_port_base > 0 && master_port_base < 65000, "master_port_base",
          "must be a port number below 65000");
  s.Optional("policy", policy);
  s.OneOf("policy", policy, {"first-fit", "slurm-tree", "congestion-aware"});
  s.Optional("locality_wait_s", locality_wait_s);
  s.Check(locality_wait_s.value_or(0) >= 0, "locality_wait_s", "must not be negative");
  s.Optional("preemption", preemption);
  s.Optional("backfill", backfill);
}

scheduler::PolicyOptions PolicyOptionsOf(const HaiOptions& options) {
  scheduler::PolicyOptions policy;  // the library's defaults, unless the config sets one
  if (options.locality_wait_s) policy.locality_wait = *options.locality_wait_s;
  return policy;
}

Result<std::unique_ptr<HaiServer>> HaiServer::Create(const HaiOptions& options, Metrics* metrics) {
  FF_ASSIGN_OR_RETURN(scheduler::Topology topology, scheduler::Topology::Load(options.cluster));
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) return IoError("cannot create data_dir " + options.data_dir + ": " + ec.message());
  FF_ASSIGN_OR_RETURN(auto store, Store::Open(options.data_dir + "/db"));
  std::unique_ptr<HaiServer> server(
      new HaiServer(options, std::move(topology), std::move(store), metrics));
  FF_ASSIGN_OR_RETURN(std::string agent_token,
                      ReadTokenFile(options.agent_token_file, /*create=*/true));
  server->agent_token_hash_ = HashToken(agent_token);
  FF_RETURN_IF_ERROR(server->Load());
  return server;
}

HaiServer::HaiServer(const HaiOptions& options, scheduler::Topology topology,
                     std::unique_ptr<Store> store, Metrics* metrics)
    : options_(options),
      topology_(std::move(topology)),
      store_(std::move(store)),
      metrics_(metrics) {
  scheduler::SchedulerOptions sched;
  sched.preemption = options_.preemption;
  sched.backfill = options_.backfill;
  scheduler_ = std::make_unique<scheduler::Scheduler>(
      scheduler::MakePlacementPolicy(options_.policy, PolicyOptionsOf(options_)), sched);
  const auto now = std::chrono::steady_clock::now();
  for (const scheduler::Node& n : topology_.nodes()) {
    NodeRuntime& rt = nodes_[n.name];
    rt.record.set_name(n.name);
    rt.record.set_zone(topology_.zones()[n.zone].name);
    rt.record.set_leaf(topology_.leaves()[n.leaf].name);
    rt.record.set_gpus(n.gpus);
    rt.record.set_state(NodeStateName(NodeState::kUnknown));
    rt.last_heartbeat = now;
  }
}

HaiServer::~HaiServer() {
  Stop();
}

Status HaiServer::Load() {
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
    if (StateOf(n) == NodeState::kUp) it->second.record.set_state(NodeStateName(NodeState::kUp));
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
  return Status::Ok();
}

void HaiServer::Start() {
  loop_ = std::thread([this] {
    std::unique_lock lock(loop_mu_);
    while (!stopping_) {
      loop_cv_.wait_for(lock, std::chrono::milliseconds(options_.schedule_interval_ms),
                        [this] { return stopping_ || kicked_; });
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
    std::lock_guard lock(mu_);
    shutting_down_ = true;
  }
  work_cv_.notify_all();
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  std::lock_guard lock(mu_);
  if (!write_failure_.ok() && store_) store_->Abandon();
}

void HaiServer::Tick() {
  auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (!write_failure_.ok()) return;
    CheckLostNodes();
    if (write_failure_.ok()) ScheduleRound();
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
  std::lock_guard lock(mu_);
  auto it = user_by_token_.find(HashToken(token));
  if (it == user_by_token_.end()) return Status(StatusCode::kUnauthenticated, "invalid token");
  return users_.at(it->second);
}

Status HaiServer::AuthenticateAgent(const grpc::ServerContext& context) const {
  std::string token = BearerToken(context);
  if (token.empty() || HashToken(token) != agent_token_hash_) {
    return Status(StatusCode::kUnauthenticated, "invalid agent token");
  }
  return Status::Ok();
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

Status HaiServer::WriteFailure() const {
  std::lock_guard lock(mu_);
  return write_failure_;
}

// ---- jobs -------------------------------------------------------------------------------------

Status HaiServer::ValidateSpec(const hai::JobSpec& spec) const {
  if (spec.command().empty()) return InvalidArgument("the command is empty");
  if (spec.command().size() > kMaxCommandBytes) {
    return InvalidArgument("the command is longer than " + std::to_string(kMaxCommandBytes) +
                           " bytes");
  }
  if (spec.name().size() > kMaxNameBytes) {
    return InvalidArgument("the name is longer than " + std::to_string(kMaxNameBytes) + " bytes");
  }
  for (char c : spec.name()) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgument("the name has a control character");
    }
  }
  if (spec.workdir().size() > kMaxPathBytes ||
      (!spec.workdir().empty() && spec.workdir().front() != '/')) {
    return InvalidArgument("the working directory must be an absolute path of at most " +
                           std::to_string(kMaxPathBytes) + " bytes");
  }
  if (static_cast<std::size_t>(spec.env_size()) > kMaxEnvEntries) {
    return InvalidArgument("more than " + std::to_string(kMaxEnvEntries) +
                           " environment variables");
  }
  for (const auto& [k, v] : spec.env()) {
    if (!IsEnvName(k)) {
      return InvalidArgument("environment variable name '" + k.substr(0, 64) + "' is not valid");
    }
    if (k.rfind("HAI_", 0) == 0) {
      return InvalidArgument("environment variable " + k + " is set by the platform");
    }
    if (v.size() > kMaxEnvValueBytes) {
      return InvalidArgument("environment variable " + k + " is longer than " +
                             std::to_string(kMaxEnvValueBytes) + " bytes");
    }
  }
  if (spec.nodes() < 1) {
    return InvalidArgument("nodes must be at least 1 (got " + std::to_string(spec.nodes()) + ")");
  }
  if (spec.nodes() > static_cast<int>(topology_.nodes().size())) {
    return InvalidArgument("asks for " + std::to_string(spec.nodes()) + " nodes; the cluster has " +
                           std::to_string(topology_.nodes().size()));
  }
  if (spec.gpus_per_node() < 1 || spec.gpus_per_node() > topology_.max_gpus_per_node()) {
    return InvalidArgument(
        "gpus per node must be 1.." + std::to_string(topology_.max_gpus_per_node()) + " (got " +
        std::to_string(spec.gpus_per_node()) + "; no node has more GPUs than that)");
  }
  if (spec.procs_per_node() < 0 || spec.procs_per_node() > kMaxProcsPerNode) {
    return InvalidArgument("processes per node must be 1.." + std::to_string(kMaxProcsPerNode));
  }
  if (spec.priority() < scheduler::kMinPriority || spec.priority() > scheduler::kMaxPriority) {
    return InvalidArgument("unknown priority " + std::to_string(spec.priority()) +
                           " (priorities are 0..6, higher first)");
  }
  if (!hai::CommKind_IsValid(spec.comm()) || !hai::RestartPolicy_IsValid(spec.restart_policy())) {
    return InvalidArgument("unknown communication kind or restart policy");
  }
  if (spec.min_runtime_s() < 0) return InvalidArgument("min runtime must not be negative");
  if (spec.expected_runtime_s() < 0 || spec.expected_runtime_s() > 365LL * 86400) {
    return InvalidArgument("the expected run time must be 0 (unknown) to 365 days");
  }
  if (spec.max_restarts() < 0 || spec.max_restarts() > 100) {
    return InvalidArgument("max restarts must be 0..100");
  }
  // Whether it could ever run here: place it on an empty cluster.
  hai::Job probe;
  *probe.mutable_spec() = spec;
  ClusterState empty(topology_);
  std::string why;
  if (scheduler_->policy().Place(RequestOf(probe), empty, &why).empty()) {
    return InvalidArgument("can never run on this cluster: " + why);
  }
  return Status::Ok();
}

JobRequest HaiServer::RequestOf(const hai::Job& job) const {
  const hai::JobSpec& spec = job.spec();
  JobRequest r;
  r.id = job.id();
  r.user = job.user();
  r.priority = spec.priority();
  r.nodes = spec.nodes();
  r.gpus_per_node = spec.gpus_per_node();
  r.comm = spec.comm() == hai::PIPELINE ? scheduler::CommKind::kPipeline
           : spec.comm() == hai::NONE   ? scheduler::CommKind::kNone
                                        : scheduler::CommKind::kAllreduce;
  // Without a measurement, a communicating job is assumed to use half of its NIC.
  r.traffic_gbps = r.comm == scheduler::CommKind::kNone ? 0 : topology_.node_link_gbps() / 2;
  r.may_span_zones = spec.may_span_zones();
  r.min_runtime = spec.min_runtime_s();
  r.submit_time = job.submit_ms() / 1000;
  r.expected_runtime = spec.expected_runtime_s();
  r.preempted_by = job.preempted_by();
  r.preempted_by_priority = job.preempted_by_priority();
  r.preempted_at = job.preempted_at_ms() / 1000;
  r.locality_wait_since =
      job.locality_wait_since_ms() > 0 ? job.locality_wait_since_ms() / 1000 : -1;
  return r;
}

Status HaiServer::DoSubmit(const hai::User& user, const hai::JobSpec& in, hai::Job* out) {
  hai::JobSpec spec = in;
  if (spec.procs_per_node() == 0) spec.set_procs_per_node(1);
  if (spec.restart_policy() == hai::RESTART_ON_FAILURE && spec.max_restarts() == 0) {
    spec.set_max_restarts(kDefaultMaxRestarts);
  }
  if (spec.name().empty()) {
    std::string first = spec.command().substr(0, spec.command().find(' '));
    spec.set_name(first.substr(first.rfind('/') == std::string::npos ? 0 : first.rfind('/') + 1)
                      .substr(0, 64));
  }
  FF_RETURN_IF_ERROR(ValidateSpec(spec));
  std::lock_guard lock(mu_);
  hai::Job job;
  job.set_id(next_id_);
  job.set_user(user.name());
  *job.mutable_spec() = spec;
  job.set_state(hai::QUEUED);
  job.set_submit_ms(NowMs());
  job.set_pending_reason("waiting for the next scheduling round");
  FF_RETURN_IF_ERROR(Save(job));  // durable before it is acknowledged
  ++next_id_;
  jobs_[job.id()] = job;
  *out = job;
  spdlog::info("job {} submitted by {}: {} node(s) x {} GPU(s), priority {}", job.id(), user.name(),
               spec.nodes(), spec.gpus_per_node(), spec.priority());
  if (metrics_) metrics_->Counter("hai_jobs_submitted_total", "Jobs accepted").Increment();
  return Status::Ok();
}

grpc::Status HaiServer::Submit(grpc::ServerContext* ctx, const hai::SubmitRequest* req,
                               hai::Job* resp) {
  return ServeRpc("Submit", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    FF_RETURN_IF_ERROR(DoSubmit(user, req->spec(), resp));
    {
      std::lock_guard lock(loop_mu_);
      kicked_ = true;
    }
    loop_cv_.notify_all();
    return Status::Ok();
  });
}

grpc::Status HaiServer::ListJobs(grpc::ServerContext* ctx, const hai::ListJobsRequest* req,
                                 hai::ListJobsResponse* resp) {
  return ServeRpc("ListJobs", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    if (req->all_users() && !user.admin()) {
      return PermissionDenied("only admins may list every user's jobs");
    }
    std::lock_guard lock(mu_);
    for (const auto& [id, job] : jobs_) {
      if (!req->all_users() && job.user() != user.name()) continue;
      if (!req->include_finished() && Terminal(job)) continue;
      *resp->add_jobs() = job;
    }
    return Status::Ok();
  });
}

grpc::Status HaiServer::GetJob(grpc::ServerContext* ctx, const hai::JobRef* req, hai::Job* resp) {
  return ServeRpc("GetJob", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    std::lock_guard lock(mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    *resp = *job;
    return Status::Ok();
  });
}

grpc::Status HaiServer::StopJob(grpc::ServerContext* ctx, const hai::JobRef* req, hai::Job* resp) {
  return ServeRpc("StopJob", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    std::lock_guard lock(mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    if (Terminal(*job)) {
      return FailedPrecondition("job " + std::to_string(job->id()) + " has already ended (" +
                                StateName(job->state()) + ")");
    }
    hai::Job updated = *job;
    updated.set_stop_requested(true);
    if (!Active(updated)) {
      updated.set_state(hai::STOPPED);
      updated.set_end_ms(NowMs());
      updated.set_pending_reason("");
      updated.set_message("stopped by " + user.name() + " before it ran");
    }
    FF_RETURN_IF_ERROR(Save(updated));
    *job = updated;
    *resp = updated;
    Touch(*job);
    spdlog::info("job {}: stop requested by {}", job->id(), user.name());
    return Status::Ok();
  });
}

grpc::Status HaiServer::SuspendJob(grpc::ServerContext* ctx, const hai::JobRef* req,
                                   hai::Job* resp) {
  return ServeRpc("SuspendJob", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    std::lock_guard lock(mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    if (job->state() != hai::RUNNING || job->stop_requested()) {
      return FailedPrecondition("job " + std::to_string(job->id()) + " is " +
                                StateName(job->state()) + "; only running jobs can be suspended");
    }
    hai::Job updated = *job;
    updated.set_state(hai::SUSPENDING);
    FF_RETURN_IF_ERROR(Save(updated));
    *job = updated;
    *resp = updated;
    Touch(*job);
    spdlog::info("job {}: suspend requested by {}", job->id(), user.name());
    return Status::Ok();
  });
}

grpc::Status HaiServer::ReadLogs(grpc::ServerContext* ctx, const hai::LogsRequest* req,
                                 grpc::ServerWriter<hai::LogChunk>* writer) {
  return ServeRpc("ReadLogs", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    std::string agent;
    int run_index = -1;
    {
      std::lock_guard lock(mu_);
      FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
      if (req->rank() < 0 || req->rank() >= WorldSize(job->spec())) {
        return InvalidArgument("job " + std::to_string(job->id()) + " has ranks 0.." +
                               std::to_string(WorldSize(job->spec()) - 1));
      }
      if (job->runs().empty()) {
        return FailedPrecondition("job " + std::to_string(job->id()) +
                                  " has not started yet: no logs");
      }
      const hai::Run& run = job->runs(job->runs_size() - 1);
      run_index = run.index();
      const std::string& node = run.nodes(req->rank() / ProcsPerNode(job->spec()));
      agent = nodes_.at(node).record.agent_address();
      if (agent.empty()) return Unavailable("node " + node + " has no agent address");
    }
    std::string token = ReadTokenFile(options_.agent_token_file, false).value_or("");
    auto channel = MakeChannel(agent);
    auto stub = hai::HaiAgent::NewStub(channel);
    int64_t offset = 0;
    while (!ctx->IsCancelled()) {
      hai::ReadLogRequest r;
      r.set_job_id(req->id());
      r.set_rank(req->rank());
      r.set_offset(offset);
      r.set_max_bytes(1 << 20);
      hai::ReadLogResponse chunk;
      FF_RETURN_IF_ERROR(
          CallRpc("hai-agent ReadLog", CallOptions::Idempotent(), [&](grpc::ClientContext* c) {
            SetBearerToken(c, token);
            return stub->ReadLog(c, r, &chunk);
          }));
      if (!chunk.data().empty()) {
        hai::LogChunk out;
        out.set_data(chunk.data());
        if (!writer->Write(out)) return Status::Ok();  // the reader went away
        offset += static_cast<int64_t>(chunk.data().size());
        continue;
      }
      if (!req->follow()) return Status::Ok();
      bool running;
      {
        std::lock_guard lock(mu_);
        const hai::Job& job = jobs_.at(req->id());
        running = Active(job) && job.runs(job.runs_size() - 1).index() == run_index;
      }
      if (!running) {
        // One more read after the end, for what was written just before it.
        r.set_offset(offset);
        if (CallRpc("hai-agent ReadLog", CallOptions::Idempotent(),
                    [&](grpc::ClientContext* c) {
                      SetBearerToken(c, token);
                      return stub->ReadLog(c, r, &chunk);
                    })
                .ok() &&
            !chunk.data().empty()) {
          hai::LogChunk out;
          out.set_data(chunk.data());
          writer->Write(out);
        }
        return Status::Ok();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return Status::Ok();
  });
}

// ---- nodes and users --------------------------------------------------------------------------

grpc::Status HaiServer::ListNodes(grpc::ServerContext* ctx, const hai::ListNodesRequest*,
                                  hai::ListNodesResponse* resp) {
  return ServeRpc("ListNodes", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    (void)user;
    std::lock_guard lock(mu_);
    std::map<std::string, std::vector<int64_t>> jobs_on;
    for (const auto& [id, job] : jobs_) {
      if (!Active(job)) continue;
      for (const std::string& n : job.runs(job.runs_size() - 1).nodes())
        jobs_on[n].push_back(id);
    }
    for (const scheduler::Node& n : topology_.nodes()) {
      hai::Node* out = resp->add_nodes();
      *out = nodes_.at(n.name).record;
      for (int64_t id : jobs_on[n.name])
        out->add_jobs(id);
    }
    return Status::Ok();
  });
}

grpc::Status HaiServer::WhoAmI(grpc::ServerContext* ctx, const hai::WhoAmIRequest*,
                               hai::User* resp) {
  return ServeRpc("WhoAmI", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    *resp = user;
    resp->clear_token_sha256();
    return Status::Ok();
  });
}

grpc::Status HaiServer::AddUser(grpc::ServerContext* ctx, const hai::AddUserRequest* req,
                                hai::AddUserResponse* resp) {
  return ServeRpc("AddUser", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User caller, Authenticate(*ctx));
    if (!caller.admin()) return PermissionDenied("only admins may add users");
    if (!IsUserName(req->name())) {
      return InvalidArgument(
          "user names are 1-32 of a-z, 0-9, '_' and '-', starting with a letter");
    }
    if (req->node_quota() < 0) return InvalidArgument("the node quota must not be negative");
    FF_ASSIGN_OR_RETURN(std::string token, NewToken());
    std::lock_guard lock(mu_);
    if (users_.contains(req->name())) {
      return AlreadyExists("user " + req->name() + " already exists");
    }
    hai::User user;
    user.set_name(req->name());
    user.set_admin(req->admin());
    user.set_node_quota(req->node_quota());
    user.set_token_sha256(HashToken(token));
    FF_RETURN_IF_ERROR(store_->PutUser(user));
    users_[user.name()] = user;
    user_by_token_[user.token_sha256()] = user.name();
    resp->set_name(user.name());
    resp->set_token(token);
    spdlog::info("user {} added by {}{}", user.name(), caller.name(),
                 user.admin() ? " (admin)" : "");
    return Status::Ok();
  });
}

grpc::Status HaiServer::ListUsers(grpc::ServerContext* ctx, const hai::ListUsersRequest*,
                                  hai::ListUsersResponse* resp) {
  return ServeRpc("ListUsers", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User caller, Authenticate(*ctx));
    if (!caller.admin()) return PermissionDenied("only admins may list users");
    std::lock_guard lock(mu_);
    for (const auto& [name, u] : users_) {
      hai::User* out = resp->add_users();
      *out = u;
      out->clear_token_sha256();
    }
    return Status::Ok();
  });
}

grpc::Status HaiServer::DrainNode(grpc::ServerContext* ctx, const hai::DrainRequest* req,
                                  hai::Node* resp) {
  return ServeRpc("DrainNode", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User caller, Authenticate(*ctx));
    if (!caller.admin()) return PermissionDenied("only admins may drain or undrain nodes");
    if (req->drain() && req->reason().empty()) return InvalidArgument("give a reason to drain");
    if (req->reason().size() > 1024) return InvalidArgument("the reason is over 1024 bytes");
    std::lock_guard lock(mu_);
    auto it = nodes_.find(req->node());
    if (it == nodes_.end()) return NotFound("no node " + req->node() + " in the cluster");
    hai::Node record = it->second.record;
    record.set_drained(req->drain());
    record.set_drain_reason(req->drain() ? req->reason() : "");
    record.set_drained_by(req->drain() ? caller.name() : "");
    FF_RETURN_IF_ERROR(store_->PutNode(record));
    it->second.record = record;
    *resp = record;
    spdlog::info("node {} {} by {}{}", req->node(), req->drain() ? "drained" : "undrained",
                 caller.name(), req->drain() ? ": " + req->reason() : "");
    return Status::Ok();
  });
}

// ---- agents -----------------------------------------------------------------------------------

grpc::Status HaiServer::Heartbeat(grpc::ServerContext* ctx, const hai::HeartbeatRequest* req,
                                  hai::HeartbeatResponse* resp) {
  return ServeRpc("Heartbeat", [&]() -> Status {
    FF_RETURN_IF_ERROR(AuthenticateAgent(*ctx));
    std::unique_lock lock(mu_);
    auto it = nodes_.find(req->node());
    if (it == nodes_.end()) {
      return NotFound("node '" + req->node() + "' is not in " + options_.cluster);
    }
    NodeRuntime& node = it->second;
    node.last_heartbeat = std::chrono::steady_clock::now();
    const bool changed = StateOf(node.record) != NodeState::kUp ||
                         node.record.agent_address() != req->agent_address();
    if (StateOf(node.record) != NodeState::kUp) {
      spdlog::info("node {} is up (agent at {})", req->node(), req->agent_address());
      if (StateOf(node.record) == NodeState::kLost) node.probation_since = node.last_heartbeat;
    }
    node.record.set_state(NodeStateName(NodeState::kUp));
    node.record.set_agent_address(req->agent_address());
    node.record.set_last_heartbeat_ms(NowMs());
    if (!write_failure_.ok()) return write_failure_;
    if (changed)
      FF_RETURN_IF_ERROR(MustPersist(store_->PutNode(node.record), "node " + req->node()));
    node.reported_running.clear();
    for (const hai::TaskStatus& t : req->tasks()) {
      if (!t.exited()) {
        node.reported_running.insert({t.job_id(), t.run(), t.rank()});
        continue;
      }
      auto job = jobs_.find(t.job_id());
      if (job == jobs_.end() || !Active(job->second)) continue;
      const hai::Run& run = job->second.runs(job->second.runs_size() - 1);
      if (run.index() != t.run() || run.exit_codes().count(t.rank()) > 0) continue;
      // Not acknowledged unless durable: the agent reports the exit until it is.
      FF_RETURN_IF_ERROR(RecordExit(job->second, t.rank(), t.exit_code()));
    }
    if (req->wait_ms() > 0 && req->generation() == node.generation) {
      // Nothing new for this node: hold the call until there is, or the wait is over.
      const auto wait = LongPollWait(ctx, std::chrono::milliseconds(std::min<int64_t>(
                                              req->wait_ms(), options_.heartbeat_timeout_ms / 2)));
      ++node.held;
      work_cv_.wait_for(lock, wait, [&] {
        return shutting_down_ || node.generation != req->generation() || ctx->IsCancelled();
      });
      --node.held;
      node.last_heartbeat = std::chrono::steady_clock::now();
    }
    if (!write_failure_.ok()) return write_failure_;  // work decided but not kept: none
    for (hai::Task& t : TasksFor(req->node()))
      *resp->add_tasks() = std::move(t);
    resp->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    resp->set_generation(node.generation);
    return Status::Ok();
  });
}

grpc::Status HaiServer::ReportHealth(grpc::ServerContext* ctx, const hai::HealthReport* req,
                                     hai::HealthReportResponse* resp) {
  return ServeRpc("ReportHealth", [&]() -> Status {
    FF_RETURN_IF_ERROR(AuthenticateAgent(*ctx));
    if (req->checks_size() > 64) return InvalidArgument("over 64 health checks in one report");
    std::string failing;
    for (const hai::HealthCheck& c : req->checks()) {
      if (c.name().empty() || c.name().size() > 64 || c.message().size() > 1024) {
        return InvalidArgument(
            "a health check needs a name (at most 64 bytes) and a message of "
            "at most 1024 bytes");
      }
      if (!c.ok()) failing += (failing.empty() ? "" : "; ") + c.name() + ": " + c.message();
    }
    std::lock_guard lock(mu_);
    auto it = nodes_.find(req->node());
    if (it == nodes_.end()) {
      return NotFound("node '" + req->node() + "' is not in " + options_.cluster);
    }
    hai::Node& current = it->second.record;
    current.mutable_health()->CopyFrom(req->checks());
    current.set_health_report_ms(NowMs());
    // Only a drain hai-health made itself is its to change: an admin's drain stands.
    const bool ours = current.drained() && current.drained_by() == kHealthDrainer;
    std::string reason = failing.empty() ? "" : "health: " + failing;
    if (reason.size() > 1024) reason = reason.substr(0, 1021) + "...";
    hai::Node record = current;
    if (!failing.empty() && (!current.drained() || (ours && current.drain_reason() != reason))) {
      record.set_drained(true);
      record.set_drain_reason(reason);
      record.set_drained_by(kHealthDrainer);
    } else if (failing.empty() && ours) {
      record.set_drained(false);
      record.clear_drain_reason();
      record.clear_drained_by();
    }
    if (record.drained() != current.drained() || record.drain_reason() != current.drain_reason()) {
      FF_RETURN_IF_ERROR(store_->PutNode(record));
      spdlog::info("node {} {} by {}{}", req->node(), record.drained() ? "drained" : "undrained",
                   kHealthDrainer, record.drained() ? ": " + reason : ": every check passes");
      current = record;
    }
    UpdateGauges();
    resp->set_drained(current.drained());
    resp->set_drain_reason(current.drain_reason());
    resp->set_drained_by(current.drained_by());
    return Status::Ok();
  });
}

void HaiServer::Touch(const hai::Job& job) {
  if (job.runs().empty()) return;
  for (const std::string& n : job.runs(job.runs_size() - 1).nodes()) {
    if (auto it = nodes_.find(n); it != nodes_.end()) ++it->second.generation;
  }
  work_cv_.notify_all();
}

std::vector<hai::Task> HaiServer::TasksFor(const std::string& node) const {
  std::vector<hai::Task> tasks;
  for (const auto& [id, job] : jobs_) {
    if (!Active(job)) continue;
    const hai::Run& run = job.runs(job.runs_size() - 1);
    // A stopped job, or a run that is ending (a rank failed, a node was lost): its remaining
    // ranks are killed, and listed until their exits are known, so that an agent that never
    // started one says so instead of leaving the run waiting.
    const bool kill = job.stop_requested() || !run.end_reason().empty();
    const hai::JobSpec& spec = job.spec();
    const int procs = ProcsPerNode(spec);
    for (int i = 0; i < run.nodes_size(); ++i) {
      if (run.nodes(i) != node) continue;
      for (int local = 0; local < procs; ++local) {
        const int rank = i * procs + local;
        if (run.exit_codes().count(rank) > 0) continue;
        hai::Task t;
        t.set_job_id(id);
        t.set_run(run.index());
        t.set_rank(rank);
        t.set_command(spec.command());
        t.set_workdir(spec.workdir().empty() ? "/" : spec.workdir());
        t.set_action(kill                             ? hai::TASK_KILL
                     : job.state() == hai::SUSPENDING ? hai::TASK_SUSPEND
                                                      : hai::TASK_RUN);
        t.set_grace_ms(options_.suspend_grace_ms);
        auto& env = *t.mutable_env();
        for (const auto& [k, v] : spec.env())
          env[k] = v;
        env["HAI_JOB_ID"] = std::to_string(id);
        env["HAI_JOB_NAME"] = spec.name();
        env["HAI_USER"] = job.user();
        env["HAI_NODE"] = node;
        env["HAI_RUN"] = std::to_string(run.index());
        env["HAI_RESTART_COUNT"] = std::to_string(run.index());
        env["HAI_CHECKPOINT_DIR"] =
            options_.checkpoint_root + "/" + job.user() + "/" + std::to_string(id);
        env["RANK"] = std::to_string(rank);
        env["WORLD_SIZE"] = std::to_string(WorldSize(spec));
        env["LOCAL_RANK"] = std::to_string(local);
        env["LOCAL_WORLD_SIZE"] = std::to_string(procs);
        env["NODE_RANK"] = std::to_string(i);
        env["NNODES"] = std::to_string(spec.nodes());
        env["HFREDUCE_NODE_ID"] = std::to_string(i);
        // Other nodes reach this node's ranks at its agent's host (the node's cluster address),
        // which HFReduce's listener binds; a job's own setting wins.
        if (const std::string host = HostOf(nodes_.at(node).record.agent_address());
            !host.empty() && spec.env().count("HFREDUCE_LISTEN_HOST") == 0) {
          env["HFREDUCE_LISTEN_HOST"] = host;
        }
        env["MASTER_ADDR"] = run.master_addr();
        env["MASTER_PORT"] = std::to_string(run.master_port());
        env["CUDA_VISIBLE_DEVICES"] = run.gpus(i);
        tasks.push_back(std::move(t));
      }
    }
  }
  return tasks;
}

Status HaiServer::RecordExit(hai::Job& job, int rank, int code) {
  hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
  (*run.mutable_exit_codes())[rank] = code;
  if (code != 0 && run.end_reason().empty() && job.state() == hai::RUNNING &&
      !job.stop_requested()) {
    // A gang fails as a whole: the other ranks are killed.
    run.set_end_reason("rank " + std::to_string(rank) + " exited with code " +
                       std::to_string(code));
    Touch(job);
  }
  spdlog::info("job {} run {}: rank {} exited with {}", job.id(), run.index(), rank, code);
  FinishRunIfDone(job);
  return MustPersist(Save(job), "job " + std::to_string(job.id()));
}

void HaiServer::EndRun(hai::Job& job, const std::string& reason) {
  hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
  if (run.end_reason().empty() || run.end_reason().find(" lost") == std::string::npos) {
    run.set_end_reason(reason);
  }
}

void HaiServer::FinishRunIfDone(hai::Job& job) {
  hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
  if (run.exit_codes_size() < WorldSize(job.spec())) return;
  const int64_t now = NowMs();
  run.set_end_ms(now);
  const hai::JobSpec& spec = job.spec();
  auto end = [&](hai::JobState state, const std::string& message) {
    job.set_state(state);
    job.set_message(message);
    if (state == hai::SUCCEEDED || state == hai::FAILED || state == hai::STOPPED) {
      job.set_end_ms(now);
      job.set_pending_reason("");
    } else {
      job.set_pending_reason("waiting for the next scheduling round");
    }
    spdlog::info("job {}: {} ({})", job.id(), StateName(state), message);
  };
  bool all_zero = true;
  for (const auto& [rank, code] : run.exit_codes())
    all_zero &= code == 0;
  if (job.stop_requested()) {
    run.set_end_reason("stopped");
    end(hai::STOPPED, "stopped by its user");
  } else if (run.end_reason().find(" lost") != std::string::npos) {
    if (spec.restart_policy() == hai::RESTART_NEVER) {
      end(hai::FAILED, run.end_reason() + "; restart policy is never");
    } else {
      end(hai::QUEUED, "requeued: " + run.end_reason());
    }
  } else if (job.state() == hai::SUSPENDING) {
    if (run.end_reason().empty()) run.set_end_reason("suspended");
    end(hai::SUSPENDED, "suspended; resumes from its checkpoint when it is scheduled");
  } else if (all_zero) {
    run.set_end_reason("exited");
    end(hai::SUCCEEDED, "every rank exited with 0");
  } else if (spec.restart_policy() == hai::RESTART_ON_FAILURE &&
             job.runs_size() - 1 < spec.max_restarts()) {
    end(hai::QUEUED, "requeued: " + run.end_reason());
  } else {
    end(hai::FAILED, run.end_reason());
  }
  {
    std::lock_guard lock(loop_mu_);
    kicked_ = true;
  }
  loop_cv_.notify_all();
}

// ---- the scheduling loop ----------------------------------------------------------------------

void HaiServer::CheckLostNodes() {
  const auto now = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::milliseconds(options_.heartbeat_timeout_ms);
  for (auto& [name, node] : nodes_) {
    if (StateOf(node.record) != NodeState::kUp || now - node.last_heartbeat < timeout) continue;
    node.record.set_state(NodeStateName(NodeState::kLost));
    node.reported_running.clear();
    if (!MustPersist(store_->PutNode(node.record), "node " + name).ok()) return;
    spdlog::warn("node {} is lost: no heartbeat for {} ms", name, options_.heartbeat_timeout_ms);
    for (auto& [id, job] : jobs_) {
      if (!Active(job)) continue;
      hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
      bool here = false;
      for (int i = 0; i < run.nodes_size(); ++i) {
        if (run.nodes(i) != name) continue;
        here = true;
        const int procs = ProcsPerNode(job.spec());
        for (int local = 0; local < procs; ++local) {
          auto& codes = *run.mutable_exit_codes();
          if (codes.count(i * procs + local) == 0) codes[i * procs + local] = kLostExitCode;
        }
      }
      if (!here) continue;
      EndRun(job, "node " + name + " lost");
      Touch(job);
      FinishRunIfDone(job);
      if (!MustPersist(Save(job), "job " + std::to_string(id)).ok()) return;
    }
  }
}

void HaiServer::ScheduleRound() {
  ClusterState state(topology_);
  std::set<std::pair<int64_t, int>> active_runs;
  // Nodes of suspending jobs: the scheduler counts them free (their jobs are leaving, and must
  // not be chosen as victims again), but nothing starts there until the processes are gone.
  std::map<int, int64_t> leaving;  // node index -> a suspending job on it
  for (const auto& [id, job] : jobs_) {
    if (!Active(job)) continue;
    const hai::Run& run = job.runs(job.runs_size() - 1);
    active_runs.insert({id, run.index()});
    if (job.state() == hai::SUSPENDING) {
      for (const std::string& n : run.nodes())
        leaving[topology_.FindNode(n)] = id;
      continue;
    }
    Placement p{{}, job.spec().gpus_per_node()};
    for (const std::string& n : run.nodes())
      p.nodes.push_back(topology_.FindNode(n));
    Status st = state.Allocate(RequestOf(job), p, run.start_ms() / 1000);
    if (!st.ok()) spdlog::error("job {}: cannot account its nodes: {}", id, st.message());
  }
  // A node not heard from for a while, without a heartbeat held open, is not lost yet but gets
  // no new work: a healthy agent calls again as soon as a heartbeat returns, so its silence means
  // a cut cable or a dead agent (when a leaf is cut, its nodes are found lost one by one, and a
  // job requeued from the first must not land on the next).
  const auto now = std::chrono::steady_clock::now();
  const auto silent_after = std::chrono::milliseconds(
      std::min(options_.heartbeat_timeout_ms / 2, 2 * options_.heartbeat_interval_ms));
  for (std::size_t i = 0; i < topology_.nodes().size(); ++i) {
    NodeRuntime& node = nodes_.at(topology_.nodes()[i].name);
    bool lingering = false;  // processes of ended runs still dying there
    for (const auto& [job, run, rank] : node.reported_running)
      lingering |= !active_runs.contains({job, run});
    const bool silent = node.held == 0 && now - node.last_heartbeat > silent_after;
    // A node back from lost is on probation until heard from steadily for the heartbeat timeout:
    // a link that comes back often comes back in fits (TCP's retransmission backoff, a flapping
    // port), and a job started in a fit would fail when the node is found lost again.
    bool probation = false;
    if (node.probation_since) {
      if (silent) node.probation_since = now;
      probation =
          now - *node.probation_since < std::chrono::milliseconds(options_.heartbeat_timeout_ms);
      if (!probation) node.probation_since.reset();
    }
    if (StateOf(node.record) != NodeState::kUp || node.record.drained() || lingering || silent ||
        probation) {
      state.SetDrained(static_cast<int>(i), true);
    }
  }
  std::vector<JobRequest> queue;
  for (const auto& [id, job] : jobs_) {
    if ((job.state() == hai::QUEUED || job.state() == hai::SUSPENDED) && !job.stop_requested()) {
      queue.push_back(RequestOf(job));
    }
  }
  if (queue.empty()) return;
  scheduler::SchedulerOptions sched;
  sched.preemption = options_.preemption;
  sched.backfill = options_.backfill;
  for (const auto& [name, u] : users_) {
    if (u.node_quota() > 0) sched.node_quota[name] = u.node_quota();
  }
  scheduler::Scheduler round(
      scheduler::MakePlacementPolicy(options_.policy, PolicyOptionsOf(options_)), sched);
  scheduler::Decision d = round.Decide(state, queue, NowMs() / 1000);
  std::vector<const hai::Job*> changed;
  const int64_t now_ms = NowMs();
  for (scheduler::JobId v : d.suspends) {
    hai::Job& job = jobs_.at(v);
    job.set_state(hai::SUSPENDING);
    if (auto f = d.suspended_for.find(v); f != d.suspended_for.end()) {
      const int priority = jobs_.at(f->second).spec().priority();
      job.set_preempted_by(f->second);
      job.set_preempted_by_priority(priority);
      job.set_preempted_at_ms(now_ms);
      RecordPending(job, now_ms,
                    "suspended for job " + std::to_string(f->second) + " (priority " +
                        std::to_string(priority) + ")");
    }
    changed.push_back(&job);
    Touch(job);
    for (const std::string& n : job.runs(job.runs_size() - 1).nodes())
      leaving[topology_.FindNode(n)] = v;
    spdlog::info("job {}: suspending it for a higher-priority job", v);
  }
  for (const auto& [id, since] : d.locality_wait_started) {
    hai::Job& job = jobs_.at(id);
    job.set_locality_wait_since_ms(since < 0 ? 0 : since * 1000);  // 0: not begun
    changed.push_back(&job);
  }
  InUse in_use = ComputeInUse();
  for (const scheduler::Decision::Start& s : d.starts) {
    hai::Job& job = jobs_.at(s.job);
    int64_t blocker = -1;
    for (int n : s.placement.nodes) {
      if (auto it = leaving.find(n); it != leaving.end()) blocker = it->second;
    }
    if (blocker >= 0) {
      d.pending[s.job] = "placed; starts once job " + std::to_string(blocker) +
                         " (suspending) has checkpointed and left its nodes";
      continue;
    }
    StartRun(job, s.placement, in_use);
    changed.push_back(&job);
    Touch(job);
  }
  // The round's decisions in one synced write.
  if (!MustPersist(store_->PutJobs(changed), "the scheduling round's decisions").ok()) return;
  for (const auto& [id, reason] : d.pending)
    RecordPending(jobs_.at(id), now_ms, reason);
}

namespace {

// A reason with its numbers blanked: "2 jobs ahead" and "3 jobs ahead", or a start estimate
// counting down, are one entry of the history, not one per round.
std::string Shape(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void HaiServer::RecordPending(hai::Job& job, int64_t now_ms, const std::string& reason) {
  const bool changed =
      job.pending_history_size() == 0 ||
      Shape(job.pending_history(job.pending_history_size() - 1).reason()) != Shape(reason);
  job.set_pending_reason(reason);
  if (!changed) return;
  constexpr int kKept = 20;
  if (job.pending_history_size() >= kKept) {
    job.mutable_pending_history()->DeleteSubrange(0, job.pending_history_size() - kKept + 1);
  }
  hai::PendingEvent* e = job.add_pending_history();
  e->set_time_ms(now_ms);
  e->set_reason(reason);
}

HaiServer::InUse HaiServer::ComputeInUse() const {
  InUse in_use;
  for (const auto& [id, other] : jobs_) {
    if (!Active(other)) continue;
    const hai::Run& run = other.runs(other.runs_size() - 1);
    in_use.ports[run.master_addr()].insert(run.master_port());
    for (int i = 0; i < run.nodes_size(); ++i) {
      std::stringstream ss(run.gpus(i));
      for (std::string g; std::getline(ss, g, ',');)
        in_use.gpus[run.nodes(i)].insert(std::stoi(g));
    }
  }
  return in_use;
}

void HaiServer::StartRun(hai::Job& job, const Placement& placement, InUse& in_use) {
  auto& used_gpus = in_use.gpus;
  auto& used_ports = in_use.ports;
  hai::Run* run = job.add_runs();
  run->set_index(job.runs_size() - 1);
  for (int n : placement.nodes) {
    const scheduler::Node& node = topology_.nodes()[n];
    run->add_nodes(node.name);
    std::string gpus;
    int given = 0;
    for (int g = 0; g < node.gpus && given < placement.gpus_per_node; ++g) {
      if (used_gpus[node.name].contains(g)) continue;
      used_gpus[node.name].insert(g);
      gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
      ++given;
    }
    run->add_gpus(gpus);
  }
  const std::string host = HostOf(nodes_.at(run->nodes(0)).record.agent_address());
  run->set_master_addr(host.empty() ? "127.0.0.1" : host);
  int port = static_cast<int>(options_.master_port_base);
  while (used_ports[run->master_addr()].contains(port))
    ++port;
  used_ports[run->master_addr()].insert(port);
  run->set_master_port(port);
  run->set_start_ms(NowMs());
  job.set_state(hai::RUNNING);
  RecordPending(job, run->start_ms(), "started: run " + std::to_string(run->index()));
  job.set_pending_reason("");
  job.set_preempted_by(0);
  job.set_preempted_by_priority(0);
  job.set_preempted_at_ms(0);
  job.set_locality_wait_since_ms(0);  // if it is suspended later, it waits afresh
  job.set_message("");
  std::string where;
  for (const std::string& n : run->nodes())
    where += (where.empty() ? "" : ",") + n;
  spdlog::info("job {} run {} starts on {}", job.id(), run->index(), where);
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
    ++nodes_by_state[n.record.drained() ? "drained" : n.record.state()];
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

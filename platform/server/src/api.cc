#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/rpc_status.h"
#include "internal.h"
#include "platform/job_metrics.h"
#include "platform/lifecycle.h"
#include "platform/names.h"
#include "platform/server.h"
#include "platform/tokens.h"
#include "store.h"

// The API of researchers and admins: jobs, their logs, nodes, users, drains.
namespace ff::platform {
namespace {

constexpr int kMaxNameBytes = 128;
constexpr std::size_t kMaxCommandBytes = 64 * 1024;
constexpr std::size_t kMaxEnvEntries = 256;
constexpr std::size_t kMaxEnvValueBytes = 64 * 1024;
constexpr std::size_t kMaxPathBytes = 4096;
constexpr int kMaxProcsPerNode = 64;
constexpr int kMaxReplicas = 1024;  // replica groups of a fault-tolerant job

}  // namespace

using server_internal::IsEnvName;
using server_internal::IsUserName;

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
  if (spec.replicas() < 0 || spec.replicas() > kMaxReplicas) {
    return InvalidArgument("replicas must be 0 (one gang) or 1.." + std::to_string(kMaxReplicas) +
                           " (got " + std::to_string(spec.replicas()) + ")");
  }
  if (spec.min_replicas() < 0 || spec.min_replicas() > std::max(spec.replicas(), 0) ||
      (spec.min_replicas() > 0 && spec.replicas() == 0)) {
    return InvalidArgument("min replicas must be 1..replicas, and only with replicas (got " +
                           std::to_string(spec.min_replicas()) + " of " +
                           std::to_string(spec.replicas()) + ")");
  }
  const int64_t total_nodes =
      static_cast<int64_t>(spec.nodes()) * (spec.replicas() > 0 ? spec.replicas() : 1);
  if (total_nodes > static_cast<int64_t>(topology_.nodes().size())) {
    return InvalidArgument("asks for " + std::to_string(total_nodes) + " nodes" +
                           (spec.replicas() > 0
                                ? " (" + std::to_string(spec.replicas()) + " replica groups of " +
                                      std::to_string(spec.nodes()) + ")"
                                : std::string()) +
                           "; the cluster has " + std::to_string(topology_.nodes().size()));
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
  scheduler::ClusterState empty(topology_);
  std::string why;
  if (scheduler_->policy().Place(RequestOf(probe), empty, &why).empty()) {
    return InvalidArgument("can never run on this cluster: " + why);
  }
  return Status::Ok();
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
  MutexLock lock(&mu_);
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
    Kick();
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
    MutexLock lock(&mu_);
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
    MutexLock lock(&mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    *resp = *job;
    return Status::Ok();
  });
}

grpc::Status HaiServer::StopJob(grpc::ServerContext* ctx, const hai::JobRef* req, hai::Job* resp) {
  return ServeRpc("StopJob", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    MutexLock lock(&mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    FF_RETURN_IF_ERROR(ApplyEvent(*job, StopRequested{user.name()}, OnWriteFailure::kReturnError));
    *resp = *job;
    return Status::Ok();
  });
}

grpc::Status HaiServer::SuspendJob(grpc::ServerContext* ctx, const hai::JobRef* req,
                                   hai::Job* resp) {
  return ServeRpc("SuspendJob", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    MutexLock lock(&mu_);
    FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
    FF_RETURN_IF_ERROR(ApplyEvent(*job, SuspendRequested{user.name(), SuspendGraceMs(*job)},
                                  OnWriteFailure::kReturnError));
    *resp = *job;
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
      MutexLock lock(&mu_);
      FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
      if (job->runs().empty()) {
        return FailedPrecondition("job " + std::to_string(job->id()) +
                                  " has not started yet: no logs");
      }
      const hai::Run& run = job->runs(job->runs_size() - 1);
      // (A fault-tolerant run's replacement groups have ranks past WorldSize.)
      const int ranks = run.nodes_size() * ProcsPerNode(job->spec());
      if (req->rank() < 0 || req->rank() >= ranks) {
        return InvalidArgument("job " + std::to_string(job->id()) + " has ranks 0.." +
                               std::to_string(ranks - 1));
      }
      run_index = run.index();
      const std::string& node = run.nodes(req->rank() / ProcsPerNode(job->spec()));
      agent = nodes_.at(node).record.agent_address();
      if (agent.empty()) return Unavailable("node " + node + " has no agent address");
    }
    std::string token = ReadTokenFile(options_.agent_token_file, false).value_or("");
    auto channel = MakeChannel(agent);
    auto stub = hai::HaiAgent::NewStub(channel);
    int64_t offset = std::max<int64_t>(0, req->offset());
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
        MutexLock lock(&mu_);
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

grpc::Status HaiServer::ReadMetrics(grpc::ServerContext* ctx, const hai::MetricsRequest* req,
                                    hai::JobMetrics* resp) {
  return ServeRpc("ReadMetrics", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    if (req->max_points() < 0 || req->max_points() > 100000) {
      return InvalidArgument("max_points is 1..100000 (0: 2000)");
    }
    // The rank's metrics file is on each node that ran it: each node once, in the order of runs.
    std::vector<std::pair<std::string, std::string>> holders;  // node, agent address
    {
      MutexLock lock(&mu_);
      FF_ASSIGN_OR_RETURN(hai::Job * job, OwnJob(user, req->id()));
      if (job->runs().empty()) {
        return FailedPrecondition("job " + std::to_string(job->id()) +
                                  " has not started yet: no metrics");
      }
      const int per_node = ProcsPerNode(job->spec());
      int ranks = 0;
      for (const hai::Run& run : job->runs()) {
        // (A fault-tolerant run's replacement groups have ranks past WorldSize.)
        ranks = std::max(ranks, run.nodes_size() * per_node);
        if (req->rank() < 0 || req->rank() >= run.nodes_size() * per_node) continue;
        const std::string& node = run.nodes(req->rank() / per_node);
        if (std::any_of(holders.begin(), holders.end(),
                        [&](const auto& h) { return h.first == node; })) {
          continue;
        }
        auto known = nodes_.find(node);
        holders.emplace_back(node,
                             known == nodes_.end() ? "" : known->second.record.agent_address());
      }
      if (holders.empty()) {
        return InvalidArgument("job " + std::to_string(job->id()) + " has ranks 0.." +
                               std::to_string(ranks - 1));
      }
    }
    std::string token = ReadTokenFile(options_.agent_token_file, false).value_or("");
    MetricThinner thinner(req->max_points() == 0 ? 2000 : static_cast<size_t>(req->max_points()));
    for (const auto& [node, agent] : holders) {
      if (agent.empty()) {
        resp->add_unreachable(node);
        continue;
      }
      auto stub = hai::HaiAgent::NewStub(MakeChannel(agent));
      hai::ReadMetricsRequest r;
      r.set_job_id(req->id());
      r.set_rank(req->rank());
      r.set_max_bytes(4 << 20);
      r.set_steps(req->steps());
      for (;;) {
        hai::ReadMetricsResponse chunk;
        Status st = CallRpc("hai-agent ReadMetrics", CallOptions::Idempotent(),
                            [&](grpc::ClientContext* c) {
                              SetBearerToken(c, token);
                              return stub->ReadMetrics(c, r, &chunk);
                            });
        if (!st.ok()) {
          spdlog::warn("job {} rank {}: metrics on {} unread: {}", req->id(), req->rank(), node,
                       st.message());
          resp->add_unreachable(node);
          break;
        }
        for (auto& record : *chunk.mutable_records())
          thinner.Add(std::move(record));
        resp->set_unreadable(resp->unreadable() + chunk.unreadable());
        if (!chunk.more() || chunk.next_offset() <= r.offset() || ctx->IsCancelled()) break;
        r.set_offset(chunk.next_offset());
      }
    }
    resp->set_reported(thinner.seen());
    std::vector<hai::MetricRecord> records = std::move(thinner).Take();
    // Nodes are read one after another; a rank that came back to a node has runs in two files.
    std::stable_sort(records.begin(), records.end(),
                     [](const auto& a, const auto& b) { return a.run() < b.run(); });
    for (auto& record : records)
      *resp->add_records() = std::move(record);
    return Status::Ok();
  });
}

// ---- nodes and users --------------------------------------------------------------------------

grpc::Status HaiServer::ListNodes(grpc::ServerContext* ctx, const hai::ListNodesRequest*,
                                  hai::ListNodesResponse* resp) {
  return ServeRpc("ListNodes", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(hai::User user, Authenticate(*ctx));
    (void)user;
    MutexLock lock(&mu_);
    std::map<std::string, std::vector<int64_t>> jobs_on;
    for (const auto& [id, job] : jobs_) {
      if (!Active(job)) continue;
      for (const std::string& n : HeldNodes(job))
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
    MutexLock lock(&mu_);
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
    MutexLock lock(&mu_);
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
    MutexLock lock(&mu_);
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
    if (req->drain()) return EvictReplicaGroups(req->node(), req->reason());
    return Status::Ok();
  });
}

}  // namespace ff::platform

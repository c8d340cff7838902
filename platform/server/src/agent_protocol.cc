#include <spdlog/spdlog.h>

#include "common/rpc_server.h"
#include "common/rpc_status.h"
#include "internal.h"
#include "platform/lifecycle.h"
#include "platform/names.h"
#include "platform/server.h"
#include "platform/tokens.h"
#include "store.h"

// The agents' protocol: heartbeats (exits in, tasks out, held open as a long poll) and health
// reports.
namespace ff::platform {

using server_internal::HostOf;

// ---- agents -----------------------------------------------------------------------------------

grpc::Status HaiServer::Heartbeat(grpc::ServerContext* ctx, const hai::HeartbeatRequest* req,
                                  hai::HeartbeatResponse* resp) {
  return ServeRpc("Heartbeat", [&]() -> Status {
    FF_RETURN_IF_ERROR(AuthenticateAgent(*ctx));
    UniqueLock lock(&mu_);
    auto it = nodes_.find(req->node());
    if (it == nodes_.end()) {
      return NotFound("node '" + req->node() + "' is not in " + options_.cluster);
    }
    NodeRuntime& node = it->second;
    node.last_heartbeat = std::chrono::steady_clock::now();
    const bool changed =
        node.record.state() != hai::NODE_UP || node.record.agent_address() != req->agent_address();
    if (node.record.state() != hai::NODE_UP) {
      spdlog::info("node {} is up (agent at {})", req->node(), req->agent_address());
      if (node.record.state() == hai::NODE_LOST) node.probation_since = node.last_heartbeat;
    }
    node.record.set_state(hai::NODE_UP);
    node.record.set_agent_address(req->agent_address());
    node.record.set_last_heartbeat_ms(NowMs());
    if (!write_failure_.ok()) return write_failure_;
    if (changed)
      FF_RETURN_IF_ERROR(MustPersist(store_->PutNode(node.record), "node " + req->node()));
    // Checkpoints before exits: a suspended job's save is reported with the exit that follows it.
    FF_RETURN_IF_ERROR(TakeCheckpoints(*req));
    node.reported_running.clear();
    for (const hai::TaskStatus& t : req->tasks()) {
      if (!t.exited()) {
        node.reported_running.insert({t.job_id(), t.run(), t.rank()});
        continue;
      }
      auto job = jobs_.find(t.job_id());
      if (job == jobs_.end()) continue;
      // Not acknowledged unless durable: the agent reports the exit until it is. (An exit of an
      // older run, or one already known, changes nothing.)
      FF_RETURN_IF_ERROR(ApplyEvent(job->second, RankExited{t.run(), t.rank(), t.exit_code()},
                                    OnWriteFailure::kStopServer));
    }
    TakeStepSummaries(*req);
    TakeSlotAsks(*req);
    AdmitCheckpoints(NowMs());
    if (req->wait_ms() > 0 && req->generation() == node.generation && SlotGrants(*req).empty()) {
      // Nothing new for this node: hold the call until there is, or the wait is over.
      const auto wait = LongPollWait(ctx, std::chrono::milliseconds(std::min<int64_t>(
                                              req->wait_ms(), options_.heartbeat_timeout_ms / 2)));
      ++node.held;
      work_cv_.wait_for(lock, wait, [&] {
        mu_.AssertHeld();
        return shutting_down_ || !loaded_ || node.generation != req->generation() ||
               ctx->IsCancelled();
      });
      --node.held;
      node.last_heartbeat = std::chrono::steady_clock::now();
      FF_RETURN_IF_ERROR(Leading());  // deposed while waiting: what it would say may be stale
    }
    if (!write_failure_.ok()) return write_failure_;  // work decided but not kept: none
    for (hai::Task& t : TasksFor(req->node()))
      *resp->add_tasks() = std::move(t);
    for (hai::CheckpointSlotGrant& g : SlotGrants(*req))
      *resp->add_slot_grants() = std::move(g);
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
    MutexLock lock(&mu_);
    auto it = nodes_.find(req->node());
    if (it == nodes_.end()) {
      return NotFound("node '" + req->node() + "' is not in " + options_.cluster);
    }
    hai::Node& current = it->second.record;
    current.mutable_health()->CopyFrom(req->checks());
    current.set_health_report_ms(NowMs());
    // Only a drain hai-health made itself is its to change: an admin's drain stands. A straggler
    // drain is lifted by a validator that ran after it, with every check passing.
    const bool ours = current.drained() && current.drained_by() == kHealthDrainer;
    const bool validated =
        failing.empty() &&
        std::any_of(req->checks().begin(), req->checks().end(), [&](const hai::HealthCheck& c) {
          return (c.name() == "memory-bandwidth" || c.name() == "hfreduce-loopback") &&
                 c.time_ms() > current.drained_ms();
        });
    if (current.drained() && current.drained_by() == kStragglerDrainer && validated) {
      hai::Node record = current;
      record.set_drained(false);
      record.clear_drain_reason();
      record.clear_drained_by();
      record.set_suspect(false);
      record.clear_suspect_reason();
      FF_RETURN_IF_ERROR(store_->PutNode(record));
      spdlog::info("node {} undrained: its validators passed after its straggler drain",
                   req->node());
      current = record;
      it->second.straggler_findings.clear();
    }
    std::string reason = failing.empty() ? "" : "health: " + failing;
    if (reason.size() > 1024) reason = reason.substr(0, 1021) + "...";
    hai::Node record = current;
    if (!failing.empty() && (!current.drained() || (ours && current.drain_reason() != reason))) {
      record.set_drained(true);
      record.set_drain_reason(reason);
      record.set_drained_by(kHealthDrainer);
      record.set_drained_ms(NowMs());
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
      if (record.drained()) FF_RETURN_IF_ERROR(EvictReplicaGroups(req->node(), reason));
    }
    UpdateGauges();
    resp->set_drained(current.drained());
    resp->set_drain_reason(current.drain_reason());
    resp->set_drained_by(current.drained_by());
    return Status::Ok();
  });
}

std::vector<hai::Task> HaiServer::TasksFor(const std::string& node) const {
  std::vector<hai::Task> tasks;
  for (const auto& [id, job] : jobs_) {
    if (!Active(job)) continue;
    const hai::Run& run = job.runs(job.runs_size() - 1);
    // A stopped job, or a run that is ending (a rank failed, a node was lost): its remaining
    // ranks are killed, and listed until their exits are known, so that an agent that never
    // started one says so instead of leaving the run waiting.
    const bool kill = job.stop_requested() || RunEnding(run);
    const hai::JobSpec& spec = job.spec();
    const int procs = ProcsPerNode(spec);
    for (int i : HeldNodeSlots(job)) {
      if (run.nodes(i) != node) continue;
      // A fault-tolerant job's ranks are numbered within their replica group, which has its own
      // master; a gang is one group of every node.
      const hai::ReplicaGroup* group = nullptr;
      if (FaultTolerant(spec)) {
        const int g = GroupOfNode(run, spec, i);
        if (g < 0) continue;
        group = &run.groups(g);
      }
      const int first_node = group ? group->first_node() : 0;
      const int group_nodes = group ? spec.nodes() : run.nodes_size();
      for (int local = 0; local < procs; ++local) {
        const int rank = i * procs + local;
        if (run.exit_codes().count(rank) > 0) continue;
        hai::Task t;
        t.set_job_id(id);
        t.set_run(run.index());
        t.set_rank(rank);
        t.set_command(spec.command());
        t.set_workdir(spec.workdir().empty() ? "/" : spec.workdir());
        t.set_action(kill || (group && !Live(*group)) ? hai::TASK_KILL
                     : job.state() == hai::SUSPENDING ? hai::TASK_SUSPEND
                                                      : hai::TASK_RUN);
        t.set_grace_ms(run.suspend_grace_ms() > 0 ? run.suspend_grace_ms()
                                                  : options_.suspend_grace_ms);
        auto& env = *t.mutable_env();
        for (const auto& [k, v] : spec.env())
          env[k] = v;
        env["HAI_JOB_ID"] = std::to_string(id);
        env["HAI_JOB_NAME"] = spec.name();
        env["HAI_USER"] = job.user();
        env["HAI_NODE"] = node;
        // Where the node sits ("zone/leaf"): HFReduce builds its trees leaf by leaf.
        if (const int index = topology_.FindNode(node); index >= 0) {
          env["HAI_LEAF"] = topology_.LeafPath(index);
        }
        env["HAI_RUN"] = std::to_string(run.index());
        env["HAI_RESTART_COUNT"] = std::to_string(run.index());
        // 0: checkpoints are not staggered, and a job does not ask.
        env["HAI_CKPT_MAX_DELAY_S"] = std::to_string(
            options_.checkpoint_write_gbps > 0 ? options_.checkpoint_max_delay_ms / 1000.0 : 0.0);
        env["HAI_CHECKPOINT_DIR"] =
            options_.checkpoint_root + "/" + job.user() + "/" + std::to_string(id);
        env["RANK"] = std::to_string(rank - first_node * procs);
        env["WORLD_SIZE"] = std::to_string(group_nodes * procs);
        env["LOCAL_RANK"] = std::to_string(local);
        env["LOCAL_WORLD_SIZE"] = std::to_string(procs);
        env["NODE_RANK"] = std::to_string(i - first_node);
        env["NNODES"] = std::to_string(group_nodes);
        env["HFREDUCE_NODE_ID"] = std::to_string(i - first_node);
        // Other nodes reach this node's ranks at its agent's host (the node's cluster address),
        // which HFReduce's listener binds; a job's own setting wins.
        if (const std::string host = HostOf(nodes_.at(node).record.agent_address());
            !host.empty() && spec.env().count("HFREDUCE_LISTEN_HOST") == 0) {
          env["HFREDUCE_LISTEN_HOST"] = host;
        }
        env["MASTER_ADDR"] = group ? group->master_addr() : run.master_addr();
        env["MASTER_PORT"] = std::to_string(group ? group->master_port() : run.master_port());
        env["CUDA_VISIBLE_DEVICES"] = run.gpus(i);
        // haiscale.ft: the run's list (a replacement started by a later leader gets the same)
        const std::string& ft_store = run.ft_store().empty() ? quorum_address_ : run.ft_store();
        if (!ft_store.empty()) env["HAI_FT_STORE"] = ft_store;
        if (group) {
          env["HAI_REPLICA_ID"] = std::to_string(group->replica());
          // The group's name in the quorum: a replacement's differs from the group it replaces,
          // which may still run where its node was cut off.
          env["HAI_REPLICA_GROUP"] = GroupName(*group);
          env["HAI_REPLICAS"] = std::to_string(spec.replicas());
          env["HAI_MIN_REPLICAS"] = std::to_string(MinReplicas(spec));
        }
        tasks.push_back(std::move(t));
      }
    }
  }
  return tasks;
}

}  // namespace ff::platform

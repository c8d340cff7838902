#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <sstream>

#include "common/rpc_status.h"
#include "hfreduce/store.h"
#include "internal.h"
#include "platform/lifecycle.h"
#include "platform/names.h"
#include "platform/server.h"
#include "platform/tokens.h"
#include "store.h"

// The scheduling loop: lost nodes, then a round of the scheduler library over the queue.
namespace ff::platform {

using scheduler::ClusterState;
using scheduler::JobRequest;
using scheduler::Placement;
using server_internal::HostOf;

JobRequest HaiServer::RequestOf(const hai::Job& job) const {
  const hai::JobSpec& spec = job.spec();
  JobRequest r;
  r.id = job.id();
  r.user = job.user();
  r.priority = spec.priority();
  r.nodes = NodesAsked(spec);
  if (FaultTolerant(spec)) {
    // Replica groups: it may start with min_replicas of them; the others, and replacements of
    // lost ones, start in later rounds (GroupsAskedFor).
    r.node_step = spec.nodes();
    r.min_nodes = MinReplicas(spec) * spec.nodes();
    r.max_replacements = MaxReplacements(spec);
  }
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
  // What suspending it costs: its checkpoints' write time, as it last reported one (a resumed run
  // writes as its last run did until it reports again).
  for (int i = job.runs_size() - 1; i >= 0; --i) {
    if (job.runs(i).checkpoint().ranks() == 0) continue;
    r.checkpoint_s = static_cast<scheduler::Seconds>(std::ceil(job.runs(i).checkpoint().write_s()));
    r.checkpoint_s = std::max<scheduler::Seconds>(1, r.checkpoint_s);
    break;
  }
  return r;
}

// ---- the scheduling loop ----------------------------------------------------------------------

void HaiServer::CheckLostNodes() {
  const auto now = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::milliseconds(options_.heartbeat_timeout_ms);
  for (auto& [name, node] : nodes_) {
    if (node.record.state() != hai::NODE_UP || now - node.last_heartbeat < timeout) continue;
    node.record.set_state(hai::NODE_LOST);
    node.reported_running.clear();
    if (!MustPersist(store_->PutNode(node.record), "node " + name).ok()) return;
    spdlog::warn("node {} is lost: no heartbeat for {} ms", name, options_.heartbeat_timeout_ms);
    for (auto& [id, job] : jobs_) {
      if (!Active(job)) continue;  // (Apply would leave it unchanged, after copying it)
      if (!ApplyEvent(job, NodeLost{name}, OnWriteFailure::kStopServer).ok()) return;
    }
  }
}

Status HaiServer::EvictReplicaGroups(const std::string& node, const std::string& reason) {
  for (auto& [id, job] : jobs_) {
    if (!Active(job) || !FaultTolerant(job.spec())) continue;
    FF_RETURN_IF_ERROR(ApplyEvent(job, NodeDrained{node, reason}, OnWriteFailure::kStopServer));
  }
  return Status::Ok();
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
    const std::vector<std::string> held = HeldNodes(job);
    if (job.state() == hai::SUSPENDING) {
      for (const std::string& n : held)
        leaving[topology_.FindNode(n)] = id;
      continue;
    }
    if (held.empty()) continue;  // (a fault-tolerant run between its groups)
    Placement p{{}, job.spec().gpus_per_node()};
    for (const std::string& n : held)
      p.nodes.push_back(topology_.FindNode(n));
    Status st = state.Allocate(RequestOf(job), p, run.start_ms() / 1000);
    if (!st.ok()) spdlog::error("job {}: cannot account its nodes: {}", id, st.message());
    // Work before its run's last checkpoint survives a suspension (a run starts from one).
    if (st.ok() && run.checkpoint().ranks() > 0) {
      (void)state.SetLastCheckpoint(id,
                                    std::max(run.start_ms(), run.checkpoint().time_ms()) / 1000);
    }
  }
  // A node not heard from for a while, without a heartbeat held open, is not lost yet but gets
  // no new work: a healthy agent calls again as soon as a heartbeat returns, so its silence means
  // a cut cable or a dead agent (when a leaf is cut, its nodes are found lost one by one, and a
  // job requeued from the first must not land on the next).
  const auto now = std::chrono::steady_clock::now();
  const auto silent_after = std::chrono::milliseconds(
      std::min(options_.heartbeat_timeout_ms / 2, 2 * options_.heartbeat_interval_ms));
  std::vector<int> unusable;
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
    if (node.record.state() != hai::NODE_UP || node.record.drained() || lingering || silent ||
        probation) {
      unusable.push_back(static_cast<int>(i));
    }
  }
  std::vector<const hai::Job*> changed;
  const int64_t now_ms = NowMs();
  // The round's transitions are applied in memory, then written in one synced batch (a failed
  // write stops the server: MustPersist).
  auto apply = [&](hai::Job& job, const JobEvent& event) {
    mu_.AssertHeld();  // run below, in this round
    Result<Transition> t = Apply(job, event, now_ms);
    if (!t.ok()) {  // the scheduler decided on a job in another state: a bug, not the job's end
      spdlog::error("job {}: {}", job.id(), t.status().message());
      return false;
    }
    job = std::move(t->job);
    changed.push_back(&job);
    if (!t->log.empty()) spdlog::info("{}", t->log);
    for (const std::string& n : t->wake) {
      if (auto it = nodes_.find(n); it != nodes_.end()) ++it->second.generation;
    }
    work_cv_.notify_all();
    return true;
  };
  // What the quorums of fault-tolerant jobs saw (groups forming, leaving, joining at a step),
  // into their current runs through the lifecycle (QuorumChanged).
  if (quorum_server_) {
    for (auto& [id, job] : jobs_) {
      if (!Active(job) || !FaultTolerant(job.spec())) continue;
      uint64_t& seen = quorum_events_seen_[id];
      for (hfreduce::QuorumEvent& e : quorum_server_->quorum().Events(std::to_string(id), seen)) {
        seen = e.seq;
        Result<Transition> t = Apply(job, QuorumChanged{std::move(e)}, now_ms);
        if (t.ok() && t->changed) {
          job = std::move(t->job);
          changed.push_back(&job);
        }
      }
    }
  }
  InUse in_use = ComputeInUse();
  for (int i : unusable)
    state.SetDrained(i, true);
  // The queue: queued and suspended jobs, and running fault-tolerant jobs' missing groups.
  std::vector<JobRequest> queue;
  for (const auto& [id, job] : jobs_) {
    if ((job.state() == hai::QUEUED || job.state() == hai::SUSPENDED) && !job.stop_requested()) {
      queue.push_back(RequestOf(job));
    } else if (std::optional<JobRequest> groups = GroupsAskedFor(job)) {
      queue.push_back(std::move(*groups));
    }
  }
  scheduler::Decision d;
  if (!queue.empty()) {
    scheduler::SchedulerOptions sched = SchedulerOptionsOf(options_);
    for (const auto& [name, u] : users_) {
      if (u.node_quota() > 0) sched.node_quota[name] = u.node_quota();
    }
    scheduler::Scheduler round(
        scheduler::MakePlacementPolicy(options_.policy, PolicyOptionsOf(options_)), sched);
    d = round.Decide(state, queue, now_ms / 1000);
  }
  for (scheduler::JobId v : d.suspends) {
    hai::Job& job = jobs_.at(v);
    Preempted event;
    if (auto f = d.suspended_for.find(v); f != d.suspended_for.end()) {
      event.for_job = f->second;
      event.for_priority = jobs_.at(f->second).spec().priority();
    }
    if (auto w = d.suspend_reasons.find(v); w != d.suspend_reasons.end()) event.why = w->second;
    event.grace_ms = SuspendGraceMs(job);
    if (!apply(job, event)) continue;
    for (const std::string& n : HeldNodes(job))
      leaving[topology_.FindNode(n)] = v;
  }
  for (const auto& [id, since] : d.locality_wait_started) {
    hai::Job& job = jobs_.at(id);
    job.set_locality_wait_since_ms(since < 0 ? 0 : since * 1000);  // 0: not begun
    changed.push_back(&job);
  }
  // Nodes a suspending job still holds: what is placed there starts in a later round.
  auto blocker_of = [&](const Placement& p) -> int64_t {
    for (int n : p.nodes) {
      if (auto it = leaving.find(n); it != leaving.end()) return it->second;
    }
    return -1;
  };
  for (const scheduler::Decision::Start& s : d.starts) {
    hai::Job& job = jobs_.at(s.job);
    if (const int64_t blocker = blocker_of(s.placement); blocker >= 0) {
      d.pending[s.job] = "placed; starts once job " + std::to_string(blocker) +
                         " (suspending) has checkpointed and left its nodes";
      continue;
    }
    hai::Run run = PlaceRun(job.spec(), s.placement, in_use);
    if (FaultTolerant(job.spec())) run.set_ft_store(quorum_address_);
    (void)apply(job, Started{std::move(run)});
  }
  for (const scheduler::Decision::GroupStart& g : d.group_starts) {
    if (blocker_of(g.placement) >= 0) continue;  // next round
    StartGroup(jobs_.at(g.job), g, in_use, apply);
  }
  // Why missing groups wait, into their runs' events (once, not every round). Not while a lost
  // group's own ranks are still leaving: their nodes are the likely place, and waiting for them
  // is not news.
  for (const auto& [id, waiting] : d.groups_waiting) {
    hai::Job& job = jobs_.at(id);
    hai::Run& run = *job.mutable_runs(job.runs_size() - 1);
    if (std::any_of(run.groups().begin(), run.groups().end(), [](const hai::ReplicaGroup& g) {
          return StateOf(g) == GroupState::kLeaving;
        })) {
      continue;
    }
    for (const auto& [replica, text] : waiting) {
      if (run.events_size() > 0 && run.events(run.events_size() - 1).text() == text) continue;
      AddRunEvent(run, now_ms, text);
      spdlog::info("job {}: {}", id, text);
      changed.push_back(&job);
    }
  }
  if (changed.empty() && d.pending.empty()) return;
  // The round's decisions in one synced write.
  if (!MustPersist(store_->PutJobs(changed), "the scheduling round's decisions").ok()) return;
  for (const auto& [id, reason] : d.pending)
    RecordPending(jobs_.at(id), now_ms, reason);
}

Status HaiServer::CheckQuorumRequest(hfreduce::QuorumRequest& request) {
  int64_t id = 0;
  const char* end = request.job.data() + request.job.size();
  if (auto [at, ec] = std::from_chars(request.job.data(), end, id);
      ec != std::errc() || at != end || id <= 0) {
    return NotFound("quorum: hai-server has no job '" + request.job +
                    "' (a fault-tolerant job's quorum is named by its HAI_JOB_ID)")
        .WithReason(kUnknownJob);
  }
  MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return NotFound("quorum: hai-server has no job " + request.job).WithReason(kUnknownJob);
  }
  const hai::Job& job = it->second;
  if (!FaultTolerant(job.spec())) {
    return FailedPrecondition("quorum: job " + request.job +
                              " is not fault tolerant (it was not submitted with --replicas)")
        .WithReason(kUnknownJob);
  }
  std::string live;
  bool found = false;
  if (Active(job)) {
    for (const hai::ReplicaGroup& g : job.runs(job.runs_size() - 1).groups()) {
      if (!Live(g)) continue;
      live += (live.empty() ? "" : ",") + GroupName(g);
      found |= GroupName(g) == request.replica_id;
    }
  }
  if (!found) {
    return FailedPrecondition("quorum: group " + request.replica_id +
                              " is not a live replica group of job " + request.job + " (" +
                              (Active(job) ? "live: " + (live.empty() ? "none" : live)
                                           : "the job is " + hai::JobState_Name(job.state())) +
                              ")")
        .WithReason(kGroupNotLive, {{"live", live}});
  }
  request.replicas = job.spec().replicas();
  request.min_replicas = MinReplicas(job.spec());
  return Status::Ok();
}

std::optional<JobRequest> HaiServer::GroupsAskedFor(const hai::Job& job) const {
  const hai::JobSpec& spec = job.spec();
  if (!FaultTolerant(spec) || job.state() != hai::RUNNING || job.stop_requested()) return {};
  const hai::Run& run = job.runs(job.runs_size() - 1);
  if (RunEnding(run)) return {};
  JobRequest request = RequestOf(job);
  const std::set<int> started = StartedReplicas(run);
  for (const hai::ReplicaGroup& g : run.groups()) {
    if (g.finished()) return {};  // the training is over: nothing is replaced any more
  }
  for (int replica = 0; replica < spec.replicas(); ++replica) {
    scheduler::MissingGroup missing;
    missing.replica = replica;
    missing.lost = started.contains(replica);
    bool live = false;
    for (const hai::ReplicaGroup& g : run.groups()) {
      if (g.replica() != replica) continue;
      live |= Live(g);
      if (g.end_ms() == 0) continue;
      // (Rounded so that a wait in whole seconds is never shorter than asked.)
      const int64_t end_s = (g.end_ms() + 999) / 1000;
      missing.last_end = std::max(missing.last_end, end_s);
      if (g.incarnation() > 0) missing.ended_replacements.emplace_back(g.start_ms() / 1000, end_s);
    }
    if (!live) request.missing_groups.push_back(std::move(missing));
  }
  if (request.missing_groups.empty()) return {};
  for (const std::string& n : run.straggler_nodes()) {
    if (const int index = topology_.FindNode(n); index >= 0) request.avoid_nodes.push_back(index);
  }
  // Replacements placed so far (the groups the run began without are not replacements).
  request.replacements_placed = run.groups_size() - static_cast<int>(started.size());
  return request;
}

void HaiServer::StartGroup(hai::Job& job, const scheduler::Decision::GroupStart& start,
                           InUse& in_use,
                           const std::function<bool(hai::Job&, const JobEvent&)>& apply) {
  GroupStarted event;
  event.run = job.runs(job.runs_size() - 1).index();
  event.group.set_replica(start.replica);
  for (int n : start.placement.nodes) {
    const std::string& name = topology_.nodes()[n].name;
    event.nodes.push_back(name);
    event.gpus.push_back(TakeGpus(name, start.placement.gpus_per_node, in_use));
  }
  auto [addr, port] = TakeMaster(event.nodes[0], in_use);
  event.group.set_master_addr(addr);
  event.group.set_master_port(port);
  (void)apply(job, event);
}

HaiServer::InUse HaiServer::ComputeInUse() const {
  InUse in_use;
  for (const auto& [id, other] : jobs_) {
    if (!Active(other)) continue;
    const hai::Run& run = other.runs(other.runs_size() - 1);
    in_use.ports[run.master_addr()].insert(run.master_port());
    // Every group's, also a lost one's: a group lost with its node may live on there, cut off,
    // holding its port (a replacement never reuses it while the run lasts).
    for (const hai::ReplicaGroup& g : run.groups())
      in_use.ports[g.master_addr()].insert(g.master_port());
    for (int i : HeldNodeSlots(other)) {
      std::stringstream ss(run.gpus(i));
      for (std::string g; std::getline(ss, g, ',');)
        in_use.gpus[run.nodes(i)].insert(std::stoi(g));
    }
  }
  return in_use;
}

std::string HaiServer::TakeGpus(const std::string& node_name, int count, InUse& in_use) const {
  const scheduler::Node& node = topology_.nodes()[topology_.FindNode(node_name)];
  std::set<int>& used = in_use.gpus[node_name];
  std::string gpus;
  int given = 0;
  for (int g = 0; g < node.gpus && given < count; ++g) {
    if (used.contains(g)) continue;
    used.insert(g);
    gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    ++given;
  }
  return gpus;
}

std::pair<std::string, int> HaiServer::TakeMaster(const std::string& first_node,
                                                  InUse& in_use) const {
  std::string host = HostOf(nodes_.at(first_node).record.agent_address());
  if (host.empty()) host = "127.0.0.1";
  std::set<int>& used = in_use.ports[host];
  int port = static_cast<int>(options_.master_port_base);
  while (used.contains(port))
    ++port;
  used.insert(port);
  return {host, port};
}

hai::Run HaiServer::PlaceRun(const hai::JobSpec& spec, const Placement& placement,
                             InUse& in_use) const {
  hai::Run run;
  for (int n : placement.nodes) {
    const std::string& name = topology_.nodes()[n].name;
    run.add_nodes(name);
    run.add_gpus(TakeGpus(name, placement.gpus_per_node, in_use));
  }
  auto [addr, port] = TakeMaster(run.nodes(0), in_use);
  run.set_master_addr(addr);
  run.set_master_port(port);
  if (FaultTolerant(spec)) {
    // (An elastic start has fewer groups than replicas: the others are added as nodes free.)
    const int groups = static_cast<int>(placement.nodes.size()) / spec.nodes();
    for (int r = 0; r < groups; ++r) {
      hai::ReplicaGroup* g = run.add_groups();
      g->set_replica(r);
      g->set_first_node(r * spec.nodes());
      if (r == 0) {
        g->set_master_addr(addr);
        g->set_master_port(port);
      } else {
        auto [a, p] = TakeMaster(run.nodes(r * spec.nodes()), in_use);
        g->set_master_addr(a);
        g->set_master_port(p);
      }
    }
  }
  return run;
}

}  // namespace ff::platform

#include <spdlog/spdlog.h>

#include <sstream>

#include "common/rpc_status.h"
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
    if (node.record.state() != hai::NODE_UP || node.record.drained() || lingering || silent ||
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
  for (scheduler::JobId v : d.suspends) {
    hai::Job& job = jobs_.at(v);
    Preempted event;
    if (auto f = d.suspended_for.find(v); f != d.suspended_for.end()) {
      event.for_job = f->second;
      event.for_priority = jobs_.at(f->second).spec().priority();
    }
    if (!apply(job, event)) continue;
    for (const std::string& n : job.runs(job.runs_size() - 1).nodes())
      leaving[topology_.FindNode(n)] = v;
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
    apply(job, Started{PlaceRun(s.placement, in_use)});
  }
  // The round's decisions in one synced write.
  if (!MustPersist(store_->PutJobs(changed), "the scheduling round's decisions").ok()) return;
  for (const auto& [id, reason] : d.pending)
    RecordPending(jobs_.at(id), now_ms, reason);
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

hai::Run HaiServer::PlaceRun(const Placement& placement, InUse& in_use) const {
  auto& used_gpus = in_use.gpus;
  auto& used_ports = in_use.ports;
  hai::Run run;
  for (int n : placement.nodes) {
    const scheduler::Node& node = topology_.nodes()[n];
    run.add_nodes(node.name);
    std::string gpus;
    int given = 0;
    for (int g = 0; g < node.gpus && given < placement.gpus_per_node; ++g) {
      if (used_gpus[node.name].contains(g)) continue;
      used_gpus[node.name].insert(g);
      gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
      ++given;
    }
    run.add_gpus(gpus);
  }
  const std::string host = HostOf(nodes_.at(run.nodes(0)).record.agent_address());
  run.set_master_addr(host.empty() ? "127.0.0.1" : host);
  int port = static_cast<int>(options_.master_port_base);
  while (used_ports[run.master_addr()].contains(port))
    ++port;
  used_ports[run.master_addr()].insert(port);
  run.set_master_port(port);
  return run;
}

}  // namespace ff::platform

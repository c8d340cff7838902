// The trace simulator behind hai-sim: replays jobs onto a topology through the same Scheduler
// and placement policies the platform uses, with a performance model in which placement matters.
//
// Performance model. A job's trace duration is its run time when well placed on a quiet network.
// A multi-node job spends a share f of its time communicating (allreduce 30%, pipeline 15%).
// While it runs, each leaf uplink it crosses carries the traffic of every job crossing it; when
// that exceeds the uplink's capacity, the bandwidth-bound share b of its communication slows by
// load / capacity (the worst leaf the job crosses counts; the rest, latency and the CPU's part,
// does not), and a job crossing zones shares the inter-zone links the same way and pays
// cross_zone_penalty on top. Its progress rate is then 1 / ((1 - f) + f * slowdown), slowdown =
// (1 - b) + b * max(1, load / capacity). deploy/netlab-bench.py's placement experiment calibrates
// f, b and traffic_gbps on real HFReduce traffic (deploy/NETLAB.md).
// Checkpoints (CheckpointModel). Every job saves periodically, every checkpoint_interval of its
// run times its own factor (CheckpointModel::interval_spread). A job's
// checkpoint holds its own number of GB per GPU (the model's median times a factor drawn
// log-uniform in [1/spread, spread], seeded by the job's id), written and read back at
// gbps_per_gpu per GPU. A share of jobs (seeded) report their checkpoints to the platform (the
// scheduler then knows their checkpoint's write time and when they last saved, from their first
// checkpoint on) and save when suspended; the rest never report and save nothing when suspended.
// A suspended job is given its deadline (SuspendDeadline, from what the scheduler knows of it):
// one that saves within it holds its nodes while it writes and loses no work; one that does not
// is killed at the deadline and loses the work since its last checkpoint; one that does not save
// leaves at once with the same loss. Each then pays a restart (SuspendPolicy::restart_s and
// reading its checkpoint back) when it resumes. The job that suspended it starts once they have
// left its nodes. SimulationResult::preemption_lost_gpu_hours sums those costs: lost work, the
// checkpoint or the wait for the deadline, and the restart, times the victim's GPUs.
//
// Failures (SimulationOptions::node_mtbf > 0). Each node fails after an exponentially distributed
// time of mean node_mtbf and is back node_repair later; meanwhile it is drained. A job on a node
// that fails loses the work since its last checkpoint and is queued again, unless it is a
// fault-tolerant job (JobRequest::node_step: replica groups) with at least its minimum of groups
// left: then only the group on that node is lost, the job runs on at the speed of the groups it
// has (data parallel: live / replicas of full speed), and the scheduler places a replacement as
// it places everything else (Scheduler::Decide's group starts).
//
// Deterministic: the same inputs give the same result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "scheduler/performance.h"
#include "scheduler/scheduler.h"

namespace ff::scheduler {

struct CheckpointModel {
  double gb_per_gpu = 10;        // the median job's checkpoint, per GPU
  double spread = 4;             // each job's size: the median times a factor in [1/spread, spread]
  double gbps_per_gpu = 0.5;     // write (and read) rate of one GPU's share, GB/s
  double reporting_share = 0.8;  // jobs that report checkpoints and save when suspended
  // Each job's checkpoint interval: SimulationOptions::checkpoint_interval times a factor in
  // [1/interval_spread, interval_spread] (seeded by its id).
  double interval_spread = 1;
  uint64_t seed = 1;
};

struct SimulationOptions {
  // The physics of the replay; the scheduler's own estimates (PolicyOptions::model) are set to
  // the same model, so the policy judges by what the replay does.
  PerformanceModel model;
  SchedulerOptions scheduler;
  PolicyOptions policy;
  Seconds checkpoint_interval = 300;
  CheckpointModel checkpoints;
  int high_priority = 4;  // jobs of this priority and above count in SimulationResult::hp_*
  Seconds sample_interval = 3600;  // utilisation series resolution
  // Keep every change of every waiting job's reason (SimulationResult::pending_history).
  bool record_reasons = false;
  // Node failures: mean time between one node's failures (0: nodes never fail), and how long a
  // failed node is out; the failure times are drawn from failure_seed.
  Seconds node_mtbf = 0;
  Seconds node_repair = 4 * 3600;
  uint64_t failure_seed = 1;
  // Called now and then with the share of jobs finished (0..1).
  std::function<void(double)> on_progress;
};

struct JobOutcome {
  JobId id = 0;
  int gpus = 0;
  Seconds submit = 0;
  Seconds first_start = -1;
  Seconds finish = -1;
  int preemptions = 0;
  // Every second it spent queued: before its first start and after each suspension.
  Seconds waited = 0;
  std::vector<int> first_nodes;  // where it first started (node indices)
};

struct SimulationResult {
  std::string policy;
  std::vector<JobOutcome> jobs;
  double mean_jct = 0, median_jct = 0, p99_jct = 0;  // seconds, submit to finish
  // Seconds a job waited in all (JobOutcome::waited: after suspensions too), over the jobs.
  double mean_wait = 0, median_wait = 0, p95_wait = 0, p99_wait = 0;
  // Busy GPU-seconds / (GPUs x the arrival span): from the first submission to the last, the
  // span the load is offered over (not diluted by the tail of long jobs that runs on after it).
  double gpu_utilisation = 0;
  Seconds arrival_span = 0;
  double fragmentation = 0;  // time-averaged share of free nodes in partly busy leaves
  double cross_leaf_tb = 0;  // terabytes sent across leaf uplinks
  double cross_zone_tb = 0;  // terabytes sent between zones
  int preemptions = 0;
  // Preemption's cost (CheckpointModel): GPU-hours suspended jobs lost (work since their
  // checkpoint, the checkpoint written or the wait for the deadline, the restart); suspended jobs
  // that saved in time, that were killed at their deadline, and that do not save.
  double preemption_lost_gpu_hours = 0;
  int saved_on_suspend = 0, killed_at_deadline = 0, suspended_unsaved = 0;
  // Waits (JobOutcome::waited) of jobs of SimulationOptions::high_priority and above.
  double hp_mean_wait = 0, hp_p95_wait = 0;
  // Failures: nodes that failed; jobs a failure sent back to the queue (gangs, and fault-tolerant
  // jobs left below their minimum); the GPU-hours of work they lost (since their checkpoints);
  // replacement groups placed; and the hours lost groups were missing before their replacement
  // started (or their run ended), counted per group.
  int node_failures = 0;
  int failure_requeues = 0;
  double failure_lost_gpu_hours = 0;
  int replacements_placed = 0;
  double lost_group_hours = 0;
  Seconds makespan = 0;                                        // first submission to last finish
  std::vector<std::pair<Seconds, double>> utilisation_series;  // (time, busy GPU share)
  struct TrafficSample {
    Seconds time = 0;
    double cross_leaf_gbps = 0, cross_zone_gbps = 0;  // sent across leaf uplinks, between zones
  };
  std::vector<TrafficSample> traffic_series;  // at the utilisation series' times
  // With record_reasons: why each job waited, whenever that changed; an empty reason marks the
  // round that started it.
  struct ReasonChange {
    Seconds time = 0;
    JobId job = 0;
    std::string reason;
  };
  std::vector<ReasonChange> pending_history;
};

// Fails (kInvalidArgument) on an unknown policy or a job that can never fit the topology.
Result<SimulationResult> Simulate(const Topology& topology, const std::vector<JobRequest>& jobs,
                                  const std::string& policy, const SimulationOptions& options);

}  // namespace ff::scheduler

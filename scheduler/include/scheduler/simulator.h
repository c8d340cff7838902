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
// Suspended jobs lose the work since their last checkpoint (taken every checkpoint_interval)
// and wait in the queue again.
//
// Deterministic: the same inputs give the same result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"

namespace ff::scheduler {

struct PerformanceModel {
  double allreduce_comm_fraction = 0.3;
  double pipeline_comm_fraction = 0.15;
  double cross_zone_penalty = 2.0;
  // Share of the communication time that is bound by the network's bandwidth (the rest does not
  // slow when links are shared). 1: all of it.
  double bandwidth_bound_share = 1.0;
};

struct SimulationOptions {
  PerformanceModel model;
  SchedulerOptions scheduler;
  PolicyOptions policy;
  Seconds checkpoint_interval = 300;
  Seconds sample_interval = 3600;  // utilisation series resolution
  // Keep every change of every waiting job's reason (SimulationResult::pending_history).
  bool record_reasons = false;
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
};

struct SimulationResult {
  std::string policy;
  std::vector<JobOutcome> jobs;
  double mean_jct = 0, median_jct = 0, p99_jct = 0;        // seconds, submit to finish
  double mean_queue = 0, median_queue = 0, p99_queue = 0;  // seconds, submit to first start
  double gpu_utilisation = 0;                              // busy GPU-seconds / (GPUs x makespan)
  double fragmentation = 0;  // time-averaged share of free nodes in partly busy leaves
  double cross_leaf_tb = 0;  // terabytes sent across leaf uplinks
  double cross_zone_tb = 0;  // terabytes sent between zones
  int preemptions = 0;
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

// The model's slowdown of a running job's communication (1: uncongested): (1 - b) + b * x, x the
// load / capacity (at least 1) of the most loaded leaf uplink it crosses, or for a job crossing
// zones the inter-zone links' times cross_zone_penalty. 1 for a job that is not running.
double CommSlowdown(const ClusterState& state, JobId job, const PerformanceModel& model);
// Work seconds per wall second of a running job: 1 / ((1 - f) + f * CommSlowdown), f the share
// of its time the model says its kind of job communicates.
double ProgressRate(const ClusterState& state, const JobRequest& job,
                    const PerformanceModel& model);

// Fails (kInvalidArgument) on an unknown policy or a job that can never fit the topology.
Result<SimulationResult> Simulate(const Topology& topology, const std::vector<JobRequest>& jobs,
                                  const std::string& policy, const SimulationOptions& options);

}  // namespace ff::scheduler

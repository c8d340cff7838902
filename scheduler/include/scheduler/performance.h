// The performance model in which placement matters, shared by the simulator (what a run does)
// and the scheduler (what it expects a placement to cost).
//
// A multi-node job spends a share f of its time communicating (allreduce 30%, pipeline 15%).
// Each leaf uplink it crosses carries the traffic of every job crossing it; when that exceeds the
// uplink's capacity, the bandwidth-bound share b of its communication slows by load / capacity
// (the worst leaf the job crosses counts), and a job crossing zones shares the inter-zone links
// the same way and pays cross_zone_penalty on top. Its step then takes (1 - f) + f * slowdown of
// its uncongested step, slowdown = (1 - b) + b * max(1, load / capacity).
#pragma once

#include "scheduler/cluster_state.h"
#include "scheduler/job.h"

namespace ff::scheduler {

struct PerformanceModel {
  double allreduce_comm_fraction = 0.3;
  double pipeline_comm_fraction = 0.15;
  double cross_zone_penalty = 2.0;
  // Share of the communication time that is bound by the network's bandwidth (the rest does not
  // slow when links are shared). 1: all of it.
  double bandwidth_bound_share = 1.0;

  // f: the share of its time a job of this kind communicates.
  double CommFraction(CommKind kind) const {
    return kind == CommKind::kAllreduce  ? allreduce_comm_fraction
           : kind == CommKind::kPipeline ? pipeline_comm_fraction
                                         : 0.0;
  }
};

// The model's slowdown of a running job's communication (1: uncongested): (1 - b) + b * x, x the
// load / capacity (at least 1) of the most loaded leaf uplink it crosses, or for a job crossing
// zones the inter-zone links' times cross_zone_penalty. 1 for a job that is not running.
double CommSlowdown(const ClusterState& state, JobId job, const PerformanceModel& model);
// Work seconds per wall second of a running job: 1 / ((1 - f) + f * CommSlowdown), f the share
// of its time the model says its kind of job communicates.
double ProgressRate(const ClusterState& state, const JobRequest& job,
                    const PerformanceModel& model);

// What starting `job` now on `spread` (a placement across leaves) would cost in run time, by
// the model: over its expected run time (`assumed_runtime` when it gives none), the job's own
// slowdown on the uplinks it would share now, or where they have room, the share of the busiest
// one its traffic would take (b x traffic / capacity: the jobs crossing it later share it with
// this one for its whole run); plus what its traffic would add to the slowdown of the running
// jobs crossing the same uplinks, over their expected remaining run times. 0 for a job that
// sends nothing across leaves there.
struct SpreadLoss {
  double seconds = 0;      // run time lost, summed over the job and the jobs it slows
  double gpu_seconds = 0;  // the same, each second times the GPUs of the job that loses it
};
SpreadLoss SpreadCost(const ClusterState& state, const JobRequest& job, const Placement& spread,
                      Seconds now, const PerformanceModel& model, Seconds assumed_runtime);

}  // namespace ff::scheduler

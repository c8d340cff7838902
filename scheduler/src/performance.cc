#include "scheduler/performance.h"

#include <algorithm>
#include <limits>

namespace ff::scheduler {
namespace {

// The slowdown of the communication of a job whose traffic is `load`, with the uplinks carrying
// what they carry in `state` plus `extra` (a job not yet started).
double Slowdown(const ClusterState& state, const TrafficLoad& load, const TrafficLoad& extra,
                const PerformanceModel& model) {
  const Topology& topology = state.topology();
  auto extra_on = [&](int leaf) {
    for (const auto& [l, gbps] : extra.leaf_uplink_gbps) {
      if (l == leaf) return gbps;
    }
    return 0.0;
  };
  double slowdown = 1;
  for (const auto& [leaf, gbps] : load.leaf_uplink_gbps) {
    slowdown = std::max(slowdown, (state.leaf_uplink_load(leaf) + extra_on(leaf)) /
                                      topology.leaves()[leaf].uplink_gbps);
  }
  if (load.cross_zone_gbps > 0) {
    const double zone =
        topology.cross_zone_gbps() > 0
            ? (state.cross_zone_load() + extra.cross_zone_gbps) / topology.cross_zone_gbps()
            : std::numeric_limits<double>::infinity();
    slowdown = std::max(slowdown, std::max(1.0, zone) * model.cross_zone_penalty);
  }
  if (slowdown == 1) return 1;  // the common case, exact whatever b is
  const double b = model.bandwidth_bound_share;
  return b <= 0 ? 1 : (1 - b) + b * slowdown;
}

bool Shares(const TrafficLoad& a, const TrafficLoad& b) {
  if (a.cross_zone_gbps > 0 && b.cross_zone_gbps > 0) return true;
  for (const auto& [la, ga] : a.leaf_uplink_gbps) {
    for (const auto& [lb, gb] : b.leaf_uplink_gbps) {
      if (la == lb) return true;
    }
  }
  return false;
}

}  // namespace

double CommSlowdown(const ClusterState& state, JobId job, const PerformanceModel& model) {
  return Slowdown(state, state.load(job), TrafficLoad{}, model);
}

double ProgressRate(const ClusterState& state, const JobRequest& job,
                    const PerformanceModel& model) {
  const double f = model.CommFraction(job.comm);
  return 1.0 / ((1 - f) + f * CommSlowdown(state, job.id, model));
}

SpreadLoss SpreadCost(const ClusterState& state, const JobRequest& job, const Placement& spread,
                      Seconds now, const PerformanceModel& model, Seconds assumed_runtime) {
  const TrafficLoad mine = EstimateTraffic(state.topology(), job, spread);
  if (mine.leaf_uplink_gbps.empty() && mine.cross_zone_gbps <= 0) return {};
  const double runtime =
      static_cast<double>(job.expected_runtime > 0 ? job.expected_runtime : assumed_runtime);
  // Its own loss: the slowdown the uplinks give it now; and where they have room, the share of
  // the busiest one its traffic takes for the whole run, which the jobs that cross it later
  // share with it (spreading is never free for a job that communicates).
  double share = 0;
  for (const auto& [leaf, gbps] : mine.leaf_uplink_gbps)
    share = std::max(share, gbps / state.topology().leaves()[leaf].uplink_gbps);
  const double own = std::max(Slowdown(state, mine, mine, model) - 1,
                              model.bandwidth_bound_share * std::min(1.0, share));
  SpreadLoss cost;
  cost.seconds = runtime * model.CommFraction(job.comm) * own;
  cost.gpu_seconds = cost.seconds * job.TotalGpus();
  for (const RunningJob& r : state.running()) {
    const TrafficLoad& theirs = state.load(r.request.id);
    if (!Shares(theirs, mine)) continue;
    const double remaining = r.request.expected_runtime > 0
                                 ? static_cast<double>(std::max<Seconds>(
                                       0, r.start_time + r.request.expected_runtime - now))
                                 : static_cast<double>(assumed_runtime);
    const double added =
        Slowdown(state, theirs, mine, model) - Slowdown(state, theirs, TrafficLoad{}, model);
    const double lost = remaining * model.CommFraction(r.request.comm) * added;
    cost.seconds += lost;
    cost.gpu_seconds += lost * r.request.TotalGpus();
  }
  return cost;
}

}  // namespace ff::scheduler

// Placement policies: which nodes a job runs on, in rank order. Pure functions of the job and the
// cluster state; deterministic (ties broken by index).
//
//   first-fit         the first free nodes in index order (baseline)
//   slurm-tree        Slurm's topology/tree plugin: the lowest switch that fits the job, leaves
//                     chosen best-fit (baseline)
//   congestion-aware  ours: fewest leaves; allreduce jobs never across zones unless they allow it;
//                     among equal choices the leaves whose uplinks carry the least traffic, then
//                     the best fit so whole leaves stay free for large jobs; ranks ordered leaf by
//                     leaf so that double-binary-tree neighbours share a leaf; and a job that
//                     fits under one leaf switch but would have to spread over several now may
//                     wait for one leaf to free up, the way delay scheduling waits for data
//                     locality (LocalityWait, below)
//
// The locality wait (congestion-aware). A communicating multi-node job that fits under one leaf,
// and could start now only across leaves, waits for a leaf only while waiting is the cheaper
// choice, judged each round from the state of the cluster:
//   - what spreading now would cost: the run time the performance model (performance.h) says
//     the job itself would lose on the uplinks it would share, over its expected run time, plus
//     what its traffic would cost the running jobs crossing those uplinks (SpreadCost); and,
//     when jobs queue for GPUs, the capacity that loss takes from them: its GPU-seconds over the
//     cluster's GPUs, once for every job waiting for GPUs. On a quiet cluster that is the few
//     seconds of run time its traffic costs, and such a job starts at once, spread; under load
//     it is that loss times the queue;
//   - how soon a leaf is expected to free for it: the running jobs' expected ends
//     (Scheduler::EarliestStart, the estimate behind pending reasons);
//   - how long it has waited already (JobRequest::locality_wait_since).
// It waits while it has waited less than min(cost, max_locality_wait) and a leaf is expected to
// free within what remains of that (or no estimate exists); otherwise it starts across leaves.
// So a job never waits longer than spreading would have cost it, its neighbours and the queue,
// nor longer than max_locality_wait; under load, with congested uplinks or a long queue and a
// leaf about to free, it waits.
//
// Sub-node jobs (JobRequest::gpus with nodes == 0) are packed: first-fit takes the first node with
// room, slurm-tree and congestion-aware the node with the least room that fits.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/cluster_state.h"
#include "scheduler/performance.h"

namespace ff::scheduler {

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::string_view name() const = 0;
  // The job's nodes in rank order, or an empty Placement with `why` set to what is missing, as
  // a clause a researcher understands ("needs 8 nodes with 8 free GPUs in one zone; the largest
  // such set is 6 nodes (zone A)").
  virtual Placement Place(const JobRequest& job, const ClusterState& state,
                          std::string* why) const = 0;
  // The longest the scheduler keeps `job` waiting for one leaf rather than start it spread over
  // several (0: it never waits). The wait counts from the first round in which the job could have
  // started across leaves (JobRequest::locality_wait_since), and ends unused in a round where it
  // could not start anywhere.
  virtual Seconds MaxLocalityWait(const JobRequest& /*job*/) const { return 0; }
  // How long, in all, `job` may wait for one leaf when it could start now on `spread` (across
  // leaves), with `queued` other jobs waiting for GPUs (Scheduler::Decide counts those left
  // waiting ahead of it in the round and those behind it beyond what would still be free): at
  // most MaxLocalityWait, and for congestion-aware no longer than spreading would cost (see the
  // locality wait above). 0: start it now.
  virtual Seconds LocalityWait(const JobRequest& /*job*/, const ClusterState& /*state*/,
                               const Placement& /*spread*/, Seconds /*now*/, int /*queued*/) const {
    return 0;
  }
};

// The scheduling knobs' one home: hai-server ([hai] locality_wait_s) and hai-sim set them here.
struct PolicyOptions {
  // congestion-aware: the longest a communicating multi-node job waits for one leaf.
  Seconds locality_wait = 7200;
  // The performance model the policy judges placements by (hai-sim sets it to the replay's).
  PerformanceModel model;
  // The run time assumed for a job that gives none (hai submit --time), when costing a spread.
  Seconds assumed_runtime = 3600;
};

// "first-fit", "slurm-tree" or "congestion-aware"; null for another name.
std::unique_ptr<PlacementPolicy> MakePlacementPolicy(std::string_view name,
                                                     const PolicyOptions& options = {});
std::vector<std::string> PlacementPolicyNames();

}  // namespace ff::scheduler

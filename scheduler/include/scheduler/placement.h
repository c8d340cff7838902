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
// Its budget is the larger of that cost and a share (PolicyOptions::locality_wait_share, 5%) of the
// time since it was submitted: a job queued 20 h may wait an hour more for a leaf, its completion
// 5% later at most, while one that just arrived on a quiet cluster waits only what spreading
// would cost. It waits while it has waited less than min(budget, max_locality_wait) and a leaf is
// expected to free within what remains of that (or no estimate exists); otherwise it starts
// across leaves. Suspending lower-priority jobs to start it is starting it too: it suspends jobs
// under one leaf if that makes room there, and across leaves only when it would spread on free
// nodes (Scheduler::Decide). So a job never waits longer than max_locality_wait, nor longer than
// spreading would have cost it, its neighbours and the queue unless it has queued twenty times
// as long; under load, with congested uplinks, a long queue or a long wait behind it, and a leaf
// about to free, it waits.
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

// How long a job may wait for one leaf rather than start across leaves now
// (PlacementPolicy::LocalityWait).
struct LocalityBudget {
  Seconds wait = 0;         // in all, at most MaxLocalityWait (0: start it now)
  Seconds spread_cost = 0;  // what spreading now would cost it, its neighbours and the queue
  bool from_share = false;  // `wait` is the share of its time since submission, above the cost
};

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
  // most MaxLocalityWait, and for congestion-aware no longer than spreading would cost or the
  // share of its time since submission (see the locality wait above).
  virtual LocalityBudget LocalityWait(const JobRequest& /*job*/, const ClusterState& /*state*/,
                                      const Placement& /*spread*/, Seconds /*now*/,
                                      int /*queued*/) const {
    return {};
  }
};

// The scheduling knobs' one home: hai-server ([hai] locality_wait_s, locality_wait_share) and
// hai-sim set them here.
struct PolicyOptions {
  // congestion-aware: the longest a communicating multi-node job waits for one leaf. A day: what
  // bounds its wait is what spreading would cost and the share below; with a 2 h cap cluster04
  // sent 0.20-0.37 of first-fit's cross-leaf traffic at loads 3-10, and at most 0.09 with this
  // one, its mean JCT lower too (scheduler/README.md).
  Seconds locality_wait = 86400;
  // congestion-aware: the share of the time since its submission that a job may wait for one
  // leaf, however little spreading would cost (0: only what spreading would cost).
  double locality_wait_share = 0.05;
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

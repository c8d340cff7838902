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
//                     fits under one leaf switch but would have to spread over several now waits
//                     a while (LocalityWait) for one leaf to free up, the way delay scheduling
//                     waits for data locality: a short wait costs less than sharing congested
//                     uplinks for the whole run
//
// Sub-node jobs (JobRequest::gpus with nodes == 0) are packed: first-fit and congestion-aware take
// the first node with room (partly used nodes gather in the first leaves), slurm-tree the node
// with the least room that fits.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/cluster_state.h"

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
  // How long the scheduler keeps `job` waiting rather than start it spread over several leaves
  // when it would fit under one (0: never waits). The wait counts from the first round in which
  // the job could have started across leaves (JobRequest::locality_wait_since), and ends unused
  // in a round where it could not start anywhere.
  virtual Seconds LocalityWait(const JobRequest& /*job*/) const { return 0; }
};

struct PolicyOptions {
  // congestion-aware: the longest a communicating multi-node job waits for one leaf.
  // Chosen by `hai-sim sweep --try-locality-waits` on synthetic traces (scheduler/README.md).
  Seconds locality_wait = 7200;
};

// "first-fit", "slurm-tree" or "congestion-aware"; null for another name.
std::unique_ptr<PlacementPolicy> MakePlacementPolicy(std::string_view name,
                                                     const PolicyOptions& options = {});
std::vector<std::string> PlacementPolicyNames();

}  // namespace ff::scheduler

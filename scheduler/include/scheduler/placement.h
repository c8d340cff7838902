// Placement policies: which nodes a job runs on, in rank order. Pure functions of the job and the
// cluster state; deterministic (ties broken by index).
//
//   first-fit         the first free nodes in index order (baseline)
//   slurm-tree        Slurm's topology/tree plugin: the lowest switch that fits the job, leaves
//                     chosen best-fit (baseline)
//   congestion-aware  ours: fewest leaves; allreduce jobs never across zones unless they allow it;
//                     among equal choices the leaves whose uplinks carry the least traffic, then
//                     the best fit so whole leaves stay free for large jobs; ranks ordered leaf by
//                     leaf so that double-binary-tree neighbours share a leaf
//
// Sub-node jobs (JobRequest::gpus with nodes == 0) are packed: first-fit takes the first node
// with room, the others the node with the least room that fits (keeping whole nodes free).
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
};

// "first-fit", "slurm-tree" or "congestion-aware"; null for another name.
std::unique_ptr<PlacementPolicy> MakePlacementPolicy(std::string_view name);
std::vector<std::string> PlacementPolicyNames();

}  // namespace ff::scheduler

// What is in use: free GPUs per node, drained nodes, running jobs, and the traffic each leaf's
// uplinks and the inter-zone links carry. Scheduling rounds read it; Allocate/Release change it.
// Not thread-safe; copyable (a round works on a copy when it tries preemptions).
#pragma once

#include <map>
#include <vector>

#include "common/status.h"
#include "scheduler/job.h"
#include "scheduler/topology.h"

namespace ff::scheduler {

// A job's network load: per leaf, the Gbit/s its placement sends through the leaf's uplinks; and
// what crosses between zones. Derived from the job's communication pattern over its rank order
// (the double binary tree's edges for allreduce, a chain for pipelines): an edge between nodes
// under different leaves loads both leaves' uplinks.
struct TrafficLoad {
  std::map<int, double> leaf_uplink_gbps;
  double cross_leaf_gbps = 0;  // over all edges that leave a leaf, each counted once
  double cross_zone_gbps = 0;
  int cross_leaf_edges = 0;
};
TrafficLoad EstimateTraffic(const Topology& topology, const JobRequest& job,
                            const Placement& placement);

class ClusterState {
 public:
  explicit ClusterState(const Topology& topology);

  const Topology& topology() const { return *topology_; }
  int free_gpus(int node) const { return free_gpus_[node]; }
  bool drained(int node) const { return drained_[node]; }
  // A node is free for gang jobs when nothing runs on it and it is not drained.
  bool node_free(int node) const {
    return !drained_[node] && free_gpus_[node] == topology_->nodes()[node].gpus;
  }
  int leaf_free_nodes(int leaf) const { return leaf_free_nodes_[leaf]; }
  int zone_free_nodes(int zone) const;
  double leaf_uplink_load(int leaf) const { return leaf_load_[leaf]; }
  double cross_zone_load() const { return cross_zone_load_; }
  const std::map<JobId, RunningJob>& running() const { return running_; }
  // The traffic a running job puts on the network (empty for an unknown job).
  const TrafficLoad& load(JobId id) const;

  // Starts `job` on `placement`. kFailedPrecondition (changing nothing) when a node lacks the
  // GPUs, is drained, or the job already runs.
  Status Allocate(const JobRequest& job, const Placement& placement, Seconds now);
  // Stops a running job, freeing its GPUs and traffic. kNotFound when it is not running.
  Status Release(JobId id);
  void SetDrained(int node, bool drained);

 private:
  void AddLoad(const TrafficLoad& load, double sign);

  const Topology* topology_;
  std::vector<int> free_gpus_;
  std::vector<bool> drained_;
  std::vector<int> leaf_free_nodes_;
  std::vector<double> leaf_load_;
  double cross_zone_load_ = 0;
  std::map<JobId, RunningJob> running_;
  std::map<JobId, TrafficLoad> loads_;
};

}  // namespace ff::scheduler

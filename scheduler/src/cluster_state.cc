#include "scheduler/cluster_state.h"

#include "common/double_binary_tree.h"

namespace ff::scheduler {

TrafficLoad EstimateTraffic(const Topology& topology, const JobRequest& job,
                            const Placement& placement) {
  TrafficLoad load;
  const int n = static_cast<int>(placement.nodes.size());
  if (n < 2 || job.comm == CommKind::kNone || job.traffic_gbps <= 0) return load;
  auto edge = [&](int a, int b, double gbps) {
    const Node& na = topology.nodes()[placement.nodes[a]];
    const Node& nb = topology.nodes()[placement.nodes[b]];
    if (na.leaf == nb.leaf) return;
    ++load.cross_leaf_edges;
    load.cross_leaf_gbps += gbps;
    load.leaf_uplink_gbps[na.leaf] += gbps;
    load.leaf_uplink_gbps[nb.leaf] += gbps;
    if (na.zone != nb.zone) load.cross_zone_gbps += gbps;
  };
  if (job.comm == CommKind::kPipeline) {
    for (int r = 0; r + 1 < n; ++r)
      edge(r, r + 1, job.traffic_gbps);
    return load;
  }
  // Allreduce: each tree carries half of the data over each of its edges.
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < n; ++r) {
      TreePosition pos = DoubleBinaryTreePosition(t, r, n);
      if (pos.parent >= 0) edge(r, pos.parent, job.traffic_gbps / 2);
    }
  }
  return load;
}

ClusterState::ClusterState(const Topology& topology)
    : topology_(&topology),
      free_gpus_(topology.nodes().size()),
      drained_(topology.nodes().size(), false),
      leaf_free_nodes_(topology.leaves().size()),
      leaf_load_(topology.leaves().size(), 0.0) {
  for (std::size_t i = 0; i < topology.nodes().size(); ++i) {
    free_gpus_[i] = topology.nodes()[i].gpus;
  }
  for (std::size_t l = 0; l < topology.leaves().size(); ++l) {
    leaf_free_nodes_[l] = topology.leaves()[l].num_nodes;
  }
}

int ClusterState::zone_free_nodes(int zone) const {
  const Zone& z = topology_->zones()[zone];
  int free = 0;
  for (int l = z.first_leaf; l < z.first_leaf + z.num_leaves; ++l)
    free += leaf_free_nodes_[l];
  return free;
}

void ClusterState::AddLoad(const TrafficLoad& load, double sign) {
  for (const auto& [leaf, gbps] : load.leaf_uplink_gbps)
    leaf_load_[leaf] += sign * gbps;
  cross_zone_load_ += sign * load.cross_zone_gbps;
}

Status ClusterState::Allocate(const JobRequest& job, const Placement& placement, Seconds now) {
  if (running_.contains(job.id)) {
    return FailedPrecondition("job " + std::to_string(job.id) + " is already running");
  }
  if (placement.nodes.empty() || placement.gpus_per_node <= 0) {
    return FailedPrecondition("job " + std::to_string(job.id) + ": empty placement");
  }
  for (std::size_t i = 0; i < placement.nodes.size(); ++i) {
    int node = placement.nodes[i];
    if (node < 0 || node >= static_cast<int>(free_gpus_.size())) {
      return FailedPrecondition("job " + std::to_string(job.id) + ": no node " +
                                std::to_string(node));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (placement.nodes[j] == node) {
        return FailedPrecondition("job " + std::to_string(job.id) + ": node " +
                                  topology_->nodes()[node].name + " listed twice");
      }
    }
    if (drained_[node] || free_gpus_[node] < placement.gpus_per_node) {
      return FailedPrecondition("job " + std::to_string(job.id) + ": node " +
                                topology_->nodes()[node].name + " lacks " +
                                std::to_string(placement.gpus_per_node) + " free GPUs");
    }
  }
  for (int node : placement.nodes) {
    if (node_free(node)) --leaf_free_nodes_[topology_->nodes()[node].leaf];
    free_gpus_[node] -= placement.gpus_per_node;
  }
  TrafficLoad load = EstimateTraffic(*topology_, job, placement);
  AddLoad(load, +1);
  loads_[job.id] = load;
  running_[job.id] = RunningJob{job, placement, now, now};
  return Status::Ok();
}

Status ClusterState::Release(JobId id) {
  auto it = running_.find(id);
  if (it == running_.end()) return NotFound("job " + std::to_string(id) + " is not running");
  const Placement& p = it->second.placement;
  for (int node : p.nodes) {
    free_gpus_[node] += p.gpus_per_node;
    if (node_free(node)) ++leaf_free_nodes_[topology_->nodes()[node].leaf];
  }
  AddLoad(loads_[id], -1);
  loads_.erase(id);
  running_.erase(it);
  return Status::Ok();
}

const TrafficLoad& ClusterState::load(JobId id) const {
  static const TrafficLoad kNone;
  auto it = loads_.find(id);
  return it == loads_.end() ? kNone : it->second;
}

void ClusterState::SetDrained(int node, bool drained) {
  if (drained_[node] == drained) return;
  bool was_free = node_free(node);
  drained_[node] = drained;
  bool is_free = node_free(node);
  int leaf = topology_->nodes()[node].leaf;
  leaf_free_nodes_[leaf] += (is_free ? 1 : 0) - (was_free ? 1 : 0);
}

}  // namespace ff::scheduler

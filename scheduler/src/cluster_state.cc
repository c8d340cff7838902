#include "scheduler/cluster_state.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/double_binary_tree.h"

namespace ff::scheduler {

TrafficLoad EstimateTraffic(const Topology& topology, const JobRequest& job,
                            const Placement& placement) {
  TrafficLoad load;
  const int n = static_cast<int>(placement.nodes.size());
  if (n < 2 || job.comm == CommKind::kNone || job.traffic_gbps <= 0) return load;
  auto add_leaf = [&](int leaf, double gbps) {
    for (auto& [l, g] : load.leaf_uplink_gbps) {
      if (l == leaf) {
        g += gbps;
        return;
      }
    }
    load.leaf_uplink_gbps.emplace_back(leaf, gbps);
  };
  auto edge = [&](int a, int b, double gbps) {
    const Node& na = topology.nodes()[placement.nodes[a]];
    const Node& nb = topology.nodes()[placement.nodes[b]];
    if (na.leaf == nb.leaf) return;
    ++load.cross_leaf_edges;
    load.cross_leaf_gbps += gbps;
    add_leaf(na.leaf, gbps);
    add_leaf(nb.leaf, gbps);
    if (na.zone != nb.zone) load.cross_zone_gbps += gbps;
  };
  if (job.comm == CommKind::kPipeline) {
    for (int r = 0; r + 1 < n; ++r)
      edge(r, r + 1, job.traffic_gbps);
  } else {
    // Allreduce: each tree carries half of the data over each of its edges. The trees are
    // HFReduce's, which follow the leaves (the platform gives each rank its HAI_LEAF): leaf by
    // leaf, whatever the rank order.
    std::vector<std::string> leaves;
    for (int node : placement.nodes)
      leaves.push_back(topology.LeafPath(node));
    const DoubleBinaryTree trees(leaves);
    for (int t = 0; t < 2; ++t) {
      for (int r = 0; r < n; ++r) {
        const int parent = trees.position(t, r).parent;
        if (parent >= 0) edge(r, parent, job.traffic_gbps / 2);
      }
    }
  }
  std::sort(load.leaf_uplink_gbps.begin(), load.leaf_uplink_gbps.end());
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

std::size_t ClusterState::Slot(JobId id) const {
  return static_cast<std::size_t>(
      std::lower_bound(running_.begin(), running_.end(), id,
                       [](const auto& e, JobId v) { return e->job.request.id < v; }) -
      running_.begin());
}

const RunningJob* ClusterState::find(JobId id) const {
  std::size_t i = Slot(id);
  return i < running_.size() && running_[i]->job.request.id == id ? &running_[i]->job : nullptr;
}

Status ClusterState::Allocate(const JobRequest& job, const Placement& placement, Seconds now) {
  if (find(job.id) != nullptr) {
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
  const auto at = static_cast<std::ptrdiff_t>(Slot(job.id));
  running_.insert(running_.begin() + at,
                  std::make_shared<const Entry>(Entry{RunningJob{job, placement, now, now}, load}));
  return Status::Ok();
}

Status ClusterState::Release(JobId id) {
  const std::size_t i = Slot(id);
  if (i >= running_.size() || running_[i]->job.request.id != id) {
    return NotFound("job " + std::to_string(id) + " is not running");
  }
  Free(*running_[i]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  return Status::Ok();
}

void ClusterState::Free(const Entry& e) {
  const Placement& p = e.job.placement;
  for (int node : p.nodes) {
    free_gpus_[node] += p.gpus_per_node;
    if (node_free(node)) ++leaf_free_nodes_[topology_->nodes()[node].leaf];
  }
  AddLoad(e.load, -1);
}

Status ClusterState::ReleaseAll(std::vector<JobId> ids) {
  std::sort(ids.begin(), ids.end());
  // running_ and ids are both sorted: a merge-like pass checks every id, a second one frees
  // and compacts.
  std::size_t k = 0;
  for (std::size_t i = 0; i < running_.size() && k < ids.size(); ++i) {
    if (running_[i]->job.request.id == ids[k]) ++k;
  }
  if (k < ids.size()) return NotFound("job " + std::to_string(ids[k]) + " is not running");
  std::size_t keep = 0;
  k = 0;
  for (std::size_t i = 0; i < running_.size(); ++i) {
    if (k < ids.size() && running_[i]->job.request.id == ids[k]) {
      ++k;
      Free(*running_[i]);
      continue;
    }
    if (keep != i) running_[keep] = std::move(running_[i]);
    ++keep;
  }
  running_.resize(keep);
  return Status::Ok();
}

const TrafficLoad& ClusterState::load(JobId id) const {
  static const TrafficLoad kNone;
  std::size_t i = Slot(id);
  return i < running_.size() && running_[i]->job.request.id == id ? running_[i]->load : kNone;
}

Status ClusterState::SetLastCheckpoint(JobId id, Seconds when, Seconds checkpoint_s) {
  std::size_t i = Slot(id);
  if (i >= running_.size() || running_[i]->job.request.id != id) {
    return NotFound("job " + std::to_string(id) + " is not running");
  }
  Entry changed = *running_[i];  // shared with copies of this state: replace, do not modify
  changed.job.last_checkpoint = when;
  if (checkpoint_s >= 0) changed.job.request.checkpoint_s = checkpoint_s;
  running_[i] = std::make_shared<const Entry>(std::move(changed));
  return Status::Ok();
}

Status ClusterState::Grow(JobId id, const std::vector<int>& nodes) {
  const std::size_t i = Slot(id);
  if (i >= running_.size() || running_[i]->job.request.id != id) {
    return NotFound("job " + std::to_string(id) + " is not running");
  }
  Entry grown = *running_[i];  // shared with copies of this state: replace, do not modify
  Placement& p = grown.job.placement;
  for (int node : nodes) {
    if (node < 0 || node >= static_cast<int>(free_gpus_.size())) {
      return FailedPrecondition("job " + std::to_string(id) + ": no node " + std::to_string(node));
    }
    if (std::find(p.nodes.begin(), p.nodes.end(), node) != p.nodes.end()) {
      return FailedPrecondition("job " + std::to_string(id) + ": node " +
                                topology_->nodes()[node].name + " listed twice");
    }
    if (drained_[node] || free_gpus_[node] < p.gpus_per_node) {
      return FailedPrecondition("job " + std::to_string(id) + ": node " +
                                topology_->nodes()[node].name + " lacks " +
                                std::to_string(p.gpus_per_node) + " free GPUs");
    }
    p.nodes.push_back(node);
  }
  for (int node : nodes) {
    if (node_free(node)) --leaf_free_nodes_[topology_->nodes()[node].leaf];
    free_gpus_[node] -= p.gpus_per_node;
  }
  AddLoad(grown.load, -1);
  grown.load = EstimateTraffic(*topology_, grown.job.request, p);
  AddLoad(grown.load, +1);
  running_[i] = std::make_shared<const Entry>(std::move(grown));
  return Status::Ok();
}

Status ClusterState::Shrink(JobId id, const std::vector<int>& nodes) {
  const std::size_t i = Slot(id);
  if (i >= running_.size() || running_[i]->job.request.id != id) {
    return NotFound("job " + std::to_string(id) + " is not running");
  }
  Entry shrunk = *running_[i];
  Placement& p = shrunk.job.placement;
  for (int node : nodes) {
    auto it = std::find(p.nodes.begin(), p.nodes.end(), node);
    if (it == p.nodes.end()) {
      return NotFound("job " + std::to_string(id) + " does not hold node " + std::to_string(node));
    }
    p.nodes.erase(it);
  }
  if (p.nodes.empty()) return Release(id);
  for (int node : nodes) {
    free_gpus_[node] += p.gpus_per_node;
    if (node_free(node)) ++leaf_free_nodes_[topology_->nodes()[node].leaf];
  }
  AddLoad(shrunk.load, -1);
  shrunk.load = EstimateTraffic(*topology_, shrunk.job.request, p);
  AddLoad(shrunk.load, +1);
  running_[i] = std::make_shared<const Entry>(std::move(shrunk));
  return Status::Ok();
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

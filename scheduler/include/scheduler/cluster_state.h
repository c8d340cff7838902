// What is in use: free GPUs per node, drained nodes, running jobs, and the traffic each leaf's
// uplinks and the inter-zone links carry. Scheduling rounds read it; Allocate/Release change it.
// Not thread-safe; copyable, and cheap to copy (a round works on copies when it tries preemptions
// and reservations): flat vectors, running jobs sorted by id.
#pragma once

#include <iterator>
#include <memory>
#include <utility>
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
  std::vector<std::pair<int, double>> leaf_uplink_gbps;  // (leaf, Gbit/s), by leaf
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
  // Running jobs, by id: a range of const RunningJob&.
  class RunningJobs;
  RunningJobs running() const;
  // A running job, or null.
  const RunningJob* find(JobId id) const;
  // The traffic a running job puts on the network (empty for an unknown job).
  const TrafficLoad& load(JobId id) const;

  // Starts `job` on `placement`. kFailedPrecondition (changing nothing) when a node lacks the
  // GPUs, is drained, or the job already runs.
  Status Allocate(const JobRequest& job, const Placement& placement, Seconds now);
  // Stops a running job, freeing its GPUs and traffic. kNotFound when it is not running.
  Status Release(JobId id);
  // Stops every job in `ids` in one pass (cheaper than one Release each). kNotFound, changing
  // nothing, when one of them is not running or is listed twice.
  Status ReleaseAll(std::vector<JobId> ids);
  // Adds `nodes` to a running job (a fault-tolerant job's new replica group), keeping its start
  // and last checkpoint. kNotFound or kFailedPrecondition (as Allocate), changing nothing.
  Status Grow(JobId id, const std::vector<int>& nodes);
  // Takes `nodes` from a running job (a lost replica group); it stops when none are left.
  // kNotFound, changing nothing, when it is not running or does not hold one of them.
  Status Shrink(JobId id, const std::vector<int>& nodes);
  void SetDrained(int node, bool drained);
  // Records a checkpoint of a running job (work before it survives a suspension) and, when
  // checkpoint_s >= 0, the seconds its checkpoints take to write (JobRequest::checkpoint_s).
  // kNotFound when it is not running.
  Status SetLastCheckpoint(JobId id, Seconds when, Seconds checkpoint_s = -1);

 private:
  struct Entry;
  void AddLoad(const TrafficLoad& load, double sign);
  void Free(const Entry& e);  // gives back an entry's GPUs and traffic
  // Index of `id` in running_, or of where it would go.
  std::size_t Slot(JobId id) const;

  const Topology* topology_;
  std::vector<int> free_gpus_;
  std::vector<bool> drained_;
  std::vector<int> leaf_free_nodes_;
  std::vector<double> leaf_load_;
  double cross_zone_load_ = 0;
  struct Entry {
    RunningJob job;
    TrafficLoad load;
  };
  // Sorted by job id. Entries are immutable and shared between copies, so copying a state (as
  // every what-if in a round does) copies pointers, not jobs.
  std::vector<std::shared_ptr<const Entry>> running_;
};

class ClusterState::RunningJobs {
 public:
  using Entries = std::vector<std::shared_ptr<const Entry>>;
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = RunningJob;
    using difference_type = std::ptrdiff_t;
    using pointer = const RunningJob*;
    using reference = const RunningJob&;
    explicit iterator(Entries::const_iterator it) : it_(it) {}
    reference operator*() const { return (*it_)->job; }
    pointer operator->() const { return &(*it_)->job; }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    iterator operator++(int) { return iterator(it_++); }
    bool operator==(const iterator& other) const { return it_ == other.it_; }

   private:
    Entries::const_iterator it_;
  };
  explicit RunningJobs(const Entries& entries) : entries_(&entries) {}
  iterator begin() const { return iterator(entries_->begin()); }
  iterator end() const { return iterator(entries_->end()); }
  std::size_t size() const { return entries_->size(); }
  bool empty() const { return entries_->empty(); }

 private:
  const Entries* entries_;
};

inline ClusterState::RunningJobs ClusterState::running() const {
  return RunningJobs(running_);
}

}  // namespace ff::scheduler

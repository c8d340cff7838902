// Jobs as the scheduler sees them: what they ask for, and where they run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ff::scheduler {

using JobId = int64_t;
using Seconds = int64_t;  // time in seconds; the caller's clock (wall time or simulated)

constexpr int kMinPriority = 0;
constexpr int kMaxPriority = 6;  // seven levels, as on HAI-Platform; higher runs first

enum class CommKind : uint8_t {
  kAllreduce,  // data parallel: a double binary tree over the nodes, heavy traffic
  kPipeline,   // pipeline stages: a chain over the nodes, may span zones
  kNone,       // no inter-node traffic
};

struct JobRequest {
  JobId id = 0;
  std::string user;
  int priority = 3;
  // A gang of `nodes` whole nodes using `gpus_per_node` GPUs each; or, with nodes == 0, a
  // sub-node job of `gpus` GPUs packed onto one node that other jobs may share.
  int nodes = 1;
  int gpus_per_node = 8;
  int gpus = 0;
  CommKind comm = CommKind::kAllreduce;
  double traffic_gbps = 0;      // each node's network traffic while running (estimate)
  bool may_span_zones = false;  // allreduce jobs never span zones unless this is set
  Seconds min_runtime = 0;      // not preempted before it has run this long
  Seconds submit_time = 0;
  Seconds expected_runtime = 0;  // 0: unknown (then never backfilled ahead of a reservation)
  // Set while the job waits because it was suspended for another job (its reasons say so).
  JobId preempted_by = 0;
  int preempted_by_priority = 0;
  Seconds preempted_at = 0;
  // When its locality wait began: the first round in which it could have started across leaves
  // but was held to wait for one leaf (Decision::locality_wait_started, kept by the caller);
  // -1 while it has not begun, and again after a round in which it could not start anywhere.
  // The wait counts from then, not from submission, so a job that queued for hours behind others
  // still gets its chance of one leaf once its turn comes.
  Seconds locality_wait_since = -1;
  // An elastic gang (a fault-tolerant job's replica groups of `node_step` nodes each): when all
  // `nodes` cannot be had, it starts with as many as fit in whole steps, down to `min_nodes`, and
  // its caller adds the rest as nodes free (Scheduler::Decide). 0: all or nothing.
  int min_nodes = 0;
  int node_step = 0;

  int TotalGpus() const { return nodes > 0 ? nodes * gpus_per_node : gpus; }
  bool Gang() const { return nodes > 0; }
  bool Elastic() const { return Gang() && node_step > 0 && min_nodes > 0 && min_nodes < nodes; }
};

// Where a job runs: its nodes in rank order (rank r on nodes[r]) and GPUs used on each.
struct Placement {
  std::vector<int> nodes;
  int gpus_per_node = 0;
  bool empty() const { return nodes.empty(); }
};

struct RunningJob {
  JobRequest request;
  Placement placement;
  Seconds start_time = 0;
  Seconds last_checkpoint = 0;  // work since then is lost if it is suspended
};

}  // namespace ff::scheduler

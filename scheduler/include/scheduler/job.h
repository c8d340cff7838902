// Jobs as the scheduler sees them: what they ask for, and where they run.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
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

// A running fault-tolerant job's replica without a live group: one for the scheduler to start
// (JobRequest::missing_groups).
struct MissingGroup {
  int replica = 0;
  // It had a group in this run, which was lost: a replacement restores it. Otherwise the run
  // began without it (an elastic start) and it joins as nodes free.
  bool lost = false;
  // When its last group ended (0: none did), and the start and end of each of its replacements
  // that ended: replacements that keep failing soon after they start are retried after a growing
  // wait (ReplacementPolicy).
  Seconds last_end = 0;
  std::vector<std::pair<Seconds, Seconds>> ended_replacements;
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
  // A fault-tolerant job: `nodes` / `node_step` replica groups of `node_step` nodes each, of
  // which it runs with at least `min_nodes` / `node_step`. When all `nodes` cannot be had, it
  // starts with as many groups as fit, down to `min_nodes` (an elastic gang), and later rounds
  // start the others as nodes free (Scheduler::Decide). node_step 0: one gang, all or nothing.
  int min_nodes = 0;
  int node_step = 0;
  // A running fault-tolerant job in a round's queue asks for these groups only (its run goes on
  // meanwhile): lost ones to replace, and those its run began without.
  std::vector<MissingGroup> missing_groups;
  // Nodes its replacement groups must not be placed on (those its run's straggling groups were
  // moved off: they are slow for this job, not drained for everyone).
  std::vector<int> avoid_nodes;
  // What suspending it costs (checkpoint-aware time-sharing): the seconds its checkpoints take
  // to write, as it reported them (0: it never reported one, so nothing says it can save on
  // suspension). RunningJob::last_checkpoint says when it last saved.
  Seconds checkpoint_s = 0;
  int replacements_placed = 0;  // in its current run
  int max_replacements = 0;     // a run's most; 0: ReplacementPolicy::per_replica per replica

  int TotalGpus() const { return nodes > 0 ? nodes * gpus_per_node : gpus; }
  bool Gang() const { return nodes > 0; }
  bool Elastic() const { return Gang() && node_step > 0 && min_nodes > 0 && min_nodes < nodes; }
  int Replicas() const { return node_step > 0 ? nodes / node_step : 0; }
  bool AsksForGroups() const { return !missing_groups.empty(); }
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

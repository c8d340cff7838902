// Job traces for hai-sim, and the seeded rules that turn them into scheduler jobs.
//
// Two CSV formats (../shared/traces/), told apart by their header line:
//   ITP / ElasticFlow: job_id,submission_time,duration,num_gpu
//   Tiresias:          job_id,num_gpu,submit_time,iterations,model_name,duration,interval
// Columns are found by name, so their order does not matter. Times are whole seconds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "scheduler/job.h"

namespace ff::scheduler {

struct TraceJob {
  std::string id;
  Seconds submit = 0;
  Seconds duration = 0;  // run time when placed well (the trace's measured duration)
  int gpus = 1;
  int line = 0;  // in the trace file, for messages
};

// Parses a trace. Errors (kInvalidArgument) name the source and line: an empty file, an unknown
// header, a row with the wrong number of fields, a field that is not a non-negative integer, a
// zero duration or GPU count. A missing newline after the last row is fine.
Result<std::vector<TraceJob>> ParseTrace(std::string_view text, const std::string& source);
Result<std::vector<TraceJob>> LoadTrace(const std::string& path);

// How trace jobs become JobRequests (the traces carry no user, priority or traffic):
//   - nodes = ceil(gpus / gpus_per_node) with gpus_per_node GPUs each when gpus >= gpus_per_node;
//     smaller jobs are sub-node jobs packed onto shared nodes;
//   - multi-node jobs communicate: allreduce with probability 1 - pipeline_share, else pipeline;
//     each node sends traffic_gbps (allreduce) or traffic_gbps / 2 (pipeline); single-node jobs
//     have no network traffic; allreduce jobs never span zones;
//   - user: one of `users`, and priority: 3 (70%), 4 (15%), 2 (10%), 5 (5%), both drawn from a
//     generator seeded by `seed` and the job's position, so a trace always gives the same jobs;
//   - expected run time = the trace duration; minimum run time before preemption 10 minutes;
//   - with probability ft_share, a multi-node job runs as replica groups (fault tolerant): R
//     groups, R the first of 8, 4, 2 that divides its nodes (else one node each), of which it
//     needs half (at least one).
struct WorkloadRules {
  uint64_t seed = 1;
  int gpus_per_node = 8;
  int users = 20;
  double pipeline_share = 0.2;
  double traffic_gbps = 100;
  Seconds min_runtime = 600;
  double ft_share = 0;
};
std::vector<JobRequest> MakeWorkload(const std::vector<TraceJob>& trace,
                                     const WorkloadRules& rules);

// A synthetic trace, for clusters the recorded traces cannot load (the 10,000-GPU topology: the
// ITP traces never queue there). Seeded: the same options give the same jobs.
//   - size: 1 GPU (40%), 2 or 4 GPUs (15%), 8 (20%), else multi-node: 2^k nodes of
//     gpus_per_node GPUs, k uniform in 1..log2(max_nodes) (a heavy tail: a job of max_nodes nodes
//     is as likely as one of 2);
//   - duration: log-normal with median `median_duration` and sigma 1.5, cut to 5 minutes..7 days
//     (multi-node jobs twice as long: large training runs last longer);
//   - arrivals: a Poisson process whose rate makes the offered load (GPU-seconds asked per
//     second) `load` times the cluster's GPUs; load 1 fills the cluster on average, more queues.
struct SyntheticWorkload {
  uint64_t seed = 1;
  std::size_t jobs = 10000;
  int cluster_gpus = 10000;
  int gpus_per_node = 8;
  int max_nodes = 128;
  double load = 1.5;
  Seconds median_duration = 3600;
};
std::vector<TraceJob> GenerateWorkload(const SyntheticWorkload& w);
// The trace in the ITP format (job_id,submission_time,duration,num_gpu), which ParseTrace reads.
std::string FormatTrace(const std::vector<TraceJob>& trace);

}  // namespace ff::scheduler

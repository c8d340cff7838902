// hai-sim place: where each policy puts a few jobs arriving on a cluster in a given state, and
// what the simulator's performance model predicts for them there. The network lab's placement
// experiment (deploy/netlab-bench.py) runs the same jobs on those nodes and compares.
//
//   hai-sim place --cluster FILE [--busy NODE,...] --job NODES[:GBPS[:B]] [--job ...]
//                 [--traffic-gbps G] [--comm-fraction F] [--bandwidth-share B] [--policies P,...]
//
// --busy nodes are taken by single-node jobs without network traffic before the jobs arrive (the
// same nodes under every policy). The jobs arrive in the order given; each is an allreduce job of
// NODES whole nodes sending GBPS per node (default --traffic-gbps), the share B of its
// communication bandwidth-bound (default --bandwidth-share), placed by the policy (the
// congestion-aware policy's locality wait is not modelled: a job placed is a job started). Prints
// one JSON object:
//   {"cluster": ..., "comm_fraction": F, "policies": [{"policy": P, "jobs": [{"job": 1,
//    "nodes": [...], "leaves": k, "cross_leaf_edges": e, "uplink_load": x, "slowdown": s,
//    "step_factor": t}]}]}
// where uplink_load is load / capacity of the most loaded uplink the job crosses with every job
// running, slowdown the model's CommSlowdown of its communication and step_factor its step time
// over its step time uncongested, (1 - F) + F * slowdown.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "common/cli_exit.h"
#include "scheduler/placement.h"
#include "scheduler/simulator.h"
#include "sweep.h"

namespace ff::scheduler {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct JobSpec {
  int nodes = 0;
  double gbps = -1;   // -1: --traffic-gbps
  double share = -1;  // -1: --bandwidth-share
};

Result<JobSpec> ParseJob(const std::string& s) {
  JobSpec job;
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ':');)
    parts.push_back(part);
  auto number = [](const std::string& text, double* out) {
    try {
      std::size_t used = 0;
      *out = std::stod(text, &used);
      return used == text.size();
    } catch (const std::exception&) {
      return false;
    }
  };
  double nodes = 0;
  if (parts.empty() || parts.size() > 3 || !number(parts[0], &nodes) ||
      nodes != std::floor(nodes) ||
      (parts.size() > 1 && (!number(parts[1], &job.gbps) || job.gbps < 0)) ||
      (parts.size() > 2 && (!number(parts[2], &job.share) || job.share < 0 || job.share > 1))) {
    return InvalidArgument("--job '" + s +
                           "': expected NODES, NODES:GBPS or NODES:GBPS:B (B from 0 to 1), e.g. "
                           "3:100:0.4");
  }
  if (nodes < 1 || nodes > 1e6) {
    return InvalidArgument("--job '" + s + "': a job needs at least one node");
  }
  job.nodes = static_cast<int>(nodes);
  return job;
}

}  // namespace

int PlaceMain(int argc, char** argv) {
  CLI::App app("Where each policy places a few jobs, and the performance model's prediction",
               "hai-sim place");
  std::string cluster_path;
  std::vector<std::string> busy, job_args;
  std::vector<std::string> policies = PlacementPolicyNames();
  double traffic_gbps = 10;
  PerformanceModel model;
  app.add_option("--cluster", cluster_path, "cluster.toml")->required();
  app.add_option("--busy", busy, "Nodes already taken by single-node jobs without traffic")
      ->delimiter(',');
  app.add_option("--job", job_args, "A job arriving, in order: NODES or NODES:GBPS")->required();
  app.add_option("--traffic-gbps", traffic_gbps, "Each node's traffic of a job without :GBPS")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--comm-fraction", model.allreduce_comm_fraction,
                 "Share of an allreduce job's uncongested step spent communicating")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--bandwidth-share", model.bandwidth_bound_share,
                 "Share of a job's communication bound by bandwidth, of a job without :B")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--policies", policies, "Policies to place with")->delimiter(',');
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "hai-sim place: %s\n", message.c_str());
    return 1;
  };
  auto topology = Topology::Load(cluster_path);
  if (!topology.ok()) return fail(topology.status().message());
  std::vector<JobSpec> specs;
  for (const std::string& s : job_args) {
    auto spec = ParseJob(s);
    if (!spec.ok()) return fail(spec.status().message());
    specs.push_back(*spec);
  }
  // The cluster as the jobs find it: the busy nodes run jobs without traffic.
  ClusterState start(*topology);
  std::set<int> taken;
  JobId next_id = 1000;
  for (const std::string& name : busy) {
    const int node = topology->FindNode(name);
    if (node < 0) return fail("--busy: no node '" + name + "' in " + cluster_path);
    if (!taken.insert(node).second) return fail("--busy: node '" + name + "' given twice");
    JobRequest filler;
    filler.id = next_id++;
    filler.gpus_per_node = topology->nodes()[node].gpus;
    filler.comm = CommKind::kNone;
    Status st = start.Allocate(filler, Placement{{node}, filler.gpus_per_node}, 0);
    if (!st.ok()) return fail(st.message());
  }
  std::ostringstream out;
  out << "{\"cluster\": " << Quote(topology->name())
      << ", \"comm_fraction\": " << model.allreduce_comm_fraction << ", \"policies\": [";
  for (std::size_t p = 0; p < policies.size(); ++p) {
    auto policy = MakePlacementPolicy(policies[p]);
    if (!policy) return fail("unknown policy '" + policies[p] + "'");
    ClusterState state = start;
    std::vector<JobRequest> jobs;
    for (std::size_t j = 0; j < specs.size(); ++j) {
      JobRequest job;
      job.id = static_cast<JobId>(j + 1);
      job.nodes = specs[j].nodes;
      job.gpus_per_node = topology->max_gpus_per_node();
      job.comm = CommKind::kAllreduce;
      job.traffic_gbps = specs[j].gbps >= 0 ? specs[j].gbps : traffic_gbps;
      std::string why;
      Placement placement = policy->Place(job, state, &why);
      if (placement.empty()) {
        return fail(std::string(policy->name()) + " cannot place job " + std::to_string(job.id) +
                    " (" + std::to_string(job.nodes) + " nodes): " + why);
      }
      Status st = state.Allocate(job, placement, 0);
      if (!st.ok()) return fail(st.message());
      jobs.push_back(job);
    }
    out << (p ? ", " : "") << "{\"policy\": " << Quote(policies[p]) << ", \"jobs\": [";
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const RunningJob* running = state.find(jobs[j].id);
      const TrafficLoad& load = state.load(jobs[j].id);
      std::set<int> leaves;
      out << (j ? ", " : "") << "{\"job\": " << jobs[j].id << ", \"nodes\": [";
      for (std::size_t r = 0; r < running->placement.nodes.size(); ++r) {
        const Node& node = topology->nodes()[running->placement.nodes[r]];
        leaves.insert(node.leaf);
        out << (r ? ", " : "") << Quote(node.name);
      }
      double uplink = 0;  // load / capacity of the most loaded uplink it crosses
      for (const auto& [leaf, gbps] : load.leaf_uplink_gbps) {
        uplink =
            std::max(uplink, state.leaf_uplink_load(leaf) / topology->leaves()[leaf].uplink_gbps);
      }
      PerformanceModel job_model = model;
      if (specs[j].share >= 0) job_model.bandwidth_bound_share = specs[j].share;
      const double slowdown = CommSlowdown(state, jobs[j].id, job_model);
      out << "], \"leaves\": " << leaves.size()
          << ", \"cross_leaf_edges\": " << load.cross_leaf_edges << ", \"uplink_load\": " << uplink
          << ", \"slowdown\": " << slowdown
          << ", \"step_factor\": " << 1.0 / ProgressRate(state, jobs[j], job_model) << "}";
    }
    out << "]}";
  }
  out << "]}\n";
  std::fputs(out.str().c_str(), stdout);
  return 0;
}

}  // namespace ff::scheduler

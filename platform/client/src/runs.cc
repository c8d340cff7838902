#include "platform/runs.h"

namespace ff::platform {

bool FaultTolerant(const hai::JobSpec& spec) {
  return spec.replicas() > 0;
}

int NodesAsked(const hai::JobSpec& spec) {
  return spec.nodes() * (FaultTolerant(spec) ? spec.replicas() : 1);
}

int MinReplicas(const hai::JobSpec& spec) {
  return spec.min_replicas() > 0 ? spec.min_replicas() : 1;
}

bool RunEnding(const hai::Run& run) {
  return !run.end_reason().empty();
}

GroupState StateOf(const hai::ReplicaGroup& group) {
  if (group.finished()) return GroupState::kFinished;
  if (group.end_reason().empty()) return GroupState::kRunning;
  return group.end_ms() == 0 ? GroupState::kLeaving : GroupState::kLost;
}

std::string GroupName(const hai::ReplicaGroup& group) {
  return std::to_string(group.replica()) +
         (group.incarnation() > 0 ? "." + std::to_string(group.incarnation()) : "");
}

std::set<int> StartedReplicas(const hai::Run& run) {
  std::set<int> started;
  for (const hai::ReplicaGroup& g : run.groups())
    started.insert(g.replica());
  return started;
}

int GroupOfNode(const hai::Run& run, const hai::JobSpec& spec, int node) {
  for (int g = 0; g < run.groups_size(); ++g) {
    const int first = run.groups(g).first_node();
    if (node >= first && node < first + spec.nodes()) return g;
  }
  return -1;
}

std::vector<int> HeldNodeSlots(const hai::Job& job) {
  std::vector<int> slots;
  if (job.runs().empty()) return slots;
  const hai::Run& run = job.runs(job.runs_size() - 1);
  for (int i = 0; i < run.nodes_size(); ++i) {
    if (FaultTolerant(job.spec())) {
      const int g = GroupOfNode(run, job.spec(), i);
      if (g < 0 || run.groups(g).end_ms() > 0) continue;
    }
    slots.push_back(i);
  }
  return slots;
}

std::vector<std::string> HeldNodes(const hai::Job& job) {
  std::vector<std::string> nodes;
  for (int i : HeldNodeSlots(job))
    nodes.push_back(job.runs(job.runs_size() - 1).nodes(i));
  return nodes;
}

}  // namespace ff::platform

// What a job's current run holds, read the same way by every reader of a hai::Job: hai-server
// (its accounting and the agents' tasks), `hai` and hai-web.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "platform/proto/hai.pb.h"

namespace ff::platform {

bool FaultTolerant(const hai::JobSpec& spec);  // replicas > 0: the job runs as replica groups
// The nodes a job asks for: nodes, times replicas for a fault-tolerant job.
int NodesAsked(const hai::JobSpec& spec);
// The replica groups a fault-tolerant job needs to run (JobSpec.min_replicas; 0 means 1).
int MinReplicas(const hai::JobSpec& spec);
// A run is ending once it has a cause (Run.end_reason): its ranks are being killed or are gone
// (Run.end_ms once every rank's exit is known).
bool RunEnding(const hai::Run& run);

// Where a replica group is in its life.
enum class GroupState {
  kRunning,   // its ranks run (or start)
  kLeaving,   // lost: its ranks are being killed, and some exit is not yet known
  kLost,      // lost, and every rank is gone
  kFinished,  // every rank exited 0: the training is over
};
GroupState StateOf(const hai::ReplicaGroup& group);
inline bool Live(const hai::ReplicaGroup& group) {
  return StateOf(group) == GroupState::kRunning;
}
// A group's name in its job's quorum (HAI_REPLICA_GROUP): its replica, with ".n" for the
// replica's n-th replacement ("2", "2.1"), so that a replacement is never taken for the group it
// replaces, which may still run cut off from the platform.
std::string GroupName(const hai::ReplicaGroup& group);
// The index in run.groups of the group holding the run's node slot `node`; -1 for none.
int GroupOfNode(const hai::Run& run, const hai::JobSpec& spec, int node);
// The node slots (indices into run.nodes) of the job's current run that still hold ranks as far
// as the server knows: every slot of a gang; a fault-tolerant run's slots of groups not gone.
std::vector<int> HeldNodeSlots(const hai::Job& job);
std::vector<std::string> HeldNodes(const hai::Job& job);  // their nodes
// The replicas that have had a group in `run` (an elastic start leaves some out until later).
std::set<int> StartedReplicas(const hai::Run& run);

}  // namespace ff::platform

// What a job's current run holds, read the same way by every reader of a hai::Job: hai-server
// (its accounting and the agents' tasks), `hai` and hai-web.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "platform/proto/hai.pb.h"

namespace ff::platform {

bool FaultTolerant(const hai::JobSpec& spec);  // replicas > 0: the job runs as replica groups
// The index in run.groups of the group holding the run's node slot `node`; -1 for none.
int GroupOfNode(const hai::Run& run, const hai::JobSpec& spec, int node);
// The node slots (indices into run.nodes) of the job's current run that still hold ranks as far
// as the server knows: every slot of a gang; a fault-tolerant run's slots of groups not gone.
std::vector<int> HeldNodeSlots(const hai::Job& job);
std::vector<std::string> HeldNodes(const hai::Job& job);  // their nodes
// The replicas that have had a group in `run` (an elastic start leaves some out until later).
std::set<int> StartedReplicas(const hai::Run& run);

}  // namespace ff::platform

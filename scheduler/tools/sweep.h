// hai-sim's subcommands besides the replay: sweep and generate (sweep.cc), place, topology.
#pragma once

namespace ff::scheduler {

// `argv[0]` is "sweep".
int SweepMain(int argc, char** argv);
// hai-sim generate: a synthetic trace (trace.h's SyntheticWorkload). `argv[0]` is "generate".
int GenerateMain(int argc, char** argv);
// hai-sim place (place.cc): each policy's placement of a few jobs and the model's prediction.
// `argv[0]` is "place".
int PlaceMain(int argc, char** argv);
// hai-sim topology (topology_main.cc): a cluster.toml as the scheduler reads it (--json for
// tools). `argv[0]` is "topology".
int TopologyMain(int argc, char** argv);

}  // namespace ff::scheduler

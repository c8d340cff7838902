// Fuzz target: cluster.toml (the topology the scheduler, hai-sim and the platform read). Any
// input gives a topology or an error; a topology's counts agree with each other.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/config.h"
#include "scheduler/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = ff::LoadConfigString<ff::scheduler::ClusterConfig>(text, "cluster.toml");
  if (!config.ok()) return 0;
  auto topology = ff::scheduler::Topology::Build(*config);
  if (!topology.ok()) {
    if (topology.status().message().empty()) std::abort();
    return 0;
  }
  int gpus = 0;
  for (const auto& node : topology->nodes())
    gpus += node.gpus;
  if (gpus != topology->total_gpus()) std::abort();
  return 0;
}

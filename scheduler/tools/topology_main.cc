// hai-sim topology: a cluster.toml as the scheduler reads it (and so hai-server), for every other
// reader of the file: zones, leaves with their uplinks, and nodes by the names the platform gives
// them. With --json, one object deploy's tooling reads instead of parsing cluster.toml itself.
//
//   hai-sim topology --cluster deploy/config/cluster-lab.toml [--json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/cli_exit.h"
#include "scheduler/topology.h"
#include "sweep.h"

namespace ff::scheduler {

int TopologyMain(int argc, char** argv) {
  CLI::App app("A cluster.toml as the scheduler reads it: zones, leaves and node names",
               "hai-sim topology");
  std::string cluster_path;
  bool json = false;
  app.add_option("--cluster", cluster_path, "cluster.toml")->required();
  app.add_flag("--json", json, "One JSON object (zones, leaves, nodes) instead of a table");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ExitForParseError(app, e);
  }
  auto topology = Topology::Load(cluster_path);
  if (!topology.ok()) {
    std::fprintf(stderr, "hai-sim topology: %s\n", topology.status().message().c_str());
    return 1;
  }
  const Topology& t = *topology;
  if (!json) {
    std::printf("%-24s %-16s %-8s %5s %5s %8s\n", "NODE", "LEAF", "ZONE", "GPUS", "CPUS",
                "MEM GiB");
    for (const Node& n : t.nodes()) {
      std::printf("%-24s %-16s %-8s %5d %5d %8lld\n", n.name.c_str(),
                  t.leaves()[n.leaf].name.c_str(), t.zones()[n.zone].name.c_str(), n.gpus, n.cpus,
                  static_cast<long long>(n.memory_gib));
    }
    return 0;
  }
  nlohmann::json out = {{"name", t.name()},
                        {"node_link_gbps", t.node_link_gbps()},
                        {"cross_zone_gbps", t.cross_zone_gbps()},
                        {"zones", nlohmann::json::array()}};
  for (const Zone& z : t.zones()) {
    nlohmann::json zone = {{"name", z.name}, {"leaves", nlohmann::json::array()}};
    for (int l = z.first_leaf; l < z.first_leaf + z.num_leaves; ++l) {
      const Leaf& leaf = t.leaves()[l];
      nlohmann::json nodes = nlohmann::json::array();
      for (int i = leaf.first_node; i < leaf.first_node + leaf.num_nodes; ++i) {
        const Node& n = t.nodes()[i];
        nodes.push_back(
            {{"name", n.name}, {"gpus", n.gpus}, {"cpus", n.cpus}, {"memory_gib", n.memory_gib}});
      }
      zone["leaves"].push_back(
          {{"name", leaf.name}, {"uplink_gbps", leaf.uplink_gbps}, {"nodes", std::move(nodes)}});
    }
    out["zones"].push_back(std::move(zone));
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace ff::scheduler

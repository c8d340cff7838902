#include "scheduler/topology.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "common/config.h"

namespace ff::scheduler {

void LeafGroupConfig::Bind(ConfigSection& s) {
  s.Required("name", name);
  s.Optional("count", count);
  s.Check(count >= 1 && count <= 10000, "count", "must be in 1..10000");
  s.Optional("nodes", nodes);
  s.Check(nodes >= 0 && nodes <= 10000, "nodes", "must be in 0..10000");
  s.Optional("node_names", node_names);
  s.Optional("gpus_per_node", gpus_per_node);
  s.Check(gpus_per_node >= 0 && gpus_per_node <= 64, "gpus_per_node", "must be in 0..64");
  s.Optional("cpus_per_node", cpus_per_node);
  s.Check(cpus_per_node >= 1, "cpus_per_node", "must be positive");
  s.Optional("memory_gib", memory_gib);
  s.Check(memory_gib >= 1, "memory_gib", "must be positive");
  s.Optional("uplink_gbps", uplink_gbps);
  s.Check(uplink_gbps >= 0, "uplink_gbps", "must not be negative");
}

void ZoneConfig::Bind(ConfigSection& s) {
  s.Required("name", name);
  s.Sections("leaves", leaves);
}

void ClusterConfig::Bind(ConfigSection& s) {
  s.Optional("name", name);
  s.Optional("node_link_gbps", node_link_gbps);
  s.Check(node_link_gbps > 0, "node_link_gbps", "must be positive");
  s.Optional("cross_zone_gbps", cross_zone_gbps);
  s.Check(cross_zone_gbps >= 0, "cross_zone_gbps", "must not be negative");
  s.Sections("zones", zones);
}

Result<Topology> Topology::Load(const std::string& path) {
  FF_ASSIGN_OR_RETURN(ClusterConfig config, LoadConfigFile<ClusterConfig>(path));
  Result<Topology> topology = Build(config);
  if (!topology.ok()) return topology.status().WithContext(path);
  return topology;
}

Result<Topology> Topology::Build(const ClusterConfig& config) {
  Topology t;
  t.name_ = config.name;
  t.node_link_gbps_ = config.node_link_gbps;
  t.cross_zone_gbps_ = config.cross_zone_gbps;
  if (config.zones.empty()) return InvalidArgument("cluster '" + config.name + "' has no zones");
  std::set<std::string> zone_names, leaf_names, node_names;
  for (const ZoneConfig& zc : config.zones) {
    if (zc.name.empty() || !zone_names.insert(zc.name).second) {
      return InvalidArgument("zone name '" + zc.name + "' is empty or used twice");
    }
    Zone zone{zc.name, static_cast<int>(t.leaves_.size()), 0, 0};
    const int zone_index = static_cast<int>(t.zones_.size());
    for (const LeafGroupConfig& group : zc.leaves) {
      if (!group.node_names.empty() && group.count != 1) {
        return InvalidArgument("zone " + zc.name + ", leaf '" + group.name +
                               "': node_names needs count = 1");
      }
      for (int64_t i = 0; i < group.count; ++i) {
        char suffix[32] = "";
        if (group.count > 1)
          std::snprintf(suffix, sizeof suffix, "%02lld", static_cast<long long>(i));
        std::string leaf_name = group.name + suffix;
        if (leaf_name.empty() || !leaf_names.insert(leaf_name).second) {
          return InvalidArgument("zone " + zc.name + ": leaf name '" + leaf_name +
                                 "' is empty or used twice");
        }
        std::vector<std::string> names = group.node_names;
        for (int64_t n = 0; group.node_names.empty() && n < group.nodes; ++n) {
          char node_suffix[32];
          std::snprintf(node_suffix, sizeof node_suffix, "-n%02lld", static_cast<long long>(n));
          names.push_back(leaf_name + node_suffix);
        }
        if (group.node_names.empty() && group.nodes == 0) {
          return InvalidArgument("zone " + zc.name + ", leaf " + leaf_name + " has no nodes");
        }
        Leaf leaf{leaf_name, zone_index, static_cast<int>(t.nodes_.size()),
                  static_cast<int>(names.size()),
                  group.uplink_gbps > 0
                      ? group.uplink_gbps
                      : config.node_link_gbps * static_cast<double>(names.size())};
        for (const std::string& node_name : names) {
          if (node_name.empty() || !node_names.insert(node_name).second) {
            return InvalidArgument("leaf " + leaf_name + ": node name '" + node_name +
                                   "' is empty or used twice");
          }
          t.nodes_.push_back(Node{node_name, static_cast<int>(t.leaves_.size()), zone_index,
                                  static_cast<int>(group.gpus_per_node),
                                  static_cast<int>(group.cpus_per_node), group.memory_gib});
          t.total_gpus_ += static_cast<int>(group.gpus_per_node);
          t.max_gpus_per_node_ =
              std::max(t.max_gpus_per_node_, static_cast<int>(group.gpus_per_node));
        }
        zone.num_nodes += leaf.num_nodes;
        t.max_leaf_nodes_ = std::max(t.max_leaf_nodes_, leaf.num_nodes);
        t.leaves_.push_back(leaf);
        ++zone.num_leaves;
      }
    }
    if (zone.num_leaves == 0) return InvalidArgument("zone " + zc.name + " has no leaves");
    t.zones_.push_back(zone);
  }
  return t;
}

int Topology::FindNode(const std::string& name) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string Topology::LeafPath(int node) const {
  const Node& n = nodes_.at(static_cast<std::size_t>(node));
  return zones_[static_cast<std::size_t>(n.zone)].name + "/" +
         leaves_[static_cast<std::size_t>(n.leaf)].name;
}

}  // namespace ff::scheduler

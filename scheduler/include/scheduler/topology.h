// The cluster's shape as the scheduler sees it: zones -> leaf switches -> nodes, with link
// bandwidths. Read from cluster.toml (deploy/config/cluster*.toml document every key); immutable
// once built, so it can be shared by every scheduling round. Thread-safe (read-only).
//
// Network model (a two-layer fat tree per zone, after Fire-Flyer 2): each node has one NIC of
// node_link_gbps to its leaf; each leaf has uplink_gbps of uplinks to its zone's spines (less
// than nodes x node_link_gbps when oversubscribed); the zones are joined by cross_zone_gbps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ff {
class ConfigSection;
}  // namespace ff

namespace ff::scheduler {

// ---- cluster.toml -------------------------------------------------------------------------------

// A run of leaves that look alike: `count` leaves named <name><index>, each with `nodes` nodes
// named <leaf name>-n<index>, or one leaf with explicit `node_names`.
struct LeafGroupConfig {
  std::string name;                     // leaf name, or prefix when count > 1
  int64_t count = 1;                    // leaves in this group
  int64_t nodes = 0;                    // nodes per leaf (ignored when node_names is given)
  std::vector<std::string> node_names;  // explicit node names (count must be 1)
  int64_t gpus_per_node = 8;
  int64_t cpus_per_node = 128;
  int64_t memory_gib = 512;
  double uplink_gbps = 0;  // 0: non-blocking (nodes x node_link_gbps)
  void Bind(ConfigSection& s);
};

struct ZoneConfig {
  std::string name;
  std::vector<LeafGroupConfig> leaves;
  void Bind(ConfigSection& s);
};

struct ClusterConfig {
  std::string name = "cluster";
  double node_link_gbps = 200;   // each node's NIC
  double cross_zone_gbps = 800;  // all links between zones together
  std::vector<ZoneConfig> zones;
  void Bind(ConfigSection& s);
};

// ---- The built topology -------------------------------------------------------------------------

struct Node {
  std::string name;
  int leaf;  // index into Topology::leaves()
  int zone;  // index into Topology::zones()
  int gpus;
  int cpus;
  int64_t memory_gib;
};

struct Leaf {
  std::string name;
  int zone;
  int first_node;  // nodes [first_node, first_node + num_nodes) are under this leaf
  int num_nodes;
  double uplink_gbps;
};

struct Zone {
  std::string name;
  int first_leaf;  // leaves [first_leaf, first_leaf + num_leaves)
  int num_leaves;
  int num_nodes;
};

class Topology {
 public:
  // Validates and builds. kInvalidArgument names the offending zone/leaf/node: empty or
  // duplicate names, zero nodes, non-positive GPU counts or bandwidths.
  static Result<Topology> Build(const ClusterConfig& config);
  // Reads cluster.toml (strict, as every config) and builds.
  static Result<Topology> Load(const std::string& path);

  const std::string& name() const { return name_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Leaf>& leaves() const { return leaves_; }
  const std::vector<Zone>& zones() const { return zones_; }
  double node_link_gbps() const { return node_link_gbps_; }
  double cross_zone_gbps() const { return cross_zone_gbps_; }
  int total_gpus() const { return total_gpus_; }
  int max_gpus_per_node() const { return max_gpus_per_node_; }
  int max_leaf_nodes() const { return max_leaf_nodes_; }  // nodes under the largest leaf
  // Index of the node called `name`, or -1.
  int FindNode(const std::string& name) const;
  // Where node `node` sits, as HFReduce groups its trees by: "zone/leaf" (HAI_LEAF).
  std::string LeafPath(int node) const;

 private:
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<Leaf> leaves_;
  std::vector<Zone> zones_;
  double node_link_gbps_ = 0;
  double cross_zone_gbps_ = 0;
  int total_gpus_ = 0;
  int max_gpus_per_node_ = 0;
  int max_leaf_nodes_ = 0;
};

}  // namespace ff::scheduler

// The double binary tree across nodes (DESIGN.md, "The two trees").
//
// Tree 1 is an in-order binary tree over nodes 0..N-1: node 0 is the root and its one child is
// the largest power of two below N; a node r > 0 whose lowest set bit has value b has parent
// (r & ~b) | 2b, or r & ~b when the former is >= N; its children are r - b/2 and r + b/2, the
// second with the offset halved until it falls below N; odd nodes are leaves.
// Tree 2 is tree 1 mirrored (node r plays N-1-r) when N is even, or shifted by one (node r plays
// (r+1) mod N) when N is odd. Pure functions; thread-safe.
//
// HFReduce moves data along these trees, grouped by leaf switch where it knows the leaves
// (DoubleBinaryTree below); the scheduler estimates a job's cross-leaf traffic from the same
// edges.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace ff {

struct TreePosition {
  int parent = -1;  // -1 at the root
  std::array<int, 2> children{-1, -1};
  int num_children = 0;  // children[0..num_children) are valid
};

// Node `rank`'s place in tree 1 of `n` nodes.
TreePosition InOrderTreePosition(int rank, int n);
// Node `rank`'s place in tree `which` (0 or 1) of the double binary tree of `n` nodes.
TreePosition DoubleBinaryTreePosition(int which, int rank, int n);
// The root of tree `which`.
int DoubleBinaryTreeRoot(int which, int n);

// The double binary tree over nodes grouped by the switch they sit under: `group_of_node[i]` is
// node i's leaf switch, named with its zone ("zone/leaf"; the zone is what comes before the last
// '/'). The nodes of each group form a double binary tree of their own (in node order), and the
// groups' roots are chained: in tree 0 group k's root hangs under group k-1's, in tree 1 under
// group k+1's (groups in order of first appearance, zone by zone). Each tree then crosses between
// groups groups-1 times and between zones zones-1 times, the fewest a spanning tree can, where
// the rank-ordered tree crosses wherever node order alternates (every edge, at worst). Every node
// keeps at most two children (a group's root has one of its own). The chain adds up to groups-1
// hops of depth, which a job under few leaf switches can afford.
// With one group, or when any label is empty (the topology is unknown), it is the tree of
// DoubleBinaryTreePosition.
class DoubleBinaryTree {
 public:
  // Rank order over n nodes.
  explicit DoubleBinaryTree(int n);
  // follow_groups false: rank order, with the groups known (CrossGroupEdges counts them).
  explicit DoubleBinaryTree(const std::vector<std::string>& group_of_node,
                            bool follow_groups = true);

  int size() const { return static_cast<int>(position_[0].size()); }
  const TreePosition& position(int which, int node) const {
    return position_[which][static_cast<std::size_t>(node)];
  }
  int root(int which) const { return root_[which]; }
  // Whether the tree follows the groups (false: rank order).
  bool grouped() const { return grouped_; }
  // Edges of tree `which` whose ends lie in different groups (0 when the groups are unknown).
  int CrossGroupEdges(int which) const;

 private:
  std::array<std::vector<TreePosition>, 2> position_;
  std::array<int, 2> root_{0, 0};
  std::vector<int> group_;  // node -> group index (empty when unknown)
  bool grouped_ = false;
};

}  // namespace ff

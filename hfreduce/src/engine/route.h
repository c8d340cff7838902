// Which of a node's double-binary-tree edges a chunk crosses, and in which direction (the Flow
// of its operation, op.h). Pure; built once per node engine.
//
//   kTree:      up to the parent and down from it; in from every child and out to it.
//   kToOwner:   one hop toward the owner's node: up when the owner is outside this node's
//               subtree, else into the child whose subtree holds it; every other edge brings a
//               partial sum in. Every edge is crossed exactly once.
//   kFromOwner: the reverse of kToOwner: in from the neighbour toward the owner, out to every
//               other neighbour. Every edge is crossed exactly once.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/double_binary_tree.h"
#include "engine/op.h"

namespace ff::hfreduce {

struct Route {
  Flow flow = Flow::kTree;
  int owner = -1;                      // the owner's node (kToOwner, kFromOwner)
  bool up = false;                     // this node -> parent
  bool down = false;                   // parent -> this node
  bool child_in[2] = {false, false};   // child i -> this node
  bool child_out[2] = {false, false};  // this node -> child i
};

class RouteTable {
 public:
  RouteTable(int node, const DoubleBinaryTree& trees);
  RouteTable(int node, int num_nodes) : RouteTable(node, DoubleBinaryTree(num_nodes)) {}
  // The route of a chunk of `flow` in tree `tree` (0 or 1) whose owner is node `owner` (ignored
  // for kTree).
  Route Of(Flow flow, int tree, int owner) const;
  const TreePosition& position(int tree) const { return tree_[tree]; }

 private:
  int num_nodes_;
  std::array<TreePosition, 2> tree_;
  // Per tree: whether node d lies in this node's subtree, and in child i's.
  std::array<std::vector<uint8_t>, 2> below_self_;
  std::array<std::array<std::vector<uint8_t>, 2>, 2> below_child_;
};

}  // namespace ff::hfreduce

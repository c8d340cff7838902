#include "engine/route.h"

namespace ff::hfreduce {

RouteTable::RouteTable(int node, const DoubleBinaryTree& trees) : num_nodes_(trees.size()) {
  const int num_nodes = trees.size();
  const auto n = static_cast<std::size_t>(num_nodes);
  for (int t = 0; t < 2; ++t) {
    tree_[t] = trees.position(t, node);
    below_self_[t].assign(n, 0);
    below_child_[t][0].assign(n, 0);
    below_child_[t][1].assign(n, 0);
    // Walk from every node d up to the root: d is below us if the walk meets us, and below
    // child i if the node it met us from is child i.
    for (int d = 0; d < num_nodes; ++d) {
      int prev = -1;
      for (int x = d; x >= 0; prev = x, x = trees.position(t, x).parent) {
        if (x != node) continue;
        below_self_[t][d] = 1;
        for (int i = 0; i < tree_[t].num_children; ++i) {
          if (tree_[t].children[i] == prev) below_child_[t][i][d] = 1;
        }
        break;
      }
    }
  }
}

Route RouteTable::Of(Flow flow, int t, int owner) const {
  Route r;
  r.flow = flow;
  const bool has_parent = num_nodes_ > 1 && tree_[t].parent >= 0;
  const int children = num_nodes_ > 1 ? tree_[t].num_children : 0;
  if (flow == Flow::kTree) {
    r.up = r.down = has_parent;
    for (int i = 0; i < children; ++i)
      r.child_in[i] = r.child_out[i] = true;
    return r;
  }
  r.owner = owner;
  const bool below = below_self_[t][static_cast<std::size_t>(owner)] != 0;
  const bool toward = flow == Flow::kToOwner;
  r.up = has_parent && (toward ? !below : below);
  r.down = has_parent && (toward ? below : !below);
  for (int i = 0; i < children; ++i) {
    const bool in_child = below_child_[t][i][static_cast<std::size_t>(owner)] != 0;
    r.child_in[i] = toward ? !in_child : in_child;
    r.child_out[i] = toward ? in_child : !in_child;
  }
  return r;
}

}  // namespace ff::hfreduce

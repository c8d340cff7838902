#include "common/double_binary_tree.h"

#include <algorithm>
#include <map>

namespace ff {
namespace {

int LargestPowerOfTwoBelow(int n) {
  int p = 1;
  while (p * 2 < n)
    p *= 2;
  return p;
}

// Maps a role in tree 1 to the node that plays it in tree `which`, and back.
int RoleOf(int which, int rank, int n) {
  if (which == 0) return rank;
  return n % 2 == 0 ? n - 1 - rank : (rank + 1) % n;
}
int NodeOf(int which, int role, int n) {
  if (which == 0 || role < 0) return role;
  return n % 2 == 0 ? n - 1 - role : (role - 1 + n) % n;
}

}  // namespace

TreePosition InOrderTreePosition(int rank, int n) {
  TreePosition pos;
  if (n <= 1) return pos;
  if (rank == 0) {
    pos.children[0] = LargestPowerOfTwoBelow(n);
    pos.num_children = 1;
    return pos;
  }
  int b = rank & -rank;  // lowest set bit
  int up = (rank & ~b) | (2 * b);
  pos.parent = up < n ? up : (rank & ~b);
  if (b > 1) {
    pos.children[pos.num_children++] = rank - b / 2;
    for (int off = b / 2; off >= 1; off /= 2) {
      if (rank + off < n) {
        pos.children[pos.num_children++] = rank + off;
        break;
      }
    }
  }
  return pos;
}

TreePosition DoubleBinaryTreePosition(int which, int rank, int n) {
  TreePosition role = InOrderTreePosition(RoleOf(which, rank, n), n);
  TreePosition pos;
  pos.parent = NodeOf(which, role.parent, n);
  pos.num_children = role.num_children;
  for (int i = 0; i < role.num_children; ++i)
    pos.children[i] = NodeOf(which, role.children[i], n);
  return pos;
}

int DoubleBinaryTreeRoot(int which, int n) {
  return NodeOf(which, 0, n);
}

DoubleBinaryTree::DoubleBinaryTree(int n) {
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < n; ++r)
      position_[t].push_back(DoubleBinaryTreePosition(t, r, n));
    root_[t] = DoubleBinaryTreeRoot(t, n);
  }
}

DoubleBinaryTree::DoubleBinaryTree(const std::vector<std::string>& group_of_node,
                                   bool follow_groups)
    : DoubleBinaryTree(static_cast<int>(group_of_node.size())) {
  const int n = size();
  if (n < 2 || std::any_of(group_of_node.begin(), group_of_node.end(),
                           [](const std::string& g) { return g.empty(); })) {
    return;
  }
  // Groups in order of first appearance, zone by zone (zones in order of first appearance too).
  auto zone_of = [](const std::string& g) {
    const auto slash = g.rfind('/');
    return slash == std::string::npos ? std::string() : g.substr(0, slash);
  };
  std::vector<std::string> zones, groups;
  for (const std::string& g : group_of_node) {
    if (std::find(zones.begin(), zones.end(), zone_of(g)) == zones.end()) {
      zones.push_back(zone_of(g));
    }
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  std::stable_sort(groups.begin(), groups.end(), [&](const std::string& a, const std::string& b) {
    return std::find(zones.begin(), zones.end(), zone_of(a)) <
           std::find(zones.begin(), zones.end(), zone_of(b));
  });
  std::vector<std::vector<int>> members(groups.size());
  group_.assign(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(
        std::find(groups.begin(), groups.end(), group_of_node[static_cast<std::size_t>(i)]) -
        groups.begin());
    members[k].push_back(i);
    group_[static_cast<std::size_t>(i)] = static_cast<int>(k);
  }
  // One group: the rank-ordered tree is the same tree.
  if (!follow_groups || groups.size() < 2) return;
  grouped_ = true;
  const int num_groups = static_cast<int>(groups.size());
  for (int t = 0; t < 2; ++t) {
    std::vector<int> group_root(static_cast<std::size_t>(num_groups));
    for (int k = 0; k < num_groups; ++k) {
      const std::vector<int>& m = members[static_cast<std::size_t>(k)];
      const int size = static_cast<int>(m.size());
      auto node = [&](int local) { return local < 0 ? -1 : m[static_cast<std::size_t>(local)]; };
      for (int j = 0; j < size; ++j) {
        TreePosition local = DoubleBinaryTreePosition(t, j, size);
        TreePosition& pos = position_[t][static_cast<std::size_t>(node(j))];
        pos.parent = node(local.parent);
        pos.num_children = local.num_children;
        for (int c = 0; c < local.num_children; ++c)
          pos.children[static_cast<std::size_t>(c)] =
              node(local.children[static_cast<std::size_t>(c)]);
        for (int c = local.num_children; c < 2; ++c)
          pos.children[static_cast<std::size_t>(c)] = -1;
      }
      group_root[static_cast<std::size_t>(k)] = node(DoubleBinaryTreeRoot(t, size));
    }
    // The chain of the groups' roots: down the group order in tree 0, up it in tree 1. A group's
    // root has at most one child of its own (the in-order root has one), so room for this one.
    for (int k = 0; k < num_groups; ++k) {
      const int above = t == 0 ? k - 1 : k + 1;
      if (above < 0 || above >= num_groups) {
        root_[t] = group_root[static_cast<std::size_t>(k)];
        continue;
      }
      const int child = group_root[static_cast<std::size_t>(k)];
      const int parent = group_root[static_cast<std::size_t>(above)];
      position_[t][static_cast<std::size_t>(child)].parent = parent;
      TreePosition& p = position_[t][static_cast<std::size_t>(parent)];
      p.children[static_cast<std::size_t>(p.num_children++)] = child;
    }
  }
}

int DoubleBinaryTree::CrossGroupEdges(int which) const {
  if (group_.empty()) return 0;
  int edges = 0;
  for (int i = 0; i < size(); ++i) {
    const int p = position(which, i).parent;
    if (p >= 0 && group_[static_cast<std::size_t>(p)] != group_[static_cast<std::size_t>(i)]) {
      ++edges;
    }
  }
  return edges;
}

}  // namespace ff

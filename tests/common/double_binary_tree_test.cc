#include "common/double_binary_tree.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

namespace ff {
namespace {

std::vector<int> Children(const TreePosition& p) {
  return std::vector<int>(p.children.begin(), p.children.begin() + p.num_children);
}

TEST(DoubleBinaryTreeTest, TwelveNodesAsInTheDesign) {
  // 0 -> 8, 8 -> {4, 10}, 4 -> {2, 6}, 10 -> {9, 11}
  EXPECT_EQ(Children(InOrderTreePosition(0, 12)), (std::vector<int>{8}));
  EXPECT_EQ(Children(InOrderTreePosition(8, 12)), (std::vector<int>{4, 10}));
  EXPECT_EQ(Children(InOrderTreePosition(4, 12)), (std::vector<int>{2, 6}));
  EXPECT_EQ(Children(InOrderTreePosition(10, 12)), (std::vector<int>{9, 11}));
  EXPECT_EQ(InOrderTreePosition(8, 12).parent, 0);
  EXPECT_EQ(InOrderTreePosition(10, 12).parent, 8);
  EXPECT_EQ(InOrderTreePosition(6, 12).parent, 4);
  EXPECT_EQ(InOrderTreePosition(0, 12).parent, -1);
  EXPECT_TRUE(Children(InOrderTreePosition(7, 12)).empty());
  // Tree 2 mirrors tree 1 for even N: node 11 is the root, its child is 3 (= 11 - 8).
  EXPECT_EQ(DoubleBinaryTreeRoot(1, 12), 11);
  EXPECT_EQ(Children(DoubleBinaryTreePosition(1, 11, 12)), (std::vector<int>{3}));
  EXPECT_EQ(Children(DoubleBinaryTreePosition(1, 3, 12)), (std::vector<int>{7, 1}));
}

TEST(DoubleBinaryTreeTest, SingleNodeIsARootWithoutChildren) {
  for (int which : {0, 1}) {
    TreePosition p = DoubleBinaryTreePosition(which, 0, 1);
    EXPECT_EQ(p.parent, -1);
    EXPECT_EQ(p.num_children, 0);
    EXPECT_EQ(DoubleBinaryTreeRoot(which, 1), 0);
  }
}

TEST(DoubleBinaryTreeTest, BothTreesAreSpanningTreesForEverySize) {
  for (int n = 1; n <= 130; ++n) {
    for (int which : {0, 1}) {
      int root = DoubleBinaryTreeRoot(which, n);
      std::vector<TreePosition> pos;
      for (int r = 0; r < n; ++r)
        pos.push_back(DoubleBinaryTreePosition(which, r, n));
      // Parent and child links agree, and only the root has no parent.
      for (int r = 0; r < n; ++r) {
        if (r == root) {
          EXPECT_EQ(pos[r].parent, -1) << n << " " << which;
        } else {
          ASSERT_GE(pos[r].parent, 0) << "n=" << n << " tree=" << which << " r=" << r;
          ASSERT_LT(pos[r].parent, n);
          std::vector<int> siblings = Children(pos[pos[r].parent]);
          EXPECT_NE(std::find(siblings.begin(), siblings.end(), r), siblings.end())
              << "n=" << n << " tree=" << which << " r=" << r;
        }
        for (int c : Children(pos[r])) {
          ASSERT_GE(c, 0);
          ASSERT_LT(c, n);
          EXPECT_EQ(pos[c].parent, r);
        }
      }
      // Every node is reached from the root exactly once.
      std::set<int> seen;
      std::vector<int> stack = {root};
      while (!stack.empty()) {
        int r = stack.back();
        stack.pop_back();
        ASSERT_TRUE(seen.insert(r).second) << "cycle at " << r;
        for (int c : Children(pos[r]))
          stack.push_back(c);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), n) << "n=" << n << " tree=" << which;
    }
  }
}

TEST(DoubleBinaryTreeTest, NoNodeIsALeafInBothTrees) {
  // This is what lets every node send and receive at about the same rate in total.
  for (int n = 2; n <= 130; ++n) {
    for (int r = 0; r < n; ++r) {
      bool leaf0 = DoubleBinaryTreePosition(0, r, n).num_children == 0;
      bool leaf1 = DoubleBinaryTreePosition(1, r, n).num_children == 0;
      EXPECT_FALSE(leaf0 && leaf1) << "n=" << n << " r=" << r;
    }
  }
}

// Checks that tree `which` of `tree` spans its nodes: links agree both ways, one root, no cycle,
// at most two children each.
void ExpectSpanningTree(const DoubleBinaryTree& tree, int which, const std::string& what) {
  const int n = tree.size();
  const int root = tree.root(which);
  ASSERT_GE(root, 0) << what;
  ASSERT_LT(root, n) << what;
  for (int r = 0; r < n; ++r) {
    const TreePosition& pos = tree.position(which, r);
    ASSERT_LE(pos.num_children, 2) << what;
    if (r == root) {
      EXPECT_EQ(pos.parent, -1) << what;
    } else {
      ASSERT_GE(pos.parent, 0) << what << " r=" << r;
      ASSERT_LT(pos.parent, n) << what;
      std::vector<int> siblings = Children(tree.position(which, pos.parent));
      EXPECT_NE(std::find(siblings.begin(), siblings.end(), r), siblings.end())
          << what << " r=" << r;
    }
    for (int c : Children(pos)) {
      ASSERT_GE(c, 0) << what;
      ASSERT_LT(c, n) << what;
      EXPECT_EQ(tree.position(which, c).parent, r) << what;
    }
  }
  std::set<int> seen;
  std::vector<int> stack = {root};
  while (!stack.empty()) {
    int r = stack.back();
    stack.pop_back();
    ASSERT_TRUE(seen.insert(r).second) << what << ": cycle at " << r;
    for (int c : Children(tree.position(which, r)))
      stack.push_back(c);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), n) << what;
}

int CrossEdges(const DoubleBinaryTree& tree, int which, const std::vector<std::string>& label) {
  int edges = 0;
  for (int r = 0; r < tree.size(); ++r) {
    const int p = tree.position(which, r).parent;
    if (p >= 0 && label[static_cast<std::size_t>(p)] != label[static_cast<std::size_t>(r)]) {
      ++edges;
    }
  }
  return edges;
}

std::string ZoneOf(const std::string& leaf) {
  return leaf.substr(0, leaf.rfind('/'));
}

TEST(DoubleBinaryTreeTest, RankOrderIsTheTreeOfTheFreeFunctions) {
  for (int n = 1; n <= 40; ++n) {
    DoubleBinaryTree tree(n);
    for (int which : {0, 1}) {
      EXPECT_EQ(tree.root(which), DoubleBinaryTreeRoot(which, n));
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(tree.position(which, r).parent, DoubleBinaryTreePosition(which, r, n).parent);
        EXPECT_EQ(Children(tree.position(which, r)),
                  Children(DoubleBinaryTreePosition(which, r, n)));
      }
    }
    EXPECT_FALSE(tree.grouped());
  }
}

TEST(DoubleBinaryTreeTest, OneLeafOrAnUnknownOneKeepsRankOrder) {
  for (int n = 1; n <= 20; ++n) {
    std::vector<std::string> same(static_cast<std::size_t>(n), "A/leaf0");
    std::vector<std::string> unknown(static_cast<std::size_t>(n), "A/leaf0");
    unknown[static_cast<std::size_t>(n / 2)] = "";
    for (const auto& labels : {same, unknown}) {
      DoubleBinaryTree tree(labels);
      EXPECT_FALSE(tree.grouped());
      for (int which : {0, 1}) {
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(tree.position(which, r).parent, DoubleBinaryTreePosition(which, r, n).parent);
        }
      }
    }
  }
}

TEST(DoubleBinaryTreeTest, GroupedTreesCrossEachLeafAndZoneBoundaryOnce) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 48);
    const int zones = 1 + static_cast<int>(rng() % 3);
    const int leaves = 1 + static_cast<int>(rng() % 6);
    std::vector<std::string> label;
    std::set<std::string> distinct_leaves, distinct_zones;
    for (int r = 0; r < n; ++r) {
      const int leaf = static_cast<int>(rng() % static_cast<unsigned>(leaves));
      label.push_back("z" + std::to_string(leaf % zones) + "/leaf" + std::to_string(leaf));
      distinct_leaves.insert(label.back());
      distinct_zones.insert(ZoneOf(label.back()));
    }
    const std::string what = "trial " + std::to_string(trial) + " n=" + std::to_string(n);
    DoubleBinaryTree tree(label);
    DoubleBinaryTree rank_order(label, /*follow_groups=*/false);
    EXPECT_EQ(tree.grouped(), distinct_leaves.size() > 1) << what;
    std::vector<std::string> zone_of;
    for (const auto& l : label)
      zone_of.push_back(ZoneOf(l));
    for (int which : {0, 1}) {
      ExpectSpanningTree(tree, which, what + " tree " + std::to_string(which));
      const int crossings = static_cast<int>(distinct_leaves.size()) - 1;
      EXPECT_EQ(CrossEdges(tree, which, label), crossings) << what;
      EXPECT_EQ(CrossEdges(tree, which, zone_of), static_cast<int>(distinct_zones.size()) - 1)
          << what;
      EXPECT_EQ(tree.CrossGroupEdges(which), tree.grouped() ? crossings : 0) << what;
      // No spanning tree crosses fewer times; rank order never does better.
      EXPECT_GE(rank_order.CrossGroupEdges(which), tree.CrossGroupEdges(which)) << what;
      EXPECT_EQ(rank_order.CrossGroupEdges(which), CrossEdges(rank_order, which, label)) << what;
    }
    if (tree.grouped()) {
      for (int r = 0; r < n; ++r) {
        EXPECT_FALSE(tree.position(0, r).num_children == 0 && tree.position(1, r).num_children == 0)
            << what << " r=" << r << " is a leaf in both trees";
      }
    }
  }
}

TEST(DoubleBinaryTreeTest, TwoLeavesInterleavedCrossTheUplinksAQuarterAsOften) {
  // Nodes alternate between two leaves in rank order, as a replacement node or a placement in
  // name order leaves them.
  std::vector<std::string> label;
  for (int r = 0; r < 8; ++r)
    label.push_back(r % 2 == 0 ? "A/leaf0" : "A/leaf1");
  DoubleBinaryTree grouped(label), rank_order(label, false);
  EXPECT_EQ(rank_order.CrossGroupEdges(0) + rank_order.CrossGroupEdges(1), 8);
  EXPECT_EQ(grouped.CrossGroupEdges(0) + grouped.CrossGroupEdges(1), 2);
  // Four nodes in two halves: the in-order tree's root edge and its child's edge both cross.
  DoubleBinaryTree halves({"A/l0", "A/l0", "A/l1", "A/l1"}),
      halves_rank({"A/l0", "A/l0", "A/l1", "A/l1"}, false);
  EXPECT_EQ(halves_rank.CrossGroupEdges(0) + halves_rank.CrossGroupEdges(1), 4);
  EXPECT_EQ(halves.CrossGroupEdges(0) + halves.CrossGroupEdges(1), 2);
  // The two trees cross at different nodes: each group's first node in tree 0, its last in tree 1.
  EXPECT_EQ(halves.root(0), 0);
  EXPECT_EQ(halves.position(0, 2).parent, 0);
  EXPECT_EQ(halves.root(1), 3);
  EXPECT_EQ(halves.position(1, 1).parent, 3);
}

}  // namespace
}  // namespace ff

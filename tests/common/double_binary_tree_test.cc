#include "common/double_binary_tree.h"

#include <gtest/gtest.h>

#include <set>
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

}  // namespace
}  // namespace ff

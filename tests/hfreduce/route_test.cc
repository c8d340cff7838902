// The routes chunks take between nodes: both ends of every tree edge agree on what crosses it,
// an allreduce chunk crosses every edge twice, and a reduce-scatter or allgather chunk once, so
// those two move half of an allreduce's bytes.
#include "engine/route.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ff::hfreduce {
namespace {

constexpr Flow kFlows[] = {Flow::kTree, Flow::kToOwner, Flow::kFromOwner};

struct Crossings {
  int edges = 0;          // tree edges (N - 1)
  int sends = 0;          // (edge, direction) pairs the chunk crosses
  bool agree = true;      // every send has the matching receive at the other end
  std::vector<int> outs;  // per node: edges it sends the chunk over
  std::vector<int> ins;   // per node: edges it receives the chunk over
};

Crossings Count(Flow flow, int tree, const DoubleBinaryTree& trees, int owner) {
  const int n = trees.size();
  std::vector<RouteTable> tables;
  for (int node = 0; node < n; ++node)
    tables.emplace_back(node, trees);
  Crossings x;
  x.outs.assign(n, 0);
  x.ins.assign(n, 0);
  for (int node = 0; node < n; ++node) {
    Route r = tables[node].Of(flow, tree, owner);
    const TreePosition& pos = tables[node].position(tree);
    for (int i = 0; i < pos.num_children; ++i) {
      ++x.edges;
      const int child = pos.children[i];
      Route cr = tables[child].Of(flow, tree, owner);
      if (r.child_out[i] != cr.down || r.child_in[i] != cr.up) x.agree = false;
      x.sends += (r.child_out[i] ? 1 : 0) + (r.child_in[i] ? 1 : 0);
      if (r.child_out[i]) ++x.outs[node], ++x.ins[child];
      if (r.child_in[i]) ++x.ins[node], ++x.outs[child];
    }
  }
  return x;
}

TEST(RouteTest, BothEndsOfEveryEdgeAgreeForEveryFlowTreeAndOwner) {
  for (int n = 1; n <= 33; ++n) {
    for (Flow flow : kFlows) {
      for (int tree = 0; tree < 2; ++tree) {
        for (int owner = 0; owner < n; ++owner) {
          EXPECT_TRUE(Count(flow, tree, DoubleBinaryTree(n), owner).agree)
              << "n " << n << " tree " << tree << " owner " << owner;
        }
      }
    }
  }
}

TEST(RouteTest, AllreduceChunksCrossEveryEdgeBothWays) {
  for (int n = 1; n <= 33; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      Crossings x = Count(Flow::kTree, tree, DoubleBinaryTree(n), 0);
      EXPECT_EQ(x.edges, n - 1);
      EXPECT_EQ(x.sends, 2 * (n - 1)) << "n " << n;
    }
  }
}

TEST(RouteTest, ReduceScatterChunksCrossEveryEdgeOnceTowardTheirOwner) {
  for (int n = 1; n <= 33; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      for (int owner = 0; owner < n; ++owner) {
        Crossings x = Count(Flow::kToOwner, tree, DoubleBinaryTree(n), owner);
        EXPECT_EQ(x.sends, n - 1) << "n " << n << " owner " << owner;
        // Every node but the owner passes its sum on exactly once; the owner keeps it.
        for (int node = 0; node < n; ++node)
          EXPECT_EQ(x.outs[node], node == owner ? 0 : 1) << "n " << n << " node " << node;
      }
    }
  }
}

TEST(RouteTest, AllgatherChunksCrossEveryEdgeOnceOutFromTheirOwner) {
  for (int n = 1; n <= 33; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      for (int owner = 0; owner < n; ++owner) {
        Crossings x = Count(Flow::kFromOwner, tree, DoubleBinaryTree(n), owner);
        EXPECT_EQ(x.sends, n - 1) << "n " << n << " owner " << owner;
        // Every node but the owner receives it exactly once; the owner never does.
        for (int node = 0; node < n; ++node)
          EXPECT_EQ(x.ins[node], node == owner ? 0 : 1) << "n " << n << " node " << node;
      }
    }
  }
}

TEST(RouteTest, TreesGroupedByLeafRouteEveryFlowLikeRankOrderedOnes) {
  // Leaves of 1 to 4 nodes, interleaved in node order and contiguous.
  const std::vector<std::vector<std::string>> layouts = {
      {"A/l0", "A/l1"},
      {"A/l0", "A/l1", "A/l0", "A/l1"},
      {"A/l0", "A/l0", "A/l1", "A/l1", "B/l2"},
      {"A/l0", "B/l1", "A/l2", "B/l1", "A/l0", "A/l2", "B/l3", "A/l0", "B/l3"},
      {"A/l0", "A/l1", "A/l2", "A/l3", "A/l4", "A/l5", "A/l6"},
  };
  for (const auto& leaves : layouts) {
    DoubleBinaryTree trees(leaves);
    ASSERT_TRUE(trees.grouped());
    const int n = trees.size();
    for (int tree = 0; tree < 2; ++tree) {
      Crossings all = Count(Flow::kTree, tree, trees, 0);
      EXPECT_TRUE(all.agree);
      EXPECT_EQ(all.edges, n - 1);
      EXPECT_EQ(all.sends, 2 * (n - 1));
      for (int owner = 0; owner < n; ++owner) {
        Crossings to = Count(Flow::kToOwner, tree, trees, owner);
        Crossings from = Count(Flow::kFromOwner, tree, trees, owner);
        EXPECT_TRUE(to.agree && from.agree) << "n " << n << " owner " << owner;
        EXPECT_EQ(to.sends, n - 1);
        EXPECT_EQ(from.sends, n - 1);
        for (int node = 0; node < n; ++node) {
          EXPECT_EQ(to.outs[node], node == owner ? 0 : 1) << "n " << n << " node " << node;
          EXPECT_EQ(from.ins[node], node == owner ? 0 : 1) << "n " << n << " node " << node;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ff::hfreduce

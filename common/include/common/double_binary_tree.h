// The double binary tree across nodes (DESIGN.md, "The two trees").
//
// Tree 1 is an in-order binary tree over nodes 0..N-1: node 0 is the root and its one child is
// the largest power of two below N; a node r > 0 whose lowest set bit has value b has parent
// (r & ~b) | 2b, or r & ~b when the former is >= N; its children are r - b/2 and r + b/2, the
// second with the offset halved until it falls below N; odd nodes are leaves.
// Tree 2 is tree 1 mirrored (node r plays N-1-r) when N is even, or shifted by one (node r plays
// (r+1) mod N) when N is odd. Pure functions; thread-safe.
//
// HFReduce moves data along these trees; the scheduler places a job's ranks so that tree
// neighbours share a leaf switch, and estimates the job's cross-leaf traffic from the same edges.
#pragma once

#include <array>

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

}  // namespace ff

#include "common/double_binary_tree.h"

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

}  // namespace ff

#include "fs3/permissions.h"

#include <algorithm>

namespace ff::fs3 {

using fs3rpc::Inode;

bool Permitted(const Caller& c, const Inode& inode, uint32_t mask) {
  const uint32_t mode = inode.mode();
  if (c.root()) {
    // Root may read and write anything; execute needs some execute bit (or a directory).
    return (mask & 1) == 0 || inode.type() == fs3rpc::INODE_DIR || (mode & 0111) != 0;
  }
  uint32_t bits;
  if (c.uid == inode.uid()) {
    bits = (mode >> 6) & 7;
  } else if (c.gid == inode.gid() ||
             std::find(c.groups.begin(), c.groups.end(), inode.gid()) != c.groups.end()) {
    bits = (mode >> 3) & 7;
  } else {
    bits = mode & 7;
  }
  return (bits & mask) == mask;
}

}  // namespace ff::fs3

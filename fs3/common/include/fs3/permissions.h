// The POSIX permission rule by uid / gid / supplementary groups / mode bits, on its own (pure
// logic, no store), so that fs3-meta, the FUSE daemon and the native client (libfs3c, which must
// not link RocksDB) decide alike.
#pragma once

#include <cstdint>

#include "fs3/meta_types.h"
#include "fs3/proto/meta.pb.h"

namespace ff::fs3 {

// Whether `c` may access `inode` for `mask` (4 read, 2 write, 1 execute / search), by the owner,
// group or other bits; root may read and write anything, and execute what has an execute bit.
bool Permitted(const Caller& c, const fs3rpc::Inode& inode, uint32_t mask);

}  // namespace ff::fs3

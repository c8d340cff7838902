// The namespace's vocabulary shared by fs3-meta's store and every client (the FUSE daemon, the
// native client): who asks, what a directory entry is, the root and the name limit. No store in
// here: a client includes this, never fs3/meta_store.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fs3/proto/meta.pb.h"

namespace ff::fs3 {

constexpr uint64_t kRootIno = 1;
constexpr std::size_t kMaxNameBytes = 255;

// Who asks: the calling process's credentials.
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary
  bool root() const { return uid == 0; }
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  fs3rpc::InodeType type = fs3rpc::INODE_FILE;
};

enum RenameFlags : uint32_t {
  kRenameNoReplace = 1,  // RENAME_NOREPLACE
  kRenameExchange = 2,   // RENAME_EXCHANGE
};

enum XattrFlags : uint32_t {
  kXattrCreate = 1,   // XATTR_CREATE: fail if it exists
  kXattrReplace = 2,  // XATTR_REPLACE: fail if it does not
};

}  // namespace ff::fs3

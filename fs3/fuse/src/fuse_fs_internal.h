// Inside fs3-fuse, shared by the files that implement FuseFs (fuse_fs.cc: options, credentials,
// the attribute and extended-attribute caches, namespace and directory operations; fuse_data.cc:
// open files, read-ahead and write gathering; fuse_ops.cc: the table of FUSE low-level
// operations): conversions between the kernel's and fs3's types.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "fuse_fs.h"

namespace ff::fs3 {
namespace fuse_detail {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kReaddirPage = 1024;
constexpr uint64_t kReadaheadBlocks = 2;  // blocks fetched ahead of a sequential reader

inline fs3rpc::InodeType TypeOfMode(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFDIR:
      return fs3rpc::INODE_DIR;
    case S_IFLNK:
      return fs3rpc::INODE_SYMLINK;
    case S_IFIFO:
      return fs3rpc::INODE_FIFO;
    case S_IFSOCK:
      return fs3rpc::INODE_SOCKET;
    case S_IFCHR:
      return fs3rpc::INODE_CHR;
    case S_IFBLK:
      return fs3rpc::INODE_BLK;
    default:
      return fs3rpc::INODE_FILE;
  }
}

inline mode_t ModeOfType(fs3rpc::InodeType type) {
  switch (type) {
    case fs3rpc::INODE_DIR:
      return S_IFDIR;
    case fs3rpc::INODE_SYMLINK:
      return S_IFLNK;
    case fs3rpc::INODE_FIFO:
      return S_IFIFO;
    case fs3rpc::INODE_SOCKET:
      return S_IFSOCK;
    case fs3rpc::INODE_CHR:
      return S_IFCHR;
    case fs3rpc::INODE_BLK:
      return S_IFBLK;
    default:
      return S_IFREG;
  }
}

inline timespec Ts(int64_t ns) {
  return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

inline int64_t Ns(const timespec& t) {
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

inline FuseFs* Self(fuse_req_t req) {
  return static_cast<FuseFs*>(fuse_req_userdata(req));
}

}  // namespace fuse_detail

using namespace fuse_detail;

}  // namespace ff::fs3

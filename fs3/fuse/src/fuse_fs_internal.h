// Inside fs3-fuse, shared by the files that implement FuseFs (fuse_fs.cc: options, credentials,
// the attribute and extended-attribute caches, namespace and directory operations; fuse_data.cc:
// open files, read-ahead and write gathering; fuse_ops.cc: the table of FUSE low-level
// operations): conversions between the kernel's and fs3's types, and the open-file state.
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

struct FuseFs::OpenFile {
  explicit OpenFile(uint64_t i) : ino(i) {}
  const uint64_t ino;
  std::mutex mu;
  int handles = 0;
  uint64_t size = 0;  // as this mount knows it (fs3-meta's at open, then writes and truncates)
  // The length without the writes that failed: fs3-meta's at open, then truncates and writes
  // acknowledged by storage. After a failed write, this is the length a flush or close reports
  // (a write refused for space leaves the file as it was, not extended with zeros).
  uint64_t landed_size = 0;
  std::vector<uint32_t> chains;  // where its chunks are (the layout's chains)
  bool dirty = false;            // written since the length was last settled at fs3-meta
  // Write gathering: `wb` holds the bytes for [wb_offset, wb_offset + wb.size()).
  uint64_t wb_offset = 0;
  std::string wb;
  // Buffers being written, oldest first. One that overlaps an older one is sent only after the
  // older one is acknowledged, so overlapping bytes land in the order they were written (a
  // header patched over its placeholder, an mmap page written back over a write()).
  struct Inflight {
    uint64_t offset = 0;
    uint64_t end = 0;
    std::shared_future<Status> done;
  };
  std::deque<Inflight> inflight;
  // The last background write that failed, and how many have: each handle open when one failed
  // is told once, by its next flush or fsync (like the kernel's errseq), so a read, a release or
  // another descriptor's close cannot use the error up.
  Status error;
  uint64_t error_seq = 0;
  // Read-ahead: blocks of `readahead_bytes` (by aligned offset) fetched or being fetched.
  std::map<uint64_t, std::shared_future<Result<std::string>>> blocks;
  uint64_t cached = 0;  // bytes of `blocks` counted in the mount's read cache (small files)
  uint64_t last_read_end = 0;
};

struct FuseFs::Handle {
  std::shared_ptr<OpenFile> file;
  bool wrote = false;
  bool writable = false;    // opened for writing: ftruncate through it needs no further permission
  uint64_t session = 0;     // this mount's number for the session at fs3-meta (SessionLease)
  uint64_t seen_error = 0;  // the OpenFile::error_seq this handle was told of (or opened at)
};

struct FuseFs::DirHandle {
  std::mutex mu;
  // Loaded page by page (offsets stay valid while it is open); with their attributes when the
  // page was read for READDIRPLUS, and when that was.
  std::vector<fs3rpc::DirEntryInfo> entries;
  std::vector<std::chrono::steady_clock::time_point> loaded;
  bool complete = false;
  uint64_t parent = 0;  // the inode of "..", looked up when first listed
};

}  // namespace ff::fs3

// fs3-fuse's filesystem: the FUSE low-level operations on top of fs3-meta (names, attributes)
// and the storage client (data).
//
// Caching, chosen for training workloads (many readers of files written once, close-to-open
// consistency between mounts):
// - attributes and entries are cached by the kernel for `attr_timeout_s` / `entry_timeout_s`
//   (1 s: a file renamed or removed on another mount shows here within a second); failed lookups
//   are not cached unless `negative_timeout_s` is set;
// - a file's cached attributes and pages are dropped when it is opened (an open after a close
//   elsewhere sees the new data and length), kept while it is open; reads check the attributes
//   (the kernel's auto_inval_data) so a change seen in them drops stale pages;
// - sequential writes are gathered per open file into buffers of `write_buffer_bytes` written to
//   storage in the background (`writes_in_flight` at once); flush (close), fsync and any
//   read or truncate of the file write them first, and a write error is reported by the next
//   flush / fsync;
// - sequential reads fetch blocks of `readahead_bytes`, two ahead of the reader; a file no
//   larger than a quarter of `read_cache_bytes` is kept in such blocks while open, so random
//   reads of it fetch each block once (larger files read randomly fetch exactly what is asked).
// - the names of a file's extended attributes come with its attributes and are kept as long
//   (`attr_timeout_s`), so a lookup of a missing one (security.capability, which the kernel asks
//   before every write, or the ACL names `ls -l` asks) is answered here without a round trip
//   (when they expired, one GetAttr brings them again); setxattr / removexattr on this mount drop
//   them at once;
// Lengths: a file's length grows as this mount writes; on flush and fsync it is settled at
// fs3-meta (from what this mount wrote and what storage holds), so a later open on any mount sees
// it. Calls to fs3-meta and storage are retried across restarts of fs3-meta and failures of a
// replica for `retry_timeout_s`: what can be served is not an error.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/thread_annotations.h"
#include "fs3/client.h"
#include "fs3/errors.h"
#include "fs3/meta_client.h"
#include "fs3/permissions.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "fs3/session_lease.h"
#include "monitoring/metrics.h"

namespace ff::fs3 {

struct FuseOptions {
  static constexpr const char* kSection = "fuse";
  std::string mountpoint;  // also the first command-line argument
  std::string meta;        // fs3-meta host:port
  std::string mgmtd;       // fs3-mgmtd host:port
  std::string mount_options = "allow_other,default_permissions";  // as for mount -o
  double attr_timeout_s = 1.0;
  double entry_timeout_s = 1.0;
  double negative_timeout_s = 0.0;
  uint64_t write_buffer_bytes = 4 << 20;
  uint32_t writes_in_flight = 16;  // gathered buffers being written at once, per file
  uint64_t readahead_bytes = 4 << 20;
  uint64_t read_cache_bytes = uint64_t{2} << 30;  // blocks of small open files kept, mount-wide
  uint64_t max_inflight_read_bytes = uint64_t{64} << 20;
  uint32_t threads = 16;          // FUSE worker threads at most
  uint32_t retry_timeout_s = 60;  // how long a call keeps retrying a restarting service
  // Metadata calls over fs3-meta's frame transport when it offers one (false: always gRPC).
  bool meta_frames = true;
  void Bind(ConfigSection& s);
};

class FuseFs {
 public:
  FuseFs(const FuseOptions& options, std::unique_ptr<StorageClient> storage, Metrics* metrics);
  // The operations table for fuse_session_new (userdata: this).
  static const fuse_lowlevel_ops& Ops();
  // The session, for notifications to the kernel (set before the loop starts).
  void SetSession(fuse_session* se) { session_ = se; }

  // Per-inode state shared by the open handles of a file on this mount.
  struct OpenFile {
    explicit OpenFile(uint64_t i) : ino(i) {}
    const uint64_t ino;
    Mutex mu;
    int handles FF_GUARDED_BY(mu) = 0;
    // As this mount knows it (fs3-meta's at open, then writes and truncates).
    uint64_t size FF_GUARDED_BY(mu) = 0;
    // The length without the writes that failed: fs3-meta's at open, then truncates and writes
    // acknowledged by storage. After a failed write, this is the length a flush or close reports
    // (a write refused for space leaves the file as it was, not extended with zeros).
    uint64_t landed_size FF_GUARDED_BY(mu) = 0;
    std::vector<uint32_t> chains FF_GUARDED_BY(mu);  // where its chunks are (the layout's chains)
    bool dirty FF_GUARDED_BY(mu) = false;  // written since the length was last settled at fs3-meta
    // Write gathering: `wb` holds the bytes for [wb_offset, wb_offset + wb.size()).
    uint64_t wb_offset FF_GUARDED_BY(mu) = 0;
    std::string wb FF_GUARDED_BY(mu);
    // Buffers being written, oldest first. One that overlaps an older one is sent only after the
    // older one is acknowledged, so overlapping bytes land in the order they were written (a
    // header patched over its placeholder, an mmap page written back over a write()).
    struct Inflight {
      uint64_t offset = 0;
      uint64_t end = 0;
      std::shared_future<Status> done;
    };
    std::deque<Inflight> inflight FF_GUARDED_BY(mu);
    // The last background write that failed, and how many have: each handle open when one failed
    // is told once, by its next flush or fsync (like the kernel's errseq), so a read, a release or
    // another descriptor's close cannot use the error up.
    Status error FF_GUARDED_BY(mu);
    uint64_t error_seq FF_GUARDED_BY(mu) = 0;
    // Read-ahead: blocks of `readahead_bytes` (by aligned offset) fetched or being fetched.
    std::map<uint64_t, std::shared_future<Result<std::string>>> blocks FF_GUARDED_BY(mu);
    // Bytes of `blocks` counted in the mount's read cache (small files).
    uint64_t cached FF_GUARDED_BY(mu) = 0;
    uint64_t last_read_end FF_GUARDED_BY(mu) = 0;
  };

  // An open file descriptor: used by one operation at a time (the kernel's), so unguarded.
  struct Handle {
    std::shared_ptr<OpenFile> file;
    bool wrote = false;
    bool writable = false;  // opened for writing: ftruncate through it needs no further permission
    uint64_t session = 0;   // this mount's number for the session at fs3-meta (SessionLease)
    uint64_t seen_error = 0;  // the OpenFile::error_seq this handle was told of (or opened at)
  };

  struct DirHandle {
    Mutex mu;
    // Loaded page by page (offsets stay valid while it is open); with their attributes when the
    // page was read for READDIRPLUS, and when that was.
    std::vector<fs3rpc::DirEntryInfo> entries FF_GUARDED_BY(mu);
    std::vector<std::chrono::steady_clock::time_point> loaded FF_GUARDED_BY(mu);
    bool complete FF_GUARDED_BY(mu) = false;
    uint64_t parent FF_GUARDED_BY(mu) = 0;  // the inode of "..", looked up when first listed
  };

 private:
  friend struct FuseOps;

  fs3rpc::Credentials Cred(fuse_req_t req);
  std::vector<uint32_t> GroupsOf(fuse_req_t req, pid_t pid);
  uint64_t NextRequest() { return next_request_++; }
  struct stat ToStat(const fs3rpc::Inode& inode);
  void ReplyEntry(fuse_req_t req, const fs3rpc::Inode& inode);
  void ReplyErr(fuse_req_t req, const Status& st);

  std::shared_ptr<OpenFile> Acquire(const fs3rpc::Inode& inode);
  void ReleaseFile(const std::shared_ptr<OpenFile>& f);
  std::shared_ptr<OpenFile> Find(uint64_t ino);
  // Records a background write's failure (nothing for Ok); f->mu held.
  static void NoteError(OpenFile& f, const Status& st) FF_REQUIRES(f.mu);
  // A write of [.., end) finished with `st`: acknowledged ones move OpenFile::landed_size; f->mu.
  static void NoteWritten(OpenFile& f, uint64_t end, const Status& st) FF_REQUIRES(f.mu);
  // The length a flush or close reports to fs3-meta, once every write has finished: after a
  // failed write, what landed (OpenFile::landed_size), which the mount then takes too; f->mu held.
  static uint64_t SizeToReport(OpenFile& f) FF_REQUIRES(f.mu);
  static uint64_t SeenErrors(OpenFile& f) FF_EXCLUDES(f.mu);  // the failures so far
  // Forgets a file's read blocks (returning their bytes to the read cache); f->mu held.
  void DropBlocks(OpenFile& f) FF_REQUIRES(f.mu);
  // Starts writing the gathered buffer (waiting while writes_in_flight are); f->mu held.
  void StartFlush(OpenFile& f) FF_REQUIRES(f.mu);
  // Writes everything gathered and waits for it; a write that failed is recorded in the file
  // (OpenFile::error) for each handle's next flush or fsync.
  void FlushData(OpenFile& f) FF_REQUIRES(f.mu);
  // A write that failed since handle `h` was last told (or opened); marks it told. Ok for none.
  static Status TakeError(OpenFile& f, Handle* h) FF_REQUIRES(f.mu);
  // Flushes, tells `h` of a failed write (none without a handle), and settles the length at
  // fs3-meta; `durable` (fsync): also when it is settled, answered once fs3-meta's log is on disk.
  Status Sync(OpenFile& f, Handle* h, bool durable = false) FF_REQUIRES(f.mu);

  // The operations (see Ops()).
  void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
  void GetAttr(fuse_req_t req, fuse_ino_t ino);
  // `fi`: the handle when the change came through a descriptor (ftruncate), else null.
  void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
               const fuse_file_info* fi);
  void Readlink(fuse_req_t req, fuse_ino_t ino);
  void Make(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev,
            const char* symlink);
  void Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool dir);
  void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags);
  void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname);
  void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
  void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
  void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
             fuse_file_info* fi);
  void Flush(fuse_req_t req, fuse_file_info* fi);
  void Release(fuse_req_t req, fuse_file_info* fi);
  // fsync: the file's data and length, and every namespace change logged before it, on disk
  // (fs3-meta's sync_interval_ms); fsyncdir: the latter.
  void Fsync(fuse_req_t req, fuse_file_info* fi);
  void Fsyncdir(fuse_req_t req, fuse_ino_t ino);
  void Opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
  // `plus`: READDIRPLUS, each entry with its attributes (the kernel then needs no lookup).
  void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
               bool plus);
  void Releasedir(fuse_req_t req, fuse_file_info* fi);
  void Statfs(fuse_req_t req);
  void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags);
  void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
  void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size);
  void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name);
  void Access(fuse_req_t req, fuse_ino_t ino, int mask);
  void Observe(const char* op, std::chrono::steady_clock::time_point start);

  const FuseOptions options_;
  fuse_session* session_ = nullptr;
  std::unique_ptr<StorageClient> storage_;
  Metrics* metrics_;
  std::unique_ptr<MetaClient> meta_;
  std::unique_ptr<SessionLease> lease_;  // open files' sessions (after meta_: stops first)
  // Ends a session at fs3-meta (`size`: the length the file has at least, when it was written).
  // `recheck`: a write of the file failed (fs3-meta settles its length again later).
  Status CloseSession(uint64_t ino, uint64_t session, std::optional<uint64_t> size, bool wrote,
                      bool recheck = false);
  std::atomic<uint64_t> next_request_;
  std::atomic<uint64_t> cache_used_{0};  // bytes of small files' blocks kept
  Mutex files_mu_;                       // taken before an OpenFile's mu
  std::unordered_map<uint64_t, std::shared_ptr<OpenFile>> files_ FF_GUARDED_BY(files_mu_);
  Mutex groups_mu_;
  struct Groups {
    std::vector<uint32_t> groups;
    std::chrono::steady_clock::time_point expires;
  };
  std::unordered_map<pid_t, Groups> groups_ FF_GUARDED_BY(groups_mu_);
  // The extended attribute names seen with each inode's attributes, until they expire.
  struct XattrNames {
    std::vector<std::string> names;
    std::chrono::steady_clock::time_point expires;
  };
  Mutex xattr_mu_;
  std::unordered_map<uint64_t, XattrNames> xattr_names_ FF_GUARDED_BY(xattr_mu_);
  void NoteXattrNames(const fs3rpc::Inode& inode);
  // Whether `ino` has the attribute `name`, from names still fresh; nullopt if none are at hand.
  std::optional<bool> HasXattr(uint64_t ino, const std::string& name);
  void ForgetXattrNames(uint64_t ino);
  prometheus::Counter* xattr_absent_cached_ = nullptr;
  // Directories' attributes as this mount's last change in them returned them (Make, Link,
  // Unlink, Rmdir, Rename reply with them). The kernel drops a directory's attributes after each
  // change of its entries and asks again (with default_permissions, before the next change): that
  // one getattr is answered from here, once, within the attribute timeout. setattr and xattr
  // changes through this mount forget the directory's entry.
  struct DirAttrs {
    fs3rpc::Inode inode;
    std::chrono::steady_clock::time_point expires;
  };
  void NoteDirs(const google::protobuf::RepeatedPtrField<fs3rpc::Inode>& dirs);
  std::optional<fs3rpc::Inode> TakeDirAttrs(uint64_t ino);
  void ForgetDirAttrs(uint64_t ino);
  Mutex dir_attrs_mu_;
  std::unordered_map<uint64_t, DirAttrs> dir_attrs_ FF_GUARDED_BY(dir_attrs_mu_);
  prometheus::Counter* dir_attrs_local_ = nullptr;
  std::unordered_map<std::string_view, prometheus::Histogram*> latency_;  // by operation
};

}  // namespace ff::fs3

// libfs3client's native API: the filesystem by path, without a FUSE mount, for data loaders.
//
//   auto fs = FileSystem::Connect({.meta = "host:8002", .mgmtd = "host:8000", .caller = {uid,
//   gid}}); auto f = fs->Open("/datasets/shard-0001.bin"); std::vector<ReadRange> ranges =
//   {{f->ino, 0, 4096, buf0}, {g->ino, 1 << 20, 4096, buf1}, ...};
//   std::future<Result<std::vector<uint32_t>>> done = fs->ReadBatchAsync(ranges);  // bytes per
//   range
//
// Names resolve through fs3-meta with the caller's credentials (permissions apply; symbolic links
// are followed, at most 40); data moves straight between the client and the storage targets,
// reads paced by request-to-send credits. Every change (a create, a write with the length it
// grew to, a rename, a removal) is durable when it returns, as checkpoints need: the data on
// every replica of its chain, the namespace change on fs3-meta's disk.
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "fs3/client.h"
#include "fs3/meta_client.h"
#include "fs3/permissions.h"
#include "fs3/proto/meta.grpc.pb.h"
#include "fs3/session_lease.h"

namespace ff::fs3 {

struct FsOptions {
  std::string meta;   // fs3-meta host:port
  std::string mgmtd;  // fs3-mgmtd host:port
  Caller caller;      // whose permissions apply
  uint64_t max_inflight_read_bytes = uint64_t{64} << 20;
  // How long a chunk write is retried before it fails, and how chunk data travels (empty:
  // gRPC): StorageClient's (ClientOptions).
  std::chrono::milliseconds write_retry_timeout{std::chrono::seconds(60)};
  // How long a metadata call keeps retrying while fs3-meta restarts or fails over (as a mount's
  // calls do): a write whose data landed then extends the length instead of failing.
  std::chrono::milliseconds meta_retry_timeout{std::chrono::seconds(60)};
  std::shared_ptr<ChunkTransport> transport = nullptr;
};

struct File {
  uint64_t ino = 0;
  uint64_t size = 0;             // as of Open
  std::vector<uint32_t> chains;  // where its chunks are (its layout)
  bool writable = false;         // the caller may write it (decided at Open, as open(2) does)
};

// One range of a batched read: `length` bytes at `offset` of file `ino` into `buffer`.
struct ReadRange {
  uint64_t ino = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  char* buffer = nullptr;
};

class FileSystem {
 public:
  static Result<std::unique_ptr<FileSystem>> Connect(const FsOptions& options);

  Result<fs3rpc::Inode> Stat(const std::string& path);
  Status Mkdir(const std::string& path, uint32_t mode = 0755);
  // Creates (or truncates to nothing, when it exists and `exclusive` is false) a regular file.
  Result<File> Create(const std::string& path, uint32_t mode = 0644, bool exclusive = true);
  // Opens a file to read it, and to write it where the caller may.
  Result<File> Open(const std::string& path);
  // Writes `data` at `offset` (PERMISSION_DENIED, nothing sent, where `file` was opened without
  // write permission). The recorded length grows to the write's end and never shrinks: another
  // writer may have written past it. A write that extends the file runs under a session at
  // fs3-meta (this client's lease): if the process dies before the length is recorded, the
  // session ends with the lease and fs3-meta settles the length. A write that fails may still
  // have put some of its data on storage (an answer lost, the length's update refused): the
  // length is then settled from what storage holds, as a closing FUSE writer's is, so that no
  // data lies past a file's end (fs3 fsck --data's check; a later extension would show it).
  Status Write(File& file, uint64_t offset, std::string_view data);
  Result<std::vector<DirEntry>> List(const std::string& path);
  Status Unlink(const std::string& path);
  // Removes the empty directory `path` (ENOTEMPTY, as rmdir(2), when it is not).
  Status Rmdir(const std::string& path);
  // Renames `from` to `to` at once, replacing a file `to` (rename(2)'s rules, checked by
  // fs3-meta): how a writer commits a file it wrote under another name.
  Status Rename(const std::string& from, const std::string& to);
  // The number of chains each file created in directory `path` from now on is spread over.
  Status SetStripe(const std::string& path, uint32_t stripe);

  // Reads every range concurrently into its buffer; each result is the bytes read (short at the
  // end of a file, whose tail is not touched). Fails as a whole with the first error.
  std::future<Result<std::vector<uint32_t>>> ReadBatchAsync(std::vector<ReadRange> ranges);
  Result<std::vector<uint32_t>> ReadBatch(std::vector<ReadRange> ranges) {
    return ReadBatchAsync(std::move(ranges)).get();
  }

 private:
  FileSystem(const FsOptions& options, std::unique_ptr<StorageClient> data);
  // The inode a path names (following symbolic links), or its parent and last name.
  Result<fs3rpc::Inode> Resolve(const std::string& path, int depth = 0);
  Result<std::pair<uint64_t, std::string>> ResolveParent(const std::string& path);
  // Makes the entry `path` (its parent resolved first) with a fresh request id.
  Status MakeAt(const std::string& path, uint32_t mode, fs3rpc::InodeType type, fs3rpc::Inode* out);
  fs3rpc::Credentials Cred() const;
  // Unlink or Rmdir of the entry `path`.
  Status RemoveName(const std::string& path, bool directory);
  // Writes `data` at `offset` of `file`, the chunks it spans concurrently; the first error.
  Status WriteChunks(const File& file, uint64_t offset, std::string_view data);
  // A session on `ino` for a write that extends it (none where fs3-meta grants no lease: an
  // anonymous session would outlive a crash), and its end with `close` (the length it records
  // or settles), sent again later when fs3-meta is out of reach.
  Result<std::optional<OpenedSession>> OpenWriteSession(uint64_t ino);
  SessionLease* Lease() FF_EXCLUDES(lease_mu_);  // made at the first call
  Status CloseWriteSession(fs3rpc::CloseRequest& close, const OpenedSession& session);
  // `done`, once fs3-meta's log is on disk when it is Ok: every change through this client is
  // durable when it returns (fs3-meta may answer before it is: its sync_interval_ms).
  Status Durable(Status done);

  const FsOptions options_;
  std::unique_ptr<MetaClient> meta_;
  Mutex lease_mu_;
  std::unique_ptr<SessionLease> lease_ FF_GUARDED_BY(lease_mu_);  // ends before meta_
  std::unique_ptr<StorageClient> data_;
  std::atomic<uint64_t> next_request_;
};

}  // namespace ff::fs3

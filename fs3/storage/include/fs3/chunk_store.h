// One storage target's chunks: content in files under the target's directory, metadata
// (committed and pending versions, chain version, length, CRC32C per chunk and per 4 KiB block,
// the bytes stored) in a RocksDB beside them. A write makes a pending version (the committed
// content with the update applied, written to its own file with O_DIRECT where the filesystem
// allows, and synced); Commit makes it the committed one. Chunk files are sparse: a 4 KiB block
// of zeros is a hole (a small write into an empty chunk stores one block, not the chunk up to
// it), and reads return zeros there as for any block. Reads verify the blocks they return against
// their checksums.
//
// Space: a write is refused (kResourceExhausted, "No space left on device") when what it stores
// would take the disk below the reserve (ProtoDb::ReserveFor); removals, cuts and commits never
// are, so that deleting or truncating files always makes room on a full disk. Callers serialise
// operations on one chunk (the storage service holds a per-chunk lock); different chunks may be
// used concurrently.
#pragma once

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/proto_db.h"
#include "common/thread_annotations.h"
#include "fs3/proto/storage.pb.h"

namespace ff::fs3 {

constexpr uint32_t kBlockSize = 4096;

class ChunkStore {
 public:
  // Opens (creating) the target at `dir`: <dir>/meta (RocksDB) and <dir>/chunks.
  static Result<std::unique_ptr<ChunkStore>> Open(const std::string& dir);

  // kNotFound when the chunk does not exist.
  Result<fs3rpc::ChunkMetaRecord> Meta(const fs3rpc::ChunkId& id) const;

  // Stores version `version` of the chunk as pending: with `full`, `data` is the whole content;
  // else `data` at `offset` over the committed content, which must be version - 1 (else
  // kFailedPrecondition "version mismatch"). Replaces any pending version (the chain head
  // serialises writes, so an older pending one belongs to a write that was abandoned). Returns the
  // pending metadata.
  Result<fs3rpc::ChunkMetaRecord> Prepare(const fs3rpc::ChunkId& id, uint64_t version,
                                          uint32_t offset, const std::string& data, bool full,
                                          uint64_t chain_version);
  // Stores version `version` as pending: the committed content (version - 1) cut or zero-extended
  // to `length` bytes.
  Result<fs3rpc::ChunkMetaRecord> PrepareTruncate(const fs3rpc::ChunkId& id, uint64_t version,
                                                  uint32_t length, uint64_t chain_version);
  // Makes pending `version` the committed one (idempotent once done).
  Status Commit(const fs3rpc::ChunkId& id, uint64_t version);
  // Drops the chunk (content and metadata). Absent is fine. Never refused for space.
  Status Remove(const fs3rpc::ChunkId& id);

  // Bytes [offset, offset + length) of the committed (or, with `pending`, the pending) content,
  // cut at its end. kDataLoss when a block fails its checksum.
  Result<std::string> Read(const fs3rpc::ChunkId& id, uint32_t offset, uint32_t length,
                           bool pending = false) const;
  // The same, of the version `meta` (a record Meta() returned) describes: its length and
  // checksums. Without the chunk's lock a commit may move that version meanwhile (the pending
  // file renamed over the committed one): the read then fails (not found, or kDataLoss against
  // the old checksums) and the caller, seeing the record changed, reads again.
  Result<std::string> ReadAs(const fs3rpc::ChunkMetaRecord& meta, uint32_t offset, uint32_t length,
                             bool pending) const;

  Result<std::vector<fs3rpc::ChunkMetaRecord>> List() const;
  // The chunks of `inode` here: the one with the highest index (none when it has no chunk here),
  // and the bytes their committed contents store.
  struct InodeExtent {
    std::optional<fs3rpc::ChunkMetaRecord> last;
    uint64_t stored_bytes = 0;
  };
  Result<InodeExtent> Extent(uint64_t inode) const;
  // What a record's committed content stores on the disk (its length for records older than
  // sparse chunks).
  static uint32_t StoredBytes(const fs3rpc::ChunkMetaRecord& meta);

  // The target's disk: its size, what writes may still take (free less the reserve), and the
  // reserve.
  struct Space {
    uint64_t capacity = 0;
    uint64_t available = 0;
    uint64_t reserve = 0;
  };
  Result<Space> DiskSpace() const;

  const std::string& dir() const { return dir_; }

  // What the target holds: chunk records, and the bytes their committed and pending contents store.
  // Counted once at open and kept up to date by every change, so asking costs nothing.
  struct Usage {
    uint64_t chunks = 0;
    uint64_t bytes = 0;
  };
  Usage usage() const;

  static std::string Key(const fs3rpc::ChunkId& id);  // "c/" + inode and index, big-endian

 private:
  ChunkStore(std::string dir, std::unique_ptr<ProtoDb> db)
      : dir_(std::move(dir)), db_(std::move(db)) {}
  std::string Path(const fs3rpc::ChunkId& id, bool pending) const;
  // Removes files under chunks/ that belong to no record in `named` (their IdNames), and every
  // temporary file: what a crash left of a write or a removal.
  void RemoveLeftovers(const std::set<std::string>& named);
  // kResourceExhausted when storing `bytes` more would take the disk into the reserve.
  Status CheckRoom(uint64_t bytes) const;
  // The chunk's metadata, or fresh metadata for a chunk not written yet.
  Result<fs3rpc::ChunkMetaRecord> MetaOrNew(const fs3rpc::ChunkId& id) const;
  // The committed content an update to `version` applies to (it must be version - 1).
  Result<std::string> Base(const fs3rpc::ChunkMetaRecord& meta, uint64_t version) const;
  // Counts the change of one chunk's record from `before` to `after` (either may be absent).
  void Account(const fs3rpc::ChunkMetaRecord* before, const fs3rpc::ChunkMetaRecord* after);
  // Writes `content` as the pending version; kGrows is refused when it does not fit above the
  // reserve, kFrees (a cut) may use it.
  Result<fs3rpc::ChunkMetaRecord> StorePending(fs3rpc::ChunkMetaRecord meta, uint64_t version,
                                               std::string_view content, uint64_t chain_version,
                                               ProtoDb::SpaceUse use);

  // A 4 KiB-aligned buffer a new version is assembled in and written from (O_DIRECT), reused so
  // that its pages are not faulted in afresh for every write.
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  struct Scratch {
    std::unique_ptr<char, FreeDeleter> bytes;
    std::size_t capacity = 0;
  };
  static constexpr std::size_t kPooledScratch = 8;
  Scratch TakeScratch(std::size_t size);  // at least `size` bytes rounded up to 4 KiB
  void GiveBack(Scratch s);

  std::string dir_;
  std::unique_ptr<ProtoDb> db_;
  std::atomic<bool> direct_io_{true};  // cleared when the filesystem refuses O_DIRECT
  Mutex pool_mu_;
  std::vector<Scratch> pool_ FF_GUARDED_BY(pool_mu_);
  std::atomic<int64_t> chunks_{0};
  std::atomic<int64_t> bytes_{0};
};

}  // namespace ff::fs3

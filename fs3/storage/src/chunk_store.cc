#include "fs3/chunk_store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <set>

#include "common/files.h"
#include "fs3/crc32c.h"

namespace ff::fs3 {
namespace {

constexpr std::size_t kAlign = 4096;  // O_DIRECT: buffer, length and offset on this boundary

std::size_t AlignUp(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

bool AllZero(const char* p, std::size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

using Runs = std::vector<std::pair<std::size_t, std::size_t>>;

// One pass over the chunk, each 4 KiB block while it is in the cache: its checksum (and the whole
// content's, continued over each block) into `meta`'s pending fields, and the ranges of blocks
// that hold anything but zeros. The rest are holes in the chunk's file (read back as zeros,
// stored as nothing).
Runs ChecksumAndRuns(std::string_view content, fs3rpc::ChunkMetaRecord* meta) {
  uint32_t whole = 0;
  Runs runs;
  meta->clear_pending_block_crcs();
  for (std::size_t off = 0; off < content.size(); off += kBlockSize) {
    const std::string_view block = content.substr(off, kBlockSize);
    meta->add_pending_block_crcs(Crc32c(block));
    whole = Crc32c(block, whole);
    if (AllZero(block.data(), block.size())) continue;
    if (!runs.empty() && runs.back().first + runs.back().second == off) {
      runs.back().second += block.size();
    } else {
      runs.emplace_back(off, block.size());
    }
  }
  meta->set_pending_crc32c(whole);
  return runs;
}

uint32_t RunBytes(const Runs& runs) {
  std::size_t n = 0;
  for (const auto& [off, len] : runs)
    n += (len + kBlockSize - 1) / kBlockSize * kBlockSize;
  return static_cast<uint32_t>(n);
}

// Writes `content` to `path` through a temporary file, synced, then renamed into place: only its
// `runs` (ChecksumAndRuns), the rest left as holes, so that a chunk written sparsely stays sparse
// on the disk. With `direct`, the data goes from `content` to the disk without a copy into the page
// cache (O_DIRECT, as 3FS writes chunks): `content` must then start on a 4 KiB boundary and have
// zeros after its end up to the next one (the file is cut to the content's length). A filesystem
// that refuses O_DIRECT (tmpfs) clears `direct` and gets a buffered write.
Status WriteFileSynced(const std::string& path, std::string_view content, const Runs& runs,
                       std::atomic<bool>& direct) {
  const std::string tmp = path + ".tmp";
  const bool use_direct = direct.load(std::memory_order_relaxed);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (use_direct ? O_DIRECT : 0),
                0644);
  if (fd < 0 && use_direct && errno == EINVAL) {
    direct = false;
    return WriteFileSynced(path, content, runs, direct);
  }
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  auto fail = [&](const std::string& what) {
    const int e = errno;
    close(fd);
    unlink(tmp.c_str());  // a full disk keeps none of what did not fit
    return Status::FromErrno(e, what + " " + tmp);
  };
  bool first = true;
  for (const auto& [start, run] : runs) {
    const std::size_t length = use_direct ? AlignUp(run) : run;
    std::size_t done = 0;
    while (done < length) {
      ssize_t n = pwrite(fd, content.data() + start + done, length - done,
                         static_cast<off_t>(start + done));
      if (n < 0 && use_direct && errno == EINVAL && first) {  // refused only at the first write
        close(fd);
        unlink(tmp.c_str());
        direct = false;
        return WriteFileSynced(path, content, runs, direct);
      }
      if (n < 0) return fail("write");
      first = false;
      done += static_cast<std::size_t>(n);
    }
  }
  // The length (holes after the last run included; an aligned direct write cut back).
  if (ftruncate(fd, static_cast<off_t>(content.size())) != 0) return fail("truncate");
  if (fdatasync(fd) != 0) return fail("sync");
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "rename " + tmp);
  return Status::Ok();
}

bool Exists(const fs3rpc::ChunkMetaRecord& m) {
  return m.committed_version() != 0 || m.pending_version() != 0;
}

// Both files of a chunk are on disk until Commit renames the pending one over the committed one.
int64_t HeldBytes(const fs3rpc::ChunkMetaRecord& m) {
  return int64_t{ChunkStore::StoredBytes(m)} +
         int64_t{m.has_pending_stored_bytes() ? m.pending_stored_bytes() : m.pending_length()};
}

std::string IdName(const fs3rpc::ChunkId& id) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%016llx-%08x", static_cast<unsigned long long>(id.inode()),
                id.index());
  return buf;
}

}  // namespace

Result<std::unique_ptr<ChunkStore>> ChunkStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/chunks", ec);
  if (ec) return IoError("cannot create " + dir + "/chunks: " + ec.message());
  FF_ASSIGN_OR_RETURN(auto db, ProtoDb::Open(dir + "/meta"));
  std::unique_ptr<ChunkStore> store(new ChunkStore(dir, std::move(db)));
  FF_ASSIGN_OR_RETURN(auto chunks, store->List());
  std::set<std::string> named;  // the files of chunks with records
  for (const auto& m : chunks) {
    store->Account(nullptr, &m);
    named.insert(IdName(m.id()));
  }
  store->RemoveLeftovers(named);
  return store;
}

void ChunkStore::RemoveLeftovers(const std::set<std::string>& named) {
  // A write's temporary file (the process died before the rename), and the files of a chunk whose
  // record went (Remove drops the record first: a crash before the unlink leaks them, never a
  // record without its file).
  std::error_code ec;
  uint64_t bytes = 0, files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/chunks", ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t dot = name.find('.');
    const bool tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (!tmp && dot != std::string::npos && named.contains(name.substr(0, dot))) continue;
    std::error_code size_ec;
    const auto size = entry.file_size(size_ec);
    if (std::filesystem::remove(entry.path(), size_ec)) {
      bytes += size_ec ? 0 : size;
      ++files;
    }
  }
  if (files > 0) {
    spdlog::info(
        "target {}: removed {} leftover chunk files ({} bytes) of writes or removals "
        "that a crash interrupted",
        dir_, files, bytes);
  }
}

uint32_t ChunkStore::StoredBytes(const fs3rpc::ChunkMetaRecord& m) {
  return m.has_stored_bytes() ? m.stored_bytes() : m.length();
}

Result<ChunkStore::Space> ChunkStore::DiskSpace() const {
  struct statvfs fs {};
  if (statvfs(dir_.c_str(), &fs) != 0) return Status::FromErrno(errno, "statvfs " + dir_);
  Space space;
  space.capacity = uint64_t{fs.f_blocks} * fs.f_frsize;
  space.reserve = ProtoDb::ReserveFor(space.capacity);
  const uint64_t free = uint64_t{fs.f_bavail} * fs.f_frsize;
  space.available = free > space.reserve ? free - space.reserve : 0;
  return space;
}

Status ChunkStore::CheckRoom(uint64_t bytes) const {
  FF_ASSIGN_OR_RETURN(Space space, DiskSpace());
  if (bytes <= space.available) return Status::Ok();
  return ResourceExhausted("No space left on device: target " + dir_ + " has " +
                           std::to_string((space.available + space.reserve) >> 10) +
                           " KiB free, and writes stop at the " +
                           std::to_string(space.reserve >> 10) +
                           " KiB kept for removals and the target's database");
}

void ChunkStore::Account(const fs3rpc::ChunkMetaRecord* before,
                         const fs3rpc::ChunkMetaRecord* after) {
  const bool was = before != nullptr && Exists(*before);
  const bool is = after != nullptr && Exists(*after);
  chunks_ += int64_t{is} - int64_t{was};
  bytes_ += (is ? HeldBytes(*after) : 0) - (was ? HeldBytes(*before) : 0);
}

ChunkStore::Usage ChunkStore::usage() const {
  return Usage{.chunks = static_cast<uint64_t>(std::max<int64_t>(0, chunks_.load())),
               .bytes = static_cast<uint64_t>(std::max<int64_t>(0, bytes_.load()))};
}

std::string ChunkStore::Key(const fs3rpc::ChunkId& id) {
  std::string k = "c/";
  for (int s = 56; s >= 0; s -= 8)
    k += static_cast<char>((id.inode() >> s) & 0xff);
  for (int s = 24; s >= 0; s -= 8)
    k += static_cast<char>((id.index() >> s) & 0xff);
  return k;
}

std::string ChunkStore::Path(const fs3rpc::ChunkId& id, bool pending) const {
  return dir_ + "/chunks/" + IdName(id) + (pending ? ".p" : ".c");
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::Meta(const fs3rpc::ChunkId& id) const {
  fs3rpc::ChunkMetaRecord meta;
  Status st = db_->Get(Key(id), &meta);
  if (st.code() == StatusCode::kNotFound) return NotFound("no chunk " + IdName(id));
  FF_RETURN_IF_ERROR(st);
  return meta;
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::MetaOrNew(const fs3rpc::ChunkId& id) const {
  auto m = Meta(id);
  if (m.ok() || m.status().code() != StatusCode::kNotFound) return m;
  fs3rpc::ChunkMetaRecord meta;
  *meta.mutable_id() = id;
  return meta;
}

Result<std::string> ChunkStore::Base(const fs3rpc::ChunkMetaRecord& meta, uint64_t version) const {
  if (meta.committed_version() + 1 != version) {
    return Status(StatusCode::kStaleVersion, "version mismatch on chunk " + IdName(meta.id()) +
                                                 ": committed " +
                                                 std::to_string(meta.committed_version()) +
                                                 ", update makes " + std::to_string(version));
  }
  if (meta.committed_version() == 0) return std::string();
  return Read(meta.id(), 0, meta.length());
}

ChunkStore::Scratch ChunkStore::TakeScratch(std::size_t size) {
  const std::size_t want = AlignUp(std::max<std::size_t>(size, 1));
  {
    MutexLock lock(&pool_mu_);
    for (auto it = pool_.begin(); it != pool_.end(); ++it) {
      if (it->capacity >= want) {
        Scratch s = std::move(*it);
        pool_.erase(it);
        return s;
      }
    }
  }
  Scratch s;
  s.bytes.reset(static_cast<char*>(std::aligned_alloc(kAlign, want)));
  if (!s.bytes) throw std::bad_alloc();
  s.capacity = want;
  return s;
}

void ChunkStore::GiveBack(Scratch s) {
  MutexLock lock(&pool_mu_);
  if (pool_.size() < kPooledScratch) pool_.push_back(std::move(s));
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::Prepare(const fs3rpc::ChunkId& id, uint64_t version,
                                                    uint32_t offset, const std::string& data,
                                                    bool full, uint64_t chain_version) {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, MetaOrNew(id));
  std::string base;
  if (!full) {
    FF_ASSIGN_OR_RETURN(base, Base(meta, version));
  }
  // The new content, assembled in an aligned buffer that goes to the disk as it is.
  const std::size_t size =
      full ? data.size() : std::max<std::size_t>(base.size(), offset + data.size());
  Scratch buf = TakeScratch(size);
  char* p = buf.bytes.get();
  if (full) {
    std::memcpy(p, data.data(), data.size());
  } else {
    std::memcpy(p, base.data(), base.size());
    if (offset > base.size()) std::memset(p + base.size(), 0, offset - base.size());
    std::memcpy(p + offset, data.data(), data.size());
  }
  std::memset(p + size, 0, AlignUp(size) - size);
  auto result = StorePending(std::move(meta), version, std::string_view(p, size), chain_version,
                             ProtoDb::SpaceUse::kGrows);
  GiveBack(std::move(buf));
  return result;
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::PrepareTruncate(const fs3rpc::ChunkId& id,
                                                            uint64_t version, uint32_t length,
                                                            uint64_t chain_version) {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, MetaOrNew(id));
  FF_ASSIGN_OR_RETURN(std::string base, Base(meta, version));
  Scratch buf = TakeScratch(length);
  char* p = buf.bytes.get();
  const std::size_t kept = std::min<std::size_t>(base.size(), length);
  std::memcpy(p, base.data(), kept);
  std::memset(p + kept, 0, AlignUp(length) - kept);
  // A cut frees space (once committed): it may use the reserve, as a removal does.
  const auto use = length <= meta.length() ? ProtoDb::SpaceUse::kFrees : ProtoDb::SpaceUse::kGrows;
  auto result =
      StorePending(std::move(meta), version, std::string_view(p, length), chain_version, use);
  GiveBack(std::move(buf));
  return result;
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::StorePending(fs3rpc::ChunkMetaRecord meta,
                                                         uint64_t version, std::string_view content,
                                                         uint64_t chain_version,
                                                         ProtoDb::SpaceUse use) {
  const fs3rpc::ChunkId id = meta.id();
  const fs3rpc::ChunkMetaRecord before = meta;
  const Runs runs = ChecksumAndRuns(content, &meta);
  const uint32_t stored = RunBytes(runs);
  // The new version's blocks, and a little for its record: never into the reserve, but for what
  // frees space.
  if (use == ProtoDb::SpaceUse::kGrows)
    FF_RETURN_IF_ERROR(CheckRoom(uint64_t{stored} + kBlockSize));
  FF_RETURN_IF_ERROR(WriteFileSynced(Path(id, true), content, runs, direct_io_));
  meta.set_pending_version(version);
  meta.set_pending_length(static_cast<uint32_t>(content.size()));
  meta.set_pending_stored_bytes(stored);
  meta.set_chain_version(chain_version);
  // Its space was taken above: the record may use the reserve (a write that got its room is not
  // failed half-way by the line moving under it).
  FF_RETURN_IF_ERROR(db_->Put(Key(id), meta, ProtoDb::SpaceUse::kFrees));
  Account(&before, &meta);
  return meta;
}

Status ChunkStore::Commit(const fs3rpc::ChunkId& id, uint64_t version) {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, Meta(id));
  if (meta.committed_version() >= version && meta.pending_version() == 0) return Status::Ok();
  if (meta.pending_version() != version) {
    return FailedPrecondition("chunk " + IdName(id) + " has no pending version " +
                              std::to_string(version) + " (pending " +
                              std::to_string(meta.pending_version()) + ")");
  }
  if (rename(Path(id, true).c_str(), Path(id, false).c_str()) != 0) {
    return Status::FromErrno(errno, "commit " + Path(id, true));
  }
  const fs3rpc::ChunkMetaRecord before = meta;
  meta.set_committed_version(version);
  meta.set_length(meta.pending_length());
  meta.set_crc32c(meta.pending_crc32c());
  *meta.mutable_block_crcs() = meta.pending_block_crcs();
  if (meta.has_pending_stored_bytes()) {
    meta.set_stored_bytes(meta.pending_stored_bytes());
  } else {
    meta.clear_stored_bytes();
  }
  meta.set_pending_version(0);
  meta.set_pending_length(0);
  meta.set_pending_crc32c(0);
  meta.clear_pending_block_crcs();
  meta.clear_pending_stored_bytes();
  // A commit frees the version it replaces: never refused for space.
  FF_RETURN_IF_ERROR(db_->Put(Key(id), meta, ProtoDb::SpaceUse::kFrees));
  Account(&before, &meta);
  return Status::Ok();
}

Status ChunkStore::Remove(const fs3rpc::ChunkId& id) {
  auto before = Meta(id);  // unreadable: removed all the same, and not counted
  // The record first (a deletion: it goes through on a full disk), then the files: a crash
  // between leaves files without a record, which the next Open removes; never a record whose
  // file is gone.
  FF_RETURN_IF_ERROR(db_->Delete(Key(id)));
  for (bool pending : {true, false}) {
    const std::string path = Path(id, pending);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("target {}: cannot remove {} ({}); it goes at the next start", dir_, path,
                   std::strerror(errno));
    }
  }
  if (before.ok()) Account(&*before, nullptr);
  return Status::Ok();
}

Result<std::string> ChunkStore::Read(const fs3rpc::ChunkId& id, uint32_t offset, uint32_t length,
                                     bool pending) const {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, Meta(id));
  return ReadAs(meta, offset, length, pending);
}

Result<std::string> ChunkStore::ReadAs(const fs3rpc::ChunkMetaRecord& meta, uint32_t offset,
                                       uint32_t length, bool pending) const {
  const fs3rpc::ChunkId& id = meta.id();
  const uint32_t size = pending ? meta.pending_length() : meta.length();
  const auto& crcs = pending ? meta.pending_block_crcs() : meta.block_crcs();
  if (offset >= size || length == 0) return std::string();
  const uint32_t end = std::min<uint64_t>(size, uint64_t{offset} + length);
  // Whole blocks around the range, so that each can be checked.
  const uint32_t first = offset / kBlockSize * kBlockSize;
  const uint32_t last =
      std::min<uint64_t>(size, (uint64_t{end} + kBlockSize - 1) / kBlockSize * kBlockSize);
  const std::string path = Path(id, pending);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  std::string buf(last - first, '\0');
  ssize_t n = pread(fd, buf.data(), buf.size(), first);
  int e = errno;
  close(fd);
  if (n < 0) return Status::FromErrno(e, "read " + path);
  if (static_cast<std::size_t>(n) != buf.size()) {
    return DataLoss("chunk " + IdName(id) + " is shorter on disk than its metadata says");
  }
  for (uint32_t b = first; b < last; b += kBlockSize) {
    const uint32_t i = b / kBlockSize;
    std::string_view block = std::string_view(buf).substr(b - first, kBlockSize);
    if (static_cast<int>(i) >= crcs.size() || Crc32c(block) != crcs[static_cast<int>(i)]) {
      return DataLoss("chunk " + IdName(id) + " fails its checksum at byte " + std::to_string(b));
    }
  }
  return buf.substr(offset - first, end - offset);
}

Result<std::vector<fs3rpc::ChunkMetaRecord>> ChunkStore::List() const {
  return db_->Scan<fs3rpc::ChunkMetaRecord>("c/");
}

Result<ChunkStore::InodeExtent> ChunkStore::Extent(uint64_t inode) const {
  fs3rpc::ChunkId id;
  id.set_inode(inode);
  std::string prefix = Key(id).substr(0, 10);  // "c/" + the inode
  FF_ASSIGN_OR_RETURN(auto chunks, db_->Scan<fs3rpc::ChunkMetaRecord>(prefix));
  InodeExtent extent;
  for (const auto& c : chunks) {
    if (c.committed_version() != 0) extent.stored_bytes += StoredBytes(c);
  }
  if (!chunks.empty()) extent.last = std::move(chunks.back());
  return extent;
}

}  // namespace ff::fs3

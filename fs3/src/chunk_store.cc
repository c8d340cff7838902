#include "fs3/chunk_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "common/files.h"
#include "fs3/crc32c.h"

namespace ff::fs3 {
namespace {

std::vector<uint32_t> BlockCrcs(const std::string& content) {
  std::vector<uint32_t> out;
  for (std::size_t off = 0; off < content.size(); off += kBlockSize) {
    out.push_back(Crc32c(std::string_view(content).substr(off, kBlockSize)));
  }
  return out;
}

Status WriteFileSynced(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + tmp);
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());  // a full disk keeps none of what did not fit
      return Status::FromErrno(e, "write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  if (fdatasync(fd) != 0) {
    int e = errno;
    close(fd);
    unlink(tmp.c_str());
    return Status::FromErrno(e, "sync " + tmp);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno(errno, "rename " + tmp);
  return Status::Ok();
}

bool Exists(const fs3rpc::ChunkMetaRecord& m) {
  return m.committed_version() != 0 || m.pending_version() != 0;
}

// Both files of a chunk are on disk until Commit renames the pending one over the committed one.
int64_t HeldBytes(const fs3rpc::ChunkMetaRecord& m) {
  return int64_t{m.length()} + int64_t{m.pending_length()};
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
  for (const auto& m : chunks)
    store->Account(nullptr, &m);
  return store;
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

Result<fs3rpc::ChunkMetaRecord> ChunkStore::Prepare(const fs3rpc::ChunkId& id, uint64_t version,
                                                    uint32_t offset, const std::string& data,
                                                    bool full, uint64_t chain_version) {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, MetaOrNew(id));
  std::string content;
  if (full) {
    content = data;
  } else {
    FF_ASSIGN_OR_RETURN(content, Base(meta, version));
    if (content.size() < offset + data.size()) content.resize(offset + data.size(), '\0');
    content.replace(offset, data.size(), data);
  }
  return StorePending(std::move(meta), version, content, chain_version);
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::PrepareTruncate(const fs3rpc::ChunkId& id,
                                                            uint64_t version, uint32_t length,
                                                            uint64_t chain_version) {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, MetaOrNew(id));
  FF_ASSIGN_OR_RETURN(std::string content, Base(meta, version));
  content.resize(length, '\0');
  return StorePending(std::move(meta), version, content, chain_version);
}

Result<fs3rpc::ChunkMetaRecord> ChunkStore::StorePending(fs3rpc::ChunkMetaRecord meta,
                                                         uint64_t version,
                                                         const std::string& content,
                                                         uint64_t chain_version) {
  const fs3rpc::ChunkId id = meta.id();
  const fs3rpc::ChunkMetaRecord before = meta;
  FF_RETURN_IF_ERROR(WriteFileSynced(Path(id, true), content));
  meta.set_pending_version(version);
  meta.set_pending_length(static_cast<uint32_t>(content.size()));
  meta.set_pending_crc32c(Crc32c(content));
  meta.clear_pending_block_crcs();
  for (uint32_t c : BlockCrcs(content))
    meta.add_pending_block_crcs(c);
  meta.set_chain_version(chain_version);
  FF_RETURN_IF_ERROR(db_->Put(Key(id), meta));
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
  meta.set_pending_version(0);
  meta.set_pending_length(0);
  meta.set_pending_crc32c(0);
  meta.clear_pending_block_crcs();
  FF_RETURN_IF_ERROR(db_->Put(Key(id), meta));
  Account(&before, &meta);
  return Status::Ok();
}

Status ChunkStore::Remove(const fs3rpc::ChunkId& id) {
  auto before = Meta(id);  // unreadable: removed all the same, and not counted
  unlink(Path(id, true).c_str());
  unlink(Path(id, false).c_str());
  FF_RETURN_IF_ERROR(db_->Delete(Key(id)));
  if (before.ok()) Account(&*before, nullptr);
  return Status::Ok();
}

Result<std::string> ChunkStore::Read(const fs3rpc::ChunkId& id, uint32_t offset, uint32_t length,
                                     bool pending) const {
  FF_ASSIGN_OR_RETURN(fs3rpc::ChunkMetaRecord meta, Meta(id));
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

Result<std::optional<fs3rpc::ChunkMetaRecord>> ChunkStore::LastChunk(uint64_t inode) const {
  fs3rpc::ChunkId id;
  id.set_inode(inode);
  std::string prefix = Key(id).substr(0, 10);  // "c/" + the inode
  FF_ASSIGN_OR_RETURN(auto chunks, db_->Scan<fs3rpc::ChunkMetaRecord>(prefix));
  if (chunks.empty()) return std::optional<fs3rpc::ChunkMetaRecord>();
  return std::optional<fs3rpc::ChunkMetaRecord>(chunks.back());
}

}  // namespace ff::fs3

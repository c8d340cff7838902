#include "fs3/fs.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "common/rpc_client.h"

namespace ff::fs3 {
namespace {

constexpr int kMaxSymlinkDepth = 40;

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < path.size()) {
    std::size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

MetaClientOptions MetaOptionsFor(const FsOptions& options) {
  // Every call is safe to retry (reads, or mutations with a request id): keep trying while
  // fs3-meta restarts.
  MetaClientOptions o{options.meta, true, CallOptions::Idempotent()};
  o.call.max_attempts = 1 << 20;
  o.call.max_backoff = std::chrono::milliseconds(500);
  o.call.total_deadline = options.meta_retry_timeout;
  return o;
}

}  // namespace

Result<std::unique_ptr<FileSystem>> FileSystem::Connect(const FsOptions& options) {
  ClientOptions co;
  co.mgmtd = options.mgmtd;
  co.max_inflight_read_bytes = options.max_inflight_read_bytes;
  co.retry_timeout = options.write_retry_timeout;
  co.transport = options.transport;
  FF_ASSIGN_OR_RETURN(auto data, StorageClient::Create(co));
  return std::unique_ptr<FileSystem>(new FileSystem(options, std::move(data)));
}

FileSystem::FileSystem(const FsOptions& options, std::unique_ptr<StorageClient> data)
    : options_(options),
      meta_(std::make_unique<MetaClient>(MetaOptionsFor(options))),
      data_(std::move(data)),
      next_request_(std::random_device{}() * uint64_t{0x100000000}) {}

fs3rpc::Credentials FileSystem::Cred() const {
  fs3rpc::Credentials c;
  c.set_uid(options_.caller.uid);
  c.set_gid(options_.caller.gid);
  for (uint32_t g : options_.caller.groups)
    c.add_groups(g);
  return c;
}

Result<fs3rpc::Inode> FileSystem::Resolve(const std::string& path, int depth) {
  if (path.empty() || path[0] != '/') return InvalidArgument("paths are absolute: '" + path + "'");
  fs3rpc::InoRequest root;
  root.set_ino(kRootIno);
  fs3rpc::Inode at;
  FF_RETURN_IF_ERROR(meta_->GetAttr(root, &at));
  const auto parts = Components(path);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    fs3rpc::NameRequest r;
    *r.mutable_cred() = Cred();
    r.set_parent(at.ino());
    r.set_name(parts[i]);
    fs3rpc::Inode next;
    FF_RETURN_IF_ERROR(meta_->Lookup(r, &next));
    if (next.type() == fs3rpc::INODE_SYMLINK) {
      if (depth >= kMaxSymlinkDepth)
        return Status(StatusCode::kSymlinkLoop, "too many symbolic links");
      std::string rest;
      for (std::size_t k = i + 1; k < parts.size(); ++k)
        rest += "/" + parts[k];
      std::string base;
      for (std::size_t k = 0; k < i; ++k)
        base += "/" + parts[k];
      const std::string target =
          next.symlink()[0] == '/' ? next.symlink() : base + "/" + next.symlink();
      return Resolve(target + rest, depth + 1);
    }
    at = next;
  }
  return at;
}

Result<std::pair<uint64_t, std::string>> FileSystem::ResolveParent(const std::string& path) {
  auto parts = Components(path);
  if (parts.empty()) return InvalidArgument("'" + path + "' names no entry");
  std::string parent;
  for (std::size_t k = 0; k + 1 < parts.size(); ++k)
    parent += "/" + parts[k];
  FF_ASSIGN_OR_RETURN(fs3rpc::Inode dir, Resolve(parent.empty() ? "/" : parent));
  return std::make_pair(dir.ino(), parts.back());
}

Result<fs3rpc::Inode> FileSystem::Stat(const std::string& path) {
  return Resolve(path);
}

Status FileSystem::MakeAt(const std::string& path, uint32_t mode, fs3rpc::InodeType type,
                          fs3rpc::Inode* out) {
  FF_ASSIGN_OR_RETURN(auto where, ResolveParent(path));
  fs3rpc::MakeRequest r;
  *r.mutable_cred() = Cred();
  r.set_parent(where.first);
  r.set_name(where.second);
  r.set_mode(mode);
  r.set_type(type);
  r.set_request_id(next_request_++);
  return Durable(meta_->Make(r, out));
}

Status FileSystem::Mkdir(const std::string& path, uint32_t mode) {
  fs3rpc::Inode out;
  return MakeAt(path, mode, fs3rpc::INODE_DIR, &out);
}

Result<File> FileSystem::Create(const std::string& path, uint32_t mode, bool exclusive) {
  fs3rpc::Inode out;
  Status st = MakeAt(path, mode, fs3rpc::INODE_FILE, &out);
  if (st.code() == StatusCode::kAlreadyExists && !exclusive) {
    FF_ASSIGN_OR_RETURN(out, Resolve(path));
    fs3rpc::SetAttrRequest trunc;
    *trunc.mutable_cred() = Cred();
    trunc.set_ino(out.ino());
    trunc.set_size(0);
    FF_RETURN_IF_ERROR(meta_->SetAttr(trunc, &out));
  } else {
    FF_RETURN_IF_ERROR(st);
  }
  return File{out.ino(), 0, {out.layout().chains().begin(), out.layout().chains().end()}, true};
}

Result<File> FileSystem::Open(const std::string& path) {
  FF_ASSIGN_OR_RETURN(fs3rpc::Inode inode, Resolve(path));
  if (inode.type() == fs3rpc::INODE_DIR)
    return Status(StatusCode::kIsADirectory, path + " is a directory");
  if (!Permitted(options_.caller, inode, 4)) return PermissionDenied("cannot read " + path);
  return File{inode.ino(),
              inode.size(),
              {inode.layout().chains().begin(), inode.layout().chains().end()},
              Permitted(options_.caller, inode, 2)};
}

SessionLease* FileSystem::Lease() {
  MutexLock lock(&lease_mu_);
  if (!lease_) lease_ = std::make_unique<SessionLease>(meta_.get());
  return lease_.get();
}

Result<std::optional<OpenedSession>> FileSystem::OpenWriteSession(uint64_t ino) {
  SessionLease* const lease = Lease();
  fs3rpc::InoRequest r;
  r.set_ino(ino);
  fs3rpc::Inode out;
  OpenedSession session;
  FF_RETURN_IF_ERROR(lease->OpenWith(ino, &r, &session, [&] { return meta_->Open(r, &out); }));
  if (session.client != 0) return std::optional<OpenedSession>(session);
  // Anonymous (fs3-meta grants no lease): such a session would outlive a crash, so none.
  fs3rpc::CloseRequest close;
  close.set_ino(ino);
  (void)lease->End(session.handle, close);
  return std::optional<OpenedSession>();
}

Status FileSystem::CloseWriteSession(fs3rpc::CloseRequest& close, const OpenedSession& session) {
  return Durable(Lease()->End(session.handle, close));
}

Status FileSystem::Durable(Status done) {
  if (!done.ok()) return done;
  fs3rpc::CloseRequest sync;  // no length to settle: answered once fs3-meta's log is on disk
  sync.set_ino(kRootIno);
  fs3rpc::Inode out;
  return meta_->Sync(sync, &out);
}

Status FileSystem::WriteChunks(const File& file, uint64_t offset, std::string_view data) {
  // The chunks it spans, each written by one of up to kParallelChunkWrites threads (a file's
  // chunks lie on different chains, so they land side by side rather than one after another).
  constexpr std::size_t kParallelChunkWrites = 8;
  const uint64_t size = data_->chunk_size();
  std::vector<std::pair<uint64_t, std::string_view>> pieces;
  for (uint64_t at = offset; !data.empty();) {
    const std::size_t n = std::min<uint64_t>(data.size(), size - at % size);
    pieces.emplace_back(at, data.substr(0, n));
    data.remove_prefix(n);
    at += n;
  }
  if (pieces.size() <= 1) {
    return pieces.empty() ? Status::Ok()
                          : data_->Write(file.ino, pieces[0].first, pieces[0].second, file.chains);
  }
  const std::size_t workers = std::min(kParallelChunkWrites, pieces.size());
  std::vector<std::future<Status>> done;
  for (std::size_t w = 0; w < workers; ++w) {
    done.push_back(std::async(std::launch::async, [&, w]() -> Status {
      for (std::size_t i = w; i < pieces.size(); i += workers)
        FF_RETURN_IF_ERROR(data_->Write(file.ino, pieces[i].first, pieces[i].second, file.chains));
      return Status::Ok();
    }));
  }
  Status first = Status::Ok();
  for (auto& d : done) {
    Status st = d.get();  // every worker ends before the data it points into goes away
    if (first.ok() && !st.ok()) first = std::move(st);
  }
  return first;
}

Status FileSystem::Write(File& file, uint64_t offset, std::string_view data) {
  if (!file.writable) {
    return PermissionDenied("inode " + std::to_string(file.ino) + " was not opened for writing");
  }
  const uint64_t end = offset + data.size();
  std::optional<OpenedSession> session;
  if (end > file.size) {
    FF_ASSIGN_OR_RETURN(session, OpenWriteSession(file.ino));
  }
  Status st = WriteChunks(file, offset, data);
  if (st.ok() && end > file.size) {
    // The length grows to the write's end, and never shrinks: another writer may have written
    // past it since this one's Open.
    fs3rpc::CloseRequest grow;
    grow.set_ino(file.ino);
    grow.set_size(end);
    if (session) {
      st = CloseWriteSession(grow, *session);
      session.reset();
    } else {
      fs3rpc::Inode out;
      st = meta_->Sync(grow, &out);
    }
    if (st.ok()) file.size = end;
  }
  if (!st.ok()) {
    // Some of the data may be on storage (a chunk applied whose answer was lost, or the length's
    // update refused after every chunk landed): fs3-meta settles the length from storage, so
    // that it covers whatever landed (the failed range reads as old or new data, as POSIX allows
    // after a failed write), now and again once a chain's retries of it are over (`recheck`).
    // Best effort: the write's own error is what the caller gets.
    fs3rpc::CloseRequest settle;
    settle.set_ino(file.ino);
    settle.set_size(file.size);
    settle.set_wrote(true);
    settle.set_recheck(true);
    if (session) {
      (void)CloseWriteSession(settle, *session);
    } else {
      fs3rpc::Inode out;
      if (meta_->Sync(settle, &out).ok()) file.size = std::max(file.size, out.size());
    }
  }
  return st;
}

Result<std::vector<DirEntry>> FileSystem::List(const std::string& path) {
  FF_ASSIGN_OR_RETURN(fs3rpc::Inode dir, Resolve(path));
  std::vector<DirEntry> out;
  std::string cursor;
  for (;;) {
    fs3rpc::ReaddirRequest r;
    *r.mutable_cred() = Cred();
    r.set_ino(dir.ino());
    r.set_cursor(cursor);
    r.set_limit(1024);
    fs3rpc::ReaddirReply page;
    FF_RETURN_IF_ERROR(meta_->Readdir(r, &page));
    for (const auto& e : page.entries())
      out.push_back({e.name(), e.ino(), e.type()});
    if (page.entries_size() < 1024) return out;
    cursor = page.entries(page.entries_size() - 1).name();
  }
}

Status FileSystem::RemoveName(const std::string& path, bool directory) {
  FF_ASSIGN_OR_RETURN(auto where, ResolveParent(path));
  fs3rpc::NameRequest r;
  *r.mutable_cred() = Cred();
  r.set_parent(where.first);
  r.set_name(where.second);
  r.set_request_id(next_request_++);
  fs3rpc::DirsReply e;
  return Durable(directory ? meta_->Rmdir(r, &e) : meta_->Unlink(r, &e));
}

Status FileSystem::Unlink(const std::string& path) {
  return RemoveName(path, /*directory=*/false);
}

Status FileSystem::Rmdir(const std::string& path) {
  return RemoveName(path, /*directory=*/true);
}

Status FileSystem::Rename(const std::string& from, const std::string& to) {
  FF_ASSIGN_OR_RETURN(auto src, ResolveParent(from));
  FF_ASSIGN_OR_RETURN(auto dst, ResolveParent(to));
  fs3rpc::RenameRequest r;
  *r.mutable_cred() = Cred();
  r.set_src_parent(src.first);
  r.set_src_name(src.second);
  r.set_dst_parent(dst.first);
  r.set_dst_name(dst.second);
  r.set_request_id(next_request_++);
  fs3rpc::DirsReply e;
  return Durable(meta_->Rename(r, &e));
}

Status FileSystem::SetStripe(const std::string& path, uint32_t stripe) {
  FF_ASSIGN_OR_RETURN(fs3rpc::Inode dir, Resolve(path));
  fs3rpc::SetLayoutRequest r;
  *r.mutable_cred() = Cred();
  r.set_ino(dir.ino());
  r.set_stripe(stripe);
  fs3rpc::Inode out;
  return meta_->SetLayout(r, &out);
}

std::future<Result<std::vector<uint32_t>>> FileSystem::ReadBatchAsync(
    std::vector<ReadRange> ranges) {
  return std::async(
      std::launch::async, [this, ranges = std::move(ranges)]() -> Result<std::vector<uint32_t>> {
        // Lengths bound what is read: one getattr per distinct file.
        std::map<uint64_t, uint64_t> size_of;
        std::map<uint64_t, std::vector<uint32_t>> chains_of;
        for (const ReadRange& r : ranges) {
          if (size_of.contains(r.ino)) continue;
          fs3rpc::InoRequest q;
          q.set_ino(r.ino);
          fs3rpc::Inode inode;
          FF_RETURN_IF_ERROR(meta_->GetAttr(q, &inode));
          size_of[r.ino] = inode.size();
          chains_of[r.ino].assign(inode.layout().chains().begin(), inode.layout().chains().end());
        }
        std::vector<ReadOp> ops;
        std::vector<uint32_t> counts;
        for (const ReadRange& r : ranges) {
          const uint64_t size = size_of[r.ino];
          const uint32_t n =
              r.offset >= size
                  ? 0
                  : static_cast<uint32_t>(std::min<uint64_t>(r.length, size - r.offset));
          counts.push_back(n);
          ops.push_back({r.ino, r.offset, n, chains_of[r.ino]});
        }
        FF_ASSIGN_OR_RETURN(auto data, data_->ReadBatch(ops));
        for (std::size_t i = 0; i < ranges.size(); ++i) {
          std::memcpy(ranges[i].buffer, data[i].data(), counts[i]);
        }
        return counts;
      });
}

}  // namespace ff::fs3

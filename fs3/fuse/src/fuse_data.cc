// fs3-fuse's data path: open files (shared by their handles), read-ahead blocks and the read
// cache, write gathering with background writes, and flush / fsync settling the length.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "common/rpc_client.h"
#include "fuse_fs_internal.h"

namespace ff::fs3 {

// ---- open files ---------------------------------------------------------------------------------

std::shared_ptr<FuseFs::OpenFile> FuseFs::Find(uint64_t ino) {
  MutexLock lock(&files_mu_);
  auto it = files_.find(ino);
  return it == files_.end() ? nullptr : it->second;
}

std::shared_ptr<FuseFs::OpenFile> FuseFs::Acquire(const fs3rpc::Inode& inode) {
  MutexLock lock(&files_mu_);
  auto& f = files_[inode.ino()];
  if (!f) f = std::make_shared<OpenFile>(inode.ino());
  MutexLock flock(&f->mu);
  if (f->handles++ == 0) {
    f->size = inode.size();
    f->landed_size = inode.size();
    f->chains.assign(inode.layout().chains().begin(), inode.layout().chains().end());
    DropBlocks(*f);
  } else {
    f->size = std::max(f->size, inode.size());
    f->landed_size = std::max(f->landed_size, inode.size());
  }
  return f;
}

void FuseFs::ReleaseFile(const std::shared_ptr<OpenFile>& f) {
  MutexLock lock(&files_mu_);
  MutexLock flock(&f->mu);
  if (--f->handles == 0) {
    DropBlocks(*f);
    files_.erase(f->ino);
  }
}

void FuseFs::NoteError(OpenFile& f, const Status& st) {
  if (st.ok()) return;
  f.error = st;
  ++f.error_seq;
}

void FuseFs::NoteWritten(OpenFile& f, uint64_t end, const Status& st) {
  if (st.ok()) f.landed_size = std::max(f.landed_size, end);
  NoteError(f, st);
}

uint64_t FuseFs::SizeToReport(OpenFile& f) {
  // Every write has finished (FlushData): what landed is the file, here too.
  if (f.error_seq > 0) f.size = f.landed_size;
  return f.size;
}

uint64_t FuseFs::SeenErrors(OpenFile& f) {
  MutexLock lock(&f.mu);
  return f.error_seq;  // a handle opened now is not told of earlier failures
}

void FuseFs::DropBlocks(OpenFile& f) {
  cache_used_ -= f.cached;
  f.cached = 0;
  f.blocks.clear();
}

void FuseFs::StartFlush(OpenFile& f) {
  while (f.inflight.size() >= options_.writes_in_flight ||
         (!f.inflight.empty() &&
          f.inflight.front().done.wait_for(std::chrono::seconds(0)) == std::future_status::ready)) {
    Status st = f.inflight.front().done.get();
    const uint64_t end = f.inflight.front().end;
    f.inflight.pop_front();
    NoteWritten(f, end, st);
  }
  if (f.wb.empty()) return;
  std::string data = std::move(f.wb);
  f.wb.clear();
  const uint64_t offset = f.wb_offset;
  const uint64_t end = offset + data.size();
  // The older writes this one overlaps: it waits for them before it is sent.
  std::vector<std::shared_future<Status>> before;
  for (const OpenFile::Inflight& w : f.inflight) {
    if (w.offset < end && offset < w.end) before.push_back(w.done);
  }
  const uint64_t ino = f.ino;
  std::shared_future<Status> done =
      std::async(std::launch::async, [this, ino, offset, data = std::move(data), chains = f.chains,
                                      before = std::move(before)]() mutable {
        for (const auto& w : before)
          w.wait();  // its failure is reported by itself; this write still goes in order
        return storage_->WriteBuffer(ino, offset, std::move(data), chains);
      }).share();
  f.inflight.push_back({offset, end, std::move(done)});
}

void FuseFs::FlushData(OpenFile& f) {
  StartFlush(f);
  for (; !f.inflight.empty(); f.inflight.pop_front())
    NoteWritten(f, f.inflight.front().end, f.inflight.front().done.get());
}

Status FuseFs::TakeError(OpenFile& f, Handle* h) {
  if (h == nullptr || f.error_seq <= h->seen_error) return Status::Ok();
  h->seen_error = f.error_seq;
  return f.error;
}

Status FuseFs::Sync(OpenFile& f, Handle* h, bool durable) {
  FlushData(f);
  if (f.error_seq > 0) (void)SizeToReport(f);  // a failed write does not extend the file
  FF_RETURN_IF_ERROR(TakeError(f, h));
  if (!f.dirty && !durable) return Status::Ok();
  fs3rpc::CloseRequest r;
  r.set_ino(f.ino);
  if (f.dirty) {
    r.set_size(SizeToReport(f));
    r.set_wrote(true);
    r.set_recheck(f.error_seq > 0);  // a failed write may still land
  }
  fs3rpc::Inode out;
  FF_RETURN_IF_ERROR(meta_->Sync(r, &out));
  f.dirty = false;
  return Status::Ok();
}

Status FuseFs::CloseSession(uint64_t ino, uint64_t session, std::optional<uint64_t> size,
                            bool wrote, bool recheck) {
  fs3rpc::CloseRequest r;
  r.set_ino(ino);
  if (size) r.set_size(*size);
  r.set_wrote(wrote);
  r.set_recheck(recheck);
  return lease_->End(session, r);
}

void FuseFs::Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  fs3rpc::InoRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  fs3rpc::Inode inode;
  OpenedSession session;
  Status st = lease_->OpenWith(ino, &r, &session, [&] { return meta_->Open(r, &inode); });
  if (!st.ok()) return ReplyErr(req, st);
  const int acc = fi->flags & O_ACCMODE;
  const uint32_t mask = (acc == O_RDONLY ? 4 : acc == O_WRONLY ? 2 : 6);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Caller caller{ctx->uid, ctx->gid, {}};
  if (ctx->uid != 0) caller.groups = GroupsOf(req, ctx->pid);
  if (!Permitted(caller, inode, mask)) {
    (void)CloseSession(ino, session.handle, std::nullopt, false);
    fuse_reply_err(req, EACCES);
    return;
  }
  // Close-to-open: the kernel's cached attributes (the length above all) are dropped, so what
  // another mount wrote and closed is read afresh (only attributes: no page locks involved, so
  // this is safe inside the open).
  if (session_ != nullptr) fuse_lowlevel_notify_inval_inode(session_, ino, -1, 0);
  auto* h = new Handle{Acquire(inode), false, acc != O_RDONLY, session.handle};
  h->seen_error = SeenErrors(*h->file);
  fi->fh = reinterpret_cast<uint64_t>(h);
  fi->keep_cache = 0;  // and the pages
  // A descriptor that cannot write has nothing to flush: its close costs no round trip (the
  // writers' own closes report their errors and settle the length).
  fi->noflush = acc == O_RDONLY;
  if (fuse_reply_open(req, fi) == -ENOENT) {  // the caller was interrupted: no release comes
    (void)CloseSession(ino, h->session, std::nullopt, false);
    ReleaseFile(h->file);
    delete h;
  }
}

void FuseFs::Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                    fuse_file_info* fi) {
  fs3rpc::MakeRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_parent(parent);
  r.set_name(name);
  r.set_mode(mode & 07777);
  r.set_type(fs3rpc::INODE_FILE);
  r.set_open(true);
  r.set_request_id(NextRequest());
  fs3rpc::Inode inode;
  OpenedSession session;
  Status st = lease_->OpenWith(0, &r, &session, [&] { return meta_->Make(r, &inode); });
  if (!st.ok()) return ReplyErr(req, st);
  lease_->Bind(session.handle, inode.ino());
  NoteDirs(inode.dirs());
  auto* h = new Handle{Acquire(inode), false, (fi->flags & O_ACCMODE) != O_RDONLY, session.handle};
  h->seen_error = SeenErrors(*h->file);
  fi->fh = reinterpret_cast<uint64_t>(h);
  fuse_entry_param e{};
  e.ino = inode.ino();
  e.generation = 1;
  e.attr = ToStat(inode);
  e.attr_timeout = options_.attr_timeout_s;
  e.entry_timeout = options_.entry_timeout_s;
  if (fuse_reply_create(req, &e, fi) == -ENOENT) {  // no release comes
    (void)CloseSession(inode.ino(), h->session, std::nullopt, false);
    ReleaseFile(h->file);
    delete h;
  }
}

void FuseFs::Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  auto* h = reinterpret_cast<Handle*>(fi->fh);
  OpenFile& f = *h->file;
  const auto offset = static_cast<uint64_t>(off);
  UniqueLock lock(&f.mu);
  if (!f.wb.empty() || !f.inflight.empty()) {
    const uint64_t failed_before = f.error_seq;
    FlushData(f);                        // read what was written
    if (f.error_seq != failed_before) {  // it could not be: this read fails too (not told)
      Status st = f.error;
      lock.unlock();
      return ReplyErr(req, st);
    }
  }
  if (offset >= f.size || size == 0) {
    lock.unlock();
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  const uint64_t n = std::min<uint64_t>(size, f.size - offset);
  const uint64_t block = options_.readahead_bytes;
  const uint64_t file_size = f.size;
  // A file that fits a quarter of the read cache is kept in blocks while open, random reads
  // included (each block is fetched once); larger files read randomly fetch exactly what is
  // asked (whole blocks would multiply the bytes moved without being read again).
  const bool small = block > 0 && file_size <= options_.read_cache_bytes / 4;
  const uint64_t first = block == 0 ? 0 : offset / block * block;
  const uint64_t last = block == 0 ? 0 : (offset + n - 1) / block * block;
  const bool sequential = offset == f.last_read_end || (block > 0 && f.blocks.contains(first));
  f.last_read_end = offset + n;
  auto ensure = [&](uint64_t b) {
    f.mu.AssertHeld();  // called only below, under `lock`
    if (b >= file_size || f.blocks.contains(b)) return true;
    const auto len = static_cast<uint32_t>(std::min<uint64_t>(block, file_size - b));
    if (small) {
      if (cache_used_ + len > options_.read_cache_bytes) return false;  // the cache is full
      cache_used_ += len;
      f.cached += len;
    }
    f.blocks[b] = std::async(std::launch::async, [this, ino, b, len, chains = f.chains] {
                    return storage_->Read(ino, b, len, chains);
                  }).share();
    return true;
  };
  bool covered = block > 0 && (sequential || small);
  for (uint64_t b = first; covered && b <= last; b += block)
    covered = ensure(b);
  if (!covered) {
    const std::vector<uint32_t> chains = f.chains;
    lock.unlock();
    auto data = storage_->Read(ino, offset, static_cast<uint32_t>(n), chains);
    if (!data.ok()) return ReplyErr(req, data.status());
    fuse_reply_buf(req, data->data(), std::min<uint64_t>(n, data->size()));
    return;
  }
  if (sequential) {  // the next blocks in the background; blocks behind the reader dropped
    for (uint64_t b = last + block; b <= last + kReadaheadBlocks * block; b += block)
      ensure(b);
    if (!small) {
      while (!f.blocks.empty() && f.blocks.begin()->first < first)
        f.blocks.erase(f.blocks.begin());
    }
  }
  std::vector<std::pair<uint64_t, std::shared_future<Result<std::string>>>> parts;
  for (uint64_t b = first; b <= last; b += block)
    parts.emplace_back(b, f.blocks[b]);
  lock.unlock();
  std::string out;
  out.reserve(n);
  for (auto& [b, part] : parts) {
    const Result<std::string>& data = part.get();
    if (!data.ok()) {
      lock.lock();
      DropBlocks(f);  // fetched again by the next read
      lock.unlock();
      return ReplyErr(req, data.status());
    }
    const uint64_t from = std::max(offset, b);
    const uint64_t to = std::min(offset + n, b + data->size());
    if (to > from) out.append(data->data() + (from - b), to - from);
  }
  if (out.size() < n) {
    // A block shorter than the file it was fetched for: the kernel takes a short answer for the
    // end of the file (and zero-fills the pages). Never expected; said so that it can be found.
    spdlog::warn(
        "fs3-fuse: inode {}: read of [{}, +{}) answered {} bytes from blocks of a file "
        "of {} bytes",
        ino, offset, n, out.size(), file_size);
  }
  fuse_reply_buf(req, out.data(), out.size());
}

void FuseFs::Write(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off,
                   fuse_file_info* fi) {
  auto* h = reinterpret_cast<Handle*>(fi->fh);
  OpenFile& f = *h->file;
  const auto offset = static_cast<uint64_t>(off);
  UniqueLock lock(&f.mu);
  h->wrote = true;
  f.dirty = true;
  DropBlocks(f);
  if (options_.write_buffer_bytes == 0) {
    const std::vector<uint32_t> chains = f.chains;
    lock.unlock();
    Status st = storage_->Write(f.ino, offset, std::string_view(buf, size), chains);
    if (!st.ok()) return ReplyErr(req, st);
    lock.lock();
    f.landed_size = std::max<uint64_t>(f.landed_size, offset + size);
  } else {
    const bool follows = !f.wb.empty() && offset == f.wb_offset + f.wb.size();
    if (!follows || f.wb.size() + size > options_.write_buffer_bytes) {
      StartFlush(f);
      if (f.error_seq > h->seen_error) {  // an earlier write failed: so does this one, until
        Status st = f.error;              // a flush or fsync of this handle told of it
        lock.unlock();
        return ReplyErr(req, st);
      }
      f.wb_offset = offset;
    }
    if (f.wb.capacity() < options_.write_buffer_bytes) f.wb.reserve(options_.write_buffer_bytes);
    f.wb.append(buf, size);
    if (f.wb.size() >= options_.write_buffer_bytes) StartFlush(f);
  }
  f.size = std::max<uint64_t>(f.size, offset + size);
  lock.unlock();
  fuse_reply_write(req, size);
}

void FuseFs::Flush(fuse_req_t req, fuse_file_info* fi) {
  auto* h = reinterpret_cast<Handle*>(fi->fh);
  UniqueLock lock(&h->file->mu);
  Status st = Sync(*h->file, h);
  lock.unlock();
  fuse_reply_err(req, FsErrno(st));
}

void FuseFs::Fsync(fuse_req_t req, fuse_file_info* fi) {
  auto* h = reinterpret_cast<Handle*>(fi->fh);
  UniqueLock lock(&h->file->mu);
  Status st = Sync(*h->file, h, /*durable=*/true);
  lock.unlock();
  fuse_reply_err(req, FsErrno(st));
}

void FuseFs::Fsyncdir(fuse_req_t req, fuse_ino_t ino) {
  fs3rpc::CloseRequest r;  // no length to settle: fs3-meta answers once its log is on disk
  r.set_ino(ino);
  fs3rpc::Inode out;
  fuse_reply_err(req, FsErrno(meta_->Sync(r, &out)));
}

void FuseFs::Release(fuse_req_t req, fuse_file_info* fi) {
  auto* h = reinterpret_cast<Handle*>(fi->fh);
  OpenFile& f = *h->file;
  UniqueLock lock(&f.mu);
  FlushData(f);
  Status st = TakeError(f, h);
  if (!st.ok()) {
    // The kernel ignores what a release answers: at least the log says it.
    spdlog::error(
        "fs3-fuse: inode {}: a write failed and no flush or fsync of this handle "
        "reported it: {}",
        f.ino, st.ToString());
  }
  std::optional<uint64_t> size;
  bool wrote = false;
  if (h->wrote) {
    size = SizeToReport(f);
    wrote = f.dirty;
    f.dirty = false;
  }
  const bool recheck = wrote && f.error_seq > 0;  // a failed write may still land
  const uint64_t ino = f.ino;
  lock.unlock();
  Status closed;
  if (!h->wrote) {
    // Nothing to settle, nobody waiting (the kernel does not wait for a release): the close goes
    // with others gathered meanwhile.
    fs3rpc::CloseRequest r;
    r.set_ino(ino);
    lease_->EndSoon(h->session, std::move(r));
  } else {
    closed = CloseSession(ino, h->session, size, wrote, recheck);
  }
  ReleaseFile(h->file);
  delete h;
  if (st.ok()) st = closed;
  fuse_reply_err(req, FsErrno(st));
}

}  // namespace ff::fs3

#include "fuse_fs.h"

#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <deque>
#include <map>
#include <random>

#include "common/rpc_client.h"
#include "fuse_fs_internal.h"

namespace ff::fs3 {

void FuseOptions::Bind(ConfigSection& s) {
  s.Required("mountpoint", mountpoint);
  s.Required("meta", meta);
  s.Required("mgmtd", mgmtd);
  s.Optional("mount_options", mount_options);
  s.Optional("attr_timeout_s", attr_timeout_s);
  s.Optional("entry_timeout_s", entry_timeout_s);
  s.Optional("negative_timeout_s", negative_timeout_s);
  s.Check(attr_timeout_s >= 0 && entry_timeout_s >= 0 && negative_timeout_s >= 0, "attr_timeout_s",
          "timeouts may not be negative");
  s.Optional("write_buffer_bytes", write_buffer_bytes);
  s.Check(write_buffer_bytes <= (uint64_t{256} << 20), "write_buffer_bytes",
          "must be at most 256 MiB");
  s.Optional("writes_in_flight", writes_in_flight);
  s.Check(writes_in_flight >= 1, "writes_in_flight", "must be at least 1");
  s.Optional("readahead_bytes", readahead_bytes);
  s.Check(readahead_bytes <= (uint64_t{256} << 20), "readahead_bytes", "must be at most 256 MiB");
  s.Optional("read_cache_bytes", read_cache_bytes);
  s.Optional("max_inflight_read_bytes", max_inflight_read_bytes);
  s.Optional("threads", threads);
  s.Check(threads >= 1, "threads", "must be at least 1");
  s.Optional("retry_timeout_s", retry_timeout_s);
  s.Optional("meta_frames", meta_frames);
}

namespace {

MetaClientOptions MetaClientOptionsFor(const FuseOptions& options) {
  MetaClientOptions o;
  o.address = options.meta;
  o.frames = options.meta_frames;
  // Every call is safe to retry (reads, or mutations with a request id): keep trying while
  // fs3-meta restarts.
  o.call = CallOptions::Idempotent(std::chrono::seconds(10));
  o.call.max_attempts = 1 << 20;
  o.call.max_backoff = std::chrono::milliseconds(500);
  o.call.total_deadline = std::chrono::seconds(options.retry_timeout_s);
  return o;
}

}  // namespace

FuseFs::FuseFs(const FuseOptions& options, std::unique_ptr<StorageClient> storage, Metrics* metrics)
    : options_(options),
      storage_(std::move(storage)),
      metrics_(metrics),
      meta_(std::make_unique<MetaClient>(MetaClientOptionsFor(options))),
      lease_(std::make_unique<SessionLease>(meta_.get())),
      next_request_(std::random_device{}() * uint64_t{0x100000000} + 1) {
  if (!metrics_) return;
  for (const char* op : {"lookup",   "getattr",   "setattr",     "readlink",   "mknod",  "mkdir",
                         "unlink",   "rmdir",     "symlink",     "rename",     "link",   "open",
                         "read",     "write",     "flush",       "release",    "fsync",  "fsyncdir",
                         "opendir",  "readdir",   "readdirplus", "releasedir", "statfs", "setxattr",
                         "getxattr", "listxattr", "removexattr", "access",     "create"}) {
    latency_[op] = &metrics_->Histogram("fs3_fuse_op_seconds", "FUSE operation latency",
                                        Metrics::LatencyBuckets(), {{"op", op}});
  }
  dir_attrs_local_ = &metrics_->Counter("fs3_fuse_dir_attrs_local_total",
                                        "getattr of a directory answered with the attributes this "
                                        "mount's last change in it returned");
  xattr_absent_cached_ =
      &metrics_->Counter("fs3_fuse_xattr_absent_cached_total",
                         "getxattr of a missing name answered from the attributes' cache");
}

void FuseFs::Observe(const char* op, Clock::time_point start) {
  auto it = latency_.find(op);
  if (it != latency_.end()) {
    it->second->Observe(std::chrono::duration<double>(Clock::now() - start).count());
  }
}

std::vector<uint32_t> FuseFs::GroupsOf(fuse_req_t req, pid_t pid) {
  const auto now = Clock::now();
  {
    MutexLock lock(&groups_mu_);
    if (auto it = groups_.find(pid); it != groups_.end() && it->second.expires > now) {
      return it->second.groups;
    }
  }
  std::vector<gid_t> list(64);
  int n = fuse_req_getgroups(req, static_cast<int>(list.size()), list.data());
  if (n > static_cast<int>(list.size())) {
    list.resize(n);
    n = fuse_req_getgroups(req, n, list.data());
  }
  std::vector<uint32_t> groups;
  for (int i = 0; i < n; ++i)
    groups.push_back(list[i]);
  MutexLock lock(&groups_mu_);
  if (groups_.size() > 4096) groups_.clear();
  groups_[pid] = {groups, now + std::chrono::seconds(1)};
  return groups;
}

fs3rpc::Credentials FuseFs::Cred(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  fs3rpc::Credentials c;
  c.set_uid(ctx->uid);
  c.set_gid(ctx->gid);
  if (ctx->uid != 0) {
    for (uint32_t g : GroupsOf(req, ctx->pid))
      c.add_groups(g);
  }
  return c;
}

void FuseFs::NoteXattrNames(const fs3rpc::Inode& inode) {
  XattrNames seen;
  for (const auto& [name, value] : inode.xattrs())
    seen.names.push_back(name);
  seen.expires = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(options_.attr_timeout_s));
  MutexLock lock(&xattr_mu_);
  if (xattr_names_.size() > 100000) xattr_names_.clear();  // bounded: it is only a cache
  xattr_names_[inode.ino()] = std::move(seen);
}

std::optional<bool> FuseFs::HasXattr(uint64_t ino, const std::string& name) {
  MutexLock lock(&xattr_mu_);
  auto it = xattr_names_.find(ino);
  if (it == xattr_names_.end()) return std::nullopt;
  if (std::chrono::steady_clock::now() >= it->second.expires) {
    xattr_names_.erase(it);
    return std::nullopt;
  }
  const auto& names = it->second.names;
  return std::find(names.begin(), names.end(), name) != names.end();
}

void FuseFs::ForgetXattrNames(uint64_t ino) {
  MutexLock lock(&xattr_mu_);
  xattr_names_.erase(ino);
}

void FuseFs::NoteDirs(const google::protobuf::RepeatedPtrField<fs3rpc::Inode>& dirs) {
  if (dirs.empty() || options_.attr_timeout_s <= 0) return;
  const auto expires = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(options_.attr_timeout_s));
  MutexLock lock(&dir_attrs_mu_);
  for (const fs3rpc::Inode& d : dirs) {
    auto [it, fresh] = dir_attrs_.try_emplace(d.ino(), DirAttrs{d, expires});
    // Concurrent changes answer in any order: keep the later state.
    if (!fresh && d.ctime_ns() >= it->second.inode.ctime_ns()) it->second = DirAttrs{d, expires};
  }
}

std::optional<fs3rpc::Inode> FuseFs::TakeDirAttrs(uint64_t ino) {
  MutexLock lock(&dir_attrs_mu_);
  auto it = dir_attrs_.find(ino);
  if (it == dir_attrs_.end()) return std::nullopt;
  std::optional<fs3rpc::Inode> out;
  if (std::chrono::steady_clock::now() < it->second.expires) out = std::move(it->second.inode);
  dir_attrs_.erase(it);
  return out;
}

void FuseFs::ForgetDirAttrs(uint64_t ino) {
  MutexLock lock(&dir_attrs_mu_);
  dir_attrs_.erase(ino);
}

struct stat FuseFs::ToStat(const fs3rpc::Inode& inode) {
  NoteXattrNames(inode);
  struct stat st {};
  st.st_ino = inode.ino();
  st.st_mode = ModeOfType(inode.type()) | (inode.mode() & 07777);
  st.st_nlink = inode.nlink();
  st.st_uid = inode.uid();
  st.st_gid = inode.gid();
  st.st_rdev = inode.rdev();
  uint64_t size = inode.size();
  if (inode.type() == fs3rpc::INODE_FILE) {
    if (auto f = Find(inode.ino())) {
      MutexLock lock(&f->mu);
      size = std::max(size, f->size);  // written here, not yet settled
    }
  }
  st.st_size = static_cast<off_t>(size);
  st.st_blksize = 1 << 20;
  // What the data stores, holes left out (as storage said at the last settle; a length cut since
  // caps it, and what this mount appended since counts as data); unknown: the length.
  uint64_t stored = size;
  if (inode.has_stored_bytes()) {
    stored = std::min<uint64_t>(inode.stored_bytes(), (inode.size() + 4095) / 4096 * 4096) +
             (size - inode.size());
  }
  st.st_blocks = static_cast<blkcnt_t>((stored + 511) / 512);
  st.st_atim = Ts(inode.atime_ns());
  st.st_mtim = Ts(inode.mtime_ns());
  st.st_ctim = Ts(inode.ctime_ns());
  return st;
}

void FuseFs::ReplyEntry(fuse_req_t req, const fs3rpc::Inode& inode) {
  fuse_entry_param e{};
  e.ino = inode.ino();
  e.generation = 1;
  e.attr = ToStat(inode);
  e.attr_timeout = options_.attr_timeout_s;
  e.entry_timeout = options_.entry_timeout_s;
  fuse_reply_entry(req, &e);
}

void FuseFs::ReplyErr(fuse_req_t req, const Status& st) {
  int err = FsErrno(st);
  fuse_reply_err(req, err == 0 ? EIO : err);
}

// ---- operations ---------------------------------------------------------------------------------

void FuseFs::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  fs3rpc::NameRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_parent(parent);
  r.set_name(name);
  fs3rpc::Inode out;
  Status st = meta_->Lookup(r, &out);
  if (st.code() == StatusCode::kNotFound && options_.negative_timeout_s > 0) {
    fuse_entry_param e{};
    e.entry_timeout = options_.negative_timeout_s;
    fuse_reply_entry(req, &e);
    return;
  }
  if (!st.ok()) return ReplyErr(req, st);
  ReplyEntry(req, out);
}

void FuseFs::GetAttr(fuse_req_t req, fuse_ino_t ino) {
  if (auto dir = TakeDirAttrs(ino)) {  // what this mount's last change in it returned
    if (dir_attrs_local_) dir_attrs_local_->Increment();
    struct stat s = ToStat(*dir);
    fuse_reply_attr(req, &s, options_.attr_timeout_s);
    return;
  }
  fs3rpc::InoRequest r;
  r.set_ino(ino);
  fs3rpc::Inode out;
  Status st = meta_->GetAttr(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  struct stat s = ToStat(out);
  fuse_reply_attr(req, &s, options_.attr_timeout_s);
}

void FuseFs::SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                     const fuse_file_info* fi) {
  fs3rpc::SetAttrRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  // ftruncate: permission to write was decided when the file was opened. (Only ftruncate names
  // the handle, and only on regular files, so fh is a file Handle.)
  if (fi != nullptr && (to_set & FUSE_SET_ATTR_SIZE) &&
      reinterpret_cast<const Handle*>(fi->fh)->writable) {
    r.set_through_writable_handle(true);
  }
  if (to_set & FUSE_SET_ATTR_MODE) r.set_mode(attr->st_mode & 07777);
  if (to_set & FUSE_SET_ATTR_UID) r.set_uid(attr->st_uid);
  if (to_set & FUSE_SET_ATTR_GID) r.set_gid(attr->st_gid);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    r.set_atime_now(true);
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    r.set_atime_ns(Ns(attr->st_atim));
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    r.set_mtime_now(true);
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    r.set_mtime_ns(Ns(attr->st_mtim));
  }
  fs3rpc::Inode out;
  auto set = [&] {
    ForgetDirAttrs(ino);
    return meta_->SetAttr(r, &out);
  };
  std::shared_ptr<OpenFile> f;
  if (to_set & FUSE_SET_ATTR_SIZE) {
    r.set_size(static_cast<uint64_t>(attr->st_size));
    f = Find(ino);
  }
  if (f) {
    // What this mount gathered goes to storage (and its length to fs3-meta) before the cut,
    // and no write of this mount comes between the two.
    MutexLock lock(&f->mu);
    // ftruncate tells its descriptor of a failed write; truncate by path has none to tell.
    Status st = Sync(*f, fi != nullptr ? reinterpret_cast<Handle*>(fi->fh) : nullptr);
    if (st.ok()) st = set();
    if (!st.ok()) return ReplyErr(req, st);
    f->size = out.size();
    f->landed_size = out.size();
    DropBlocks(*f);
  } else if (Status st = set(); !st.ok()) {
    return ReplyErr(req, st);
  }
  struct stat s = ToStat(out);
  fuse_reply_attr(req, &s, options_.attr_timeout_s);
}

void FuseFs::Readlink(fuse_req_t req, fuse_ino_t ino) {
  fs3rpc::InoRequest r;
  r.set_ino(ino);
  fs3rpc::XattrReply out;
  Status st = meta_->Readlink(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  fuse_reply_readlink(req, out.value().c_str());
}

void FuseFs::Make(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev,
                  const char* symlink) {
  fs3rpc::MakeRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_parent(parent);
  r.set_name(name);
  r.set_mode(mode & 07777);
  r.set_type(symlink ? fs3rpc::INODE_SYMLINK : TypeOfMode(mode));
  r.set_rdev(rdev);
  if (symlink) r.set_symlink_target(symlink);
  r.set_request_id(NextRequest());
  fs3rpc::Inode out;
  Status st = meta_->Make(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  NoteDirs(out.dirs());
  ReplyEntry(req, out);
}

void FuseFs::Remove(fuse_req_t req, fuse_ino_t parent, const char* name, bool dir) {
  fs3rpc::NameRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_parent(parent);
  r.set_name(name);
  r.set_request_id(NextRequest());
  fs3rpc::DirsReply out;
  Status st = dir ? meta_->Rmdir(r, &out) : meta_->Unlink(r, &out);
  if (st.ok()) NoteDirs(out.dirs());
  fuse_reply_err(req, FsErrno(st));
}

void FuseFs::Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                    const char* newname, unsigned int flags) {
  if (flags & ~static_cast<unsigned int>(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    fuse_reply_err(req, EINVAL);  // RENAME_WHITEOUT: overlay filesystems only
    return;
  }
  fs3rpc::RenameRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_src_parent(parent);
  r.set_src_name(name);
  r.set_dst_parent(newparent);
  r.set_dst_name(newname);
  uint32_t f = 0;
  if (flags & RENAME_NOREPLACE) f |= kRenameNoReplace;
  if (flags & RENAME_EXCHANGE) f |= kRenameExchange;
  r.set_flags(f);
  r.set_request_id(NextRequest());
  fs3rpc::DirsReply out;
  Status st = meta_->Rename(r, &out);
  if (st.ok()) NoteDirs(out.dirs());
  fuse_reply_err(req, FsErrno(st));
}

void FuseFs::Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  fs3rpc::LinkRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  r.set_parent(newparent);
  r.set_name(newname);
  r.set_request_id(NextRequest());
  fs3rpc::Inode out;
  Status st = meta_->Link(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  NoteDirs(out.dirs());
  ReplyEntry(req, out);
}

void FuseFs::Opendir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  fi->fh = reinterpret_cast<uint64_t>(new DirHandle);
  fi->cache_readdir = 0;
  if (fuse_reply_open(req, fi) == -ENOENT) delete reinterpret_cast<DirHandle*>(fi->fh);
}

void FuseFs::Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                     bool plus) {
  auto* d = reinterpret_cast<DirHandle*>(fi->fh);
  // The reply goes after the lock is released: once answered, the kernel may release (and
  // this process delete) the handle at any moment.
  UniqueLock lock(&d->mu);
  std::string buf(size, '\0');
  std::size_t used = 0;
  // Offsets: 1 is ".", 2 is "..", k + 3 the entry after entries[k].
  for (auto next = static_cast<std::size_t>(off);; ++next) {
    std::string name;
    struct stat st {};
    const fs3rpc::Inode* attrs = nullptr;
    if (next == 0) {
      name = ".";
      st.st_ino = ino;
      st.st_mode = S_IFDIR;
    } else if (next == 1) {
      // ".." needs its inode number: readdir(3) skips an entry whose d_ino is 0.
      if (d->parent == 0) {
        fs3rpc::InoRequest r;
        r.set_ino(ino);
        fs3rpc::Inode dir;
        Status s = meta_->GetAttr(r, &dir);
        if (!s.ok()) {
          if (used > 0) break;
          lock.unlock();
          return ReplyErr(req, s);
        }
        d->parent = dir.parent() != 0 ? dir.parent() : ino;  // the root is its own parent
      }
      name = "..";
      st.st_ino = d->parent;
      st.st_mode = S_IFDIR;
    } else {
      const std::size_t k = next - 2;
      while (k >= d->entries.size() && !d->complete) {
        fs3rpc::ReaddirRequest r;
        *r.mutable_cred() = Cred(req);
        r.set_ino(ino);
        r.set_cursor(d->entries.empty() ? "" : d->entries.back().name());
        r.set_limit(kReaddirPage);
        r.set_plus(plus);
        fs3rpc::ReaddirReply page;
        Status s = meta_->Readdir(r, &page);
        if (!s.ok()) {
          if (used > 0) break;  // what is in the buffer goes; the error comes with the next call
          lock.unlock();
          return ReplyErr(req, s);
        }
        const auto now = std::chrono::steady_clock::now();
        for (auto& e : *page.mutable_entries()) {
          d->entries.push_back(std::move(e));
          d->loaded.push_back(now);
        }
        if (page.entries_size() < static_cast<int>(kReaddirPage)) d->complete = true;
      }
      if (k >= d->entries.size()) break;
      const fs3rpc::DirEntryInfo& e = d->entries[k];
      name = e.name();
      st.st_ino = e.ino();
      st.st_mode = ModeOfType(e.type());
      // READDIRPLUS: the entry and its attributes, as a lookup would give them, while they are
      // no older than the attribute timeout; else (or for a plain page) the kernel looks it up.
      if (plus && e.has_inode() &&
          std::chrono::steady_clock::now() - d->loaded[k] <
              std::chrono::duration<double>(options_.attr_timeout_s)) {
        attrs = &e.inode();
      }
    }
    std::size_t need = 0;
    if (!plus) {
      need = fuse_add_direntry(req, buf.data() + used, size - used, name.c_str(), &st,
                               static_cast<off_t>(next + 1));
    } else {
      fuse_entry_param p{};  // ino 0: a name only ("." and "..", or no fresh attributes)
      if (attrs != nullptr) {
        p.ino = attrs->ino();
        p.generation = 1;
        p.attr = ToStat(*attrs);
        p.attr_timeout = options_.attr_timeout_s;
        p.entry_timeout = options_.entry_timeout_s;
      } else {
        p.attr = st;
      }
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name.c_str(), &p,
                                    static_cast<off_t>(next + 1));
    }
    if (need > size - used) break;
    used += need;
  }
  lock.unlock();
  fuse_reply_buf(req, buf.data(), used);
}

void FuseFs::Releasedir(fuse_req_t req, fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  fuse_reply_err(req, 0);
}

void FuseFs::Statfs(fuse_req_t req) {
  fs3rpc::Empty r;
  fs3rpc::StatfsReply out;
  Status st = meta_->Statfs(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  struct statvfs s {};
  s.f_bsize = 1 << 20;
  s.f_frsize = 4096;
  // df's "used" is f_blocks - f_bfree: what fs3 holds, rounded up to whole blocks.
  const uint64_t used_blocks = (out.used_bytes() + s.f_frsize - 1) / s.f_frsize;
  s.f_bfree = out.free_bytes() / s.f_frsize;
  s.f_blocks = s.f_bfree + used_blocks;
  s.f_bavail = s.f_bfree;
  s.f_files = std::max<uint64_t>(out.inodes(), uint64_t{1} << 32);
  s.f_ffree = s.f_files - out.inodes();
  s.f_favail = s.f_ffree;
  s.f_namemax = kMaxNameBytes;
  fuse_reply_statfs(req, &s);
}

void FuseFs::SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value,
                      size_t size, int flags) {
  fs3rpc::XattrRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  r.set_name(name);
  r.set_value(std::string(value, size));
  uint32_t f = 0;
  if (flags & XATTR_CREATE) f |= kXattrCreate;
  if (flags & XATTR_REPLACE) f |= kXattrReplace;
  r.set_flags(f);
  fs3rpc::Empty out;
  ForgetDirAttrs(ino);
  ForgetXattrNames(ino);
  Status st = meta_->SetXattr(r, &out);
  ForgetXattrNames(ino);  // also what a getattr meanwhile brought back
  fuse_reply_err(req, FsErrno(st));
}

void FuseFs::GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  // The kernel checked the caller may read this namespace (default_permissions); absence is all
  // that is answered here. When the names expired, one GetAttr brings them (and keeps them for
  // the attribute timeout): the kernel asks for security.capability before every write, and
  // writes do not refresh attributes.
  std::optional<bool> has = HasXattr(ino, name);
  if (!has) {
    fs3rpc::InoRequest a;
    a.set_ino(ino);
    fs3rpc::Inode inode;
    if (meta_->GetAttr(a, &inode).ok()) {
      NoteXattrNames(inode);
      has = HasXattr(ino, name);
    }
  }
  if (has == false) {
    if (xattr_absent_cached_ != nullptr) xattr_absent_cached_->Increment();
    return (void)fuse_reply_err(req, ENODATA);
  }
  fs3rpc::XattrRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  r.set_name(name);
  fs3rpc::XattrReply out;
  Status st = meta_->GetXattr(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  if (size == 0) {
    fuse_reply_xattr(req, out.value().size());
  } else if (size < out.value().size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, out.value().data(), out.value().size());
  }
}

void FuseFs::ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  fs3rpc::InoRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  fs3rpc::XattrReply out;
  Status st = meta_->ListXattrs(r, &out);
  if (!st.ok()) return ReplyErr(req, st);
  std::string names;
  for (const std::string& n : out.names()) {
    names += n;
    names.push_back('\0');
  }
  if (size == 0) {
    fuse_reply_xattr(req, names.size());
  } else if (size < names.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, names.data(), names.size());
  }
}

void FuseFs::RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  fs3rpc::XattrRequest r;
  *r.mutable_cred() = Cred(req);
  r.set_ino(ino);
  r.set_name(name);
  fs3rpc::Empty out;
  ForgetXattrNames(ino);
  ForgetDirAttrs(ino);
  Status st = meta_->RemoveXattr(r, &out);
  ForgetXattrNames(ino);
  fuse_reply_err(req, FsErrno(st));
}

void FuseFs::Access(fuse_req_t req, fuse_ino_t ino, int mask) {
  fs3rpc::InoRequest r;
  r.set_ino(ino);
  fs3rpc::Inode inode;
  Status st = meta_->GetAttr(r, &inode);
  if (!st.ok()) return ReplyErr(req, st);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Caller caller{ctx->uid, ctx->gid, {}};
  if (ctx->uid != 0) caller.groups = GroupsOf(req, ctx->pid);
  const auto want = static_cast<uint32_t>(mask & (R_OK | W_OK | X_OK));
  fuse_reply_err(req, want == 0 || Permitted(caller, inode, want) ? 0 : EACCES);
}

}  // namespace ff::fs3

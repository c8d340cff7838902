// fs3-meta's store: directory entries (create, mkdir, symlink, link, unlink, rmdir, rename,
// readdir), each one transaction with POSIX's permission, sticky-bit and link-count rules.
#include <sys/stat.h>

#include <algorithm>

#include "meta_store_internal.h"

namespace ff::fs3 {

namespace {

// The sticky bit: only the entry's owner, the directory's owner or root may remove or rename it.
bool StickyDenies(const Caller& c, const Inode& dir, const Inode& victim) {
  return (dir.mode() & S_ISVTX) != 0 && !c.root() && c.uid != victim.uid() && c.uid != dir.uid();
}

}  // namespace

Result<Inode> MetaStore::MakeEntry(const Caller& c, uint64_t parent, const std::string& name,
                                   InodeType type, uint32_t mode, uint64_t request_id,
                                   uint64_t rdev, const std::string& symlink, bool open,
                                   const std::vector<uint32_t>& chain_ids, SessionId session,
                                   Dirs* dirs) {
  return Update(
      [&](Txn& t) -> Result<Inode> {
        std::vector<std::string> more;
        if (open && session.client != 0) more.push_back(ClientKey(session.client));
        FF_RETURN_IF_ERROR(t.PrefetchEntry(0, parent, name, std::move(more)));
        FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(parent));
        if (Dot(name)) return Err(StatusCode::kAlreadyExists, "'" + name + "' exists");
        FF_RETURN_IF_ERROR(CheckName(name));
        FF_ASSIGN_OR_RETURN(auto existing_entry, t.GetDentry(parent, name));
        if (existing_entry) {
          if (request_id != 0) {
            auto existing = t.GetInode(existing_entry->ino());
            if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
              return existing.status();
            }
            if (existing.ok() && existing->create_request() == request_id)
              return *existing;  // a retry
          }
          return Err(StatusCode::kAlreadyExists, "'" + name + "' exists");
        }
        if (!Permitted(c, dir, 3)) return PermissionDenied("no write permission on the directory");
        const bool is_dir = type == fs3rpc::INODE_DIR;
        const int64_t now = NowNs();
        Inode inode;
        FF_ASSIGN_OR_RETURN(uint64_t ino, t.NextIno());
        t.CountNewInode();
        inode.set_ino(ino);
        inode.set_type(type);
        uint32_t m = type == fs3rpc::INODE_SYMLINK ? 0777 : mode & 07777;
        if (is_dir && (dir.mode() & S_ISGID)) m |= S_ISGID;  // setgid directories pass it on
        inode.set_mode(m);
        inode.set_uid(c.uid);
        inode.set_gid((dir.mode() & S_ISGID) ? dir.gid() : c.gid);
        inode.set_nlink(is_dir ? 2 : 1);
        inode.set_atime_ns(now);
        inode.set_mtime_ns(now);
        inode.set_ctime_ns(now);
        inode.set_rdev(rdev);
        inode.set_create_request(request_id);
        inode.set_sessions(open && session.client == 0 ? 1 : 0);
        if (open && session.client != 0) {
          int64_t lease = 0;
          if (!kv_->serial()) {
            FF_ASSIGN_OR_RETURN(lease, t.ClientLease(session.client));
          }
          t.PutSession(ino, session, lease);
        }
        if (type == fs3rpc::INODE_SYMLINK) {
          inode.set_symlink(symlink);
          inode.set_size(symlink.size());
        } else {
          *inode.mutable_layout() = dir.layout();
          inode.mutable_layout()->clear_chains();
          if (type == fs3rpc::INODE_FILE && !chain_ids.empty()) {
            // The file's chains: `stripe` consecutive chains of the table, starting at one that
            // moves with the inode number, so files spread evenly.
            const std::size_t n = chain_ids.size();
            const std::size_t stripe = std::clamp<std::size_t>(dir.layout().stripe(), 1, n);
            for (std::size_t k = 0; k < stripe; ++k)
              inode.mutable_layout()->add_chains(chain_ids[(ino + k) % n]);
          }
        }
        inode.set_parent(parent);
        Dentry d;
        d.set_ino(ino);
        d.set_type(type);
        t.PutInode(inode);
        t.PutDentry(parent, name, d);
        if (is_dir) dir.set_nlink(dir.nlink() + 1);
        dir.set_mtime_ns(now);
        dir.set_ctime_ns(now);
        t.PutInode(dir);
        FF_RETURN_IF_ERROR(t.Commit());
        return inode;
      },
      dirs);
}

Result<Inode> MetaStore::Create(const Caller& c, uint64_t parent, const std::string& name,
                                uint32_t mode, uint64_t request_id, InodeType type, uint64_t rdev,
                                bool open, const std::vector<uint32_t>& chain_ids,
                                SessionId session, Dirs* dirs) {
  if (type == fs3rpc::INODE_DIR || type == fs3rpc::INODE_SYMLINK) {
    return InvalidArgument("use mkdir or symlink for that type");
  }
  if (open && type != fs3rpc::INODE_FILE) return InvalidArgument("only files are opened");
  return MakeEntry(c, parent, name, type, mode, request_id, rdev, "", open, chain_ids, session,
                   dirs);
}

Result<Inode> MetaStore::Mkdir(const Caller& c, uint64_t parent, const std::string& name,
                               uint32_t mode, uint64_t request_id, Dirs* dirs) {
  return MakeEntry(c, parent, name, fs3rpc::INODE_DIR, mode, request_id, 0, "", false, {}, {},
                   dirs);
}

Result<Inode> MetaStore::Symlink(const Caller& c, uint64_t parent, const std::string& name,
                                 const std::string& target, uint64_t request_id, Dirs* dirs) {
  if (target.empty()) return Err(StatusCode::kNotFound, "empty symlink target");
  if (target.size() > 4096) return Err(StatusCode::kNameTooLong, "symlink target over 4096 bytes");
  return MakeEntry(c, parent, name, fs3rpc::INODE_SYMLINK, 0777, request_id, 0, target, false, {},
                   {}, dirs);
}

Result<std::string> MetaStore::Readlink(uint64_t ino) const {
  return Run([&](Txn& t) -> Result<std::string> {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    if (inode.type() != fs3rpc::INODE_SYMLINK) return InvalidArgument("not a symbolic link");
    return inode.symlink();
  });
}

Result<Inode> MetaStore::Link(const Caller& c, uint64_t ino, uint64_t parent,
                              const std::string& name, uint64_t request_id, Dirs* dirs) {
  return Update(
      [&](Txn& t) -> Result<Inode> {
        FF_RETURN_IF_ERROR(t.PrefetchEntry(request_id, parent, name, {InodeKey(ino)}));
        FF_ASSIGN_OR_RETURN(bool done, t.Done(request_id));
        if (done) return t.GetInode(ino);
        FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
        if (inode.type() == fs3rpc::INODE_DIR) {
          return Err(StatusCode::kNotPermitted, "hard links to directories are not allowed");
        }
        if (inode.nlink() == 0) return Err(StatusCode::kNotFound, "the file was unlinked");
        FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(parent));
        if (Dot(name)) return Err(StatusCode::kAlreadyExists, "'" + name + "' exists");
        FF_RETURN_IF_ERROR(CheckName(name));
        FF_ASSIGN_OR_RETURN(auto taken, t.GetDentry(parent, name));
        if (taken) return Err(StatusCode::kAlreadyExists, "'" + name + "' exists");
        if (!Permitted(c, dir, 3)) return PermissionDenied("no write permission on the directory");
        const int64_t now = NowNs();
        inode.set_nlink(inode.nlink() + 1);
        inode.set_ctime_ns(now);
        t.PutInode(inode);
        Dentry d;
        d.set_ino(ino);
        d.set_type(inode.type());
        t.PutDentry(parent, name, d);
        dir.set_mtime_ns(now);
        dir.set_ctime_ns(now);
        t.PutInode(dir);
        t.MarkDone(request_id);
        FF_RETURN_IF_ERROR(t.Commit());
        return inode;
      },
      dirs);
}

Status MetaStore::DropLink(Txn& t, Inode inode, int64_t now) {
  if (inode.type() == fs3rpc::INODE_DIR) {
    t.DeleteInode(inode.ino());
    return Status::Ok();
  }
  inode.set_nlink(inode.nlink() - 1);
  inode.set_ctime_ns(now);
  if (inode.nlink() > 0) {
    t.PutInode(inode);  // still linked: it lives on
    return Status::Ok();
  }
  // (A file removed is seldom open: assumed not, checked at commit.)
  FF_ASSIGN_OR_RETURN(bool open, t.IsOpen(inode, /*likely_not=*/true));
  if (open) {  // it lives until its last session ends (a close, or its client's lease)
    t.PutInode(inode);
    t.MarkOrphan(inode.ino());
    return Status::Ok();
  }
  t.DeleteInode(inode.ino());
  if (inode.type() == fs3rpc::INODE_FILE) t.AddGarbage(inode.ino(), inode.layout());
  return Status::Ok();
}

Status MetaStore::Unlink(const Caller& c, uint64_t parent, const std::string& name,
                         uint64_t request_id, Dirs* dirs) {
  return Update(
      [&](Txn& t) -> Status {
        FF_RETURN_IF_ERROR(t.PrefetchEntry(request_id, parent, name));
        FF_ASSIGN_OR_RETURN(bool done, t.Done(request_id));
        if (done) return Status::Ok();
        FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(parent));
        if (Dot(name)) return Err(StatusCode::kIsADirectory, "'" + name + "' is a directory");
        FF_RETURN_IF_ERROR(CheckName(name));
        FF_ASSIGN_OR_RETURN(auto d, t.GetDentry(parent, name));
        if (!d) return Err(StatusCode::kNotFound, "no entry '" + name + "'");
        FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(d->ino()));
        if (inode.type() == fs3rpc::INODE_DIR) {
          return Err(StatusCode::kIsADirectory, "'" + name + "' is a directory");
        }
        if (!Permitted(c, dir, 3)) return PermissionDenied("no write permission on the directory");
        if (StickyDenies(c, dir, inode)) {
          return Err(StatusCode::kNotPermitted,
                     "sticky directory: not the owner of '" + name + "'");
        }
        const int64_t now = NowNs();
        t.DeleteDentry(parent, name);
        FF_RETURN_IF_ERROR(DropLink(t, inode, now));
        dir.set_mtime_ns(now);
        dir.set_ctime_ns(now);
        t.PutInode(dir);
        t.MarkDone(request_id);
        return t.Commit();
      },
      dirs);
}

Status MetaStore::Rmdir(const Caller& c, uint64_t parent, const std::string& name,
                        uint64_t request_id, Dirs* dirs) {
  return Update(
      [&](Txn& t) -> Status {
        FF_RETURN_IF_ERROR(t.PrefetchEntry(request_id, parent, name));
        FF_ASSIGN_OR_RETURN(bool done, t.Done(request_id));
        if (done) return Status::Ok();
        FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(parent));
        if (name == ".") return InvalidArgument("cannot remove '.'");
        if (name == "..") return Err(StatusCode::kNotEmpty, "cannot remove '..'");
        FF_RETURN_IF_ERROR(CheckName(name));
        FF_ASSIGN_OR_RETURN(auto d, t.GetDentry(parent, name));
        if (!d) return Err(StatusCode::kNotFound, "no entry '" + name + "'");
        FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(d->ino()));
        if (inode.type() != fs3rpc::INODE_DIR) {
          return Err(StatusCode::kNotADirectory, "'" + name + "' is not a directory");
        }
        if (!Permitted(c, dir, 3)) return PermissionDenied("no write permission on the directory");
        if (StickyDenies(c, dir, inode)) {
          return Err(StatusCode::kNotPermitted,
                     "sticky directory: not the owner of '" + name + "'");
        }
        FF_ASSIGN_OR_RETURN(bool empty, t.DirEmpty(inode.ino()));
        if (!empty) return Err(StatusCode::kNotEmpty, "'" + name + "' is not empty");
        const int64_t now = NowNs();
        t.DeleteDentry(parent, name);
        t.DeleteInode(inode.ino());
        dir.set_nlink(dir.nlink() - 1);
        dir.set_mtime_ns(now);
        dir.set_ctime_ns(now);
        t.PutInode(dir);
        t.MarkDone(request_id);
        return t.Commit();
      },
      dirs);
}

Status MetaStore::Rename(const Caller& c, uint64_t src_parent, const std::string& src_name,
                         uint64_t dst_parent, const std::string& dst_name, uint32_t flags,
                         uint64_t request_id, Dirs* dirs) {
  if ((flags & kRenameNoReplace) && (flags & kRenameExchange)) {
    return InvalidArgument("RENAME_NOREPLACE and RENAME_EXCHANGE together");
  }
  if (Dot(src_name) || Dot(dst_name)) return Err(StatusCode::kBusy, "cannot rename '.' or '..'");
  FF_RETURN_IF_ERROR(CheckName(src_name));
  FF_RETURN_IF_ERROR(CheckName(dst_name));
  return Update(
      [&](Txn& t) -> Status {
        FF_RETURN_IF_ERROR(
            t.PrefetchEntry(request_id, src_parent, src_name,
                            {InodeKey(dst_parent), DentryKey(dst_parent, dst_name)}));
        FF_ASSIGN_OR_RETURN(bool done, t.Done(request_id));
        if (done) return Status::Ok();
        FF_ASSIGN_OR_RETURN(Inode sdir, t.GetDir(src_parent));
        FF_ASSIGN_OR_RETURN(Inode ddir, t.GetDir(dst_parent));
        FF_ASSIGN_OR_RETURN(auto sd, t.GetDentry(src_parent, src_name));
        if (!sd) return Err(StatusCode::kNotFound, "no entry '" + src_name + "'");
        FF_ASSIGN_OR_RETURN(Inode src, t.GetInode(sd->ino()));
        if (!Permitted(c, sdir, 3) || !Permitted(c, ddir, 3)) {
          return PermissionDenied("no write permission on a directory");
        }
        if (StickyDenies(c, sdir, src)) {
          return Err(StatusCode::kNotPermitted,
                     "sticky directory: not the owner of '" + src_name + "'");
        }
        FF_ASSIGN_OR_RETURN(auto dd, t.GetDentry(dst_parent, dst_name));
        if (src_parent == dst_parent && src_name == dst_name) return Status::Ok();
        if ((flags & kRenameNoReplace) && dd) {
          return Err(StatusCode::kAlreadyExists, "'" + dst_name + "' exists");
        }
        if ((flags & kRenameExchange) && !dd) {
          return Err(StatusCode::kNotFound, "no entry '" + dst_name + "' to exchange with");
        }
        // No directory may move under itself.
        auto under = [&](uint64_t dir_ino, uint64_t ancestor) -> Result<bool> {
          for (uint64_t at = dir_ino;;) {
            if (at == ancestor) return true;
            if (at == kRootIno) return false;
            FF_ASSIGN_OR_RETURN(Inode i, t.GetInode(at));
            at = i.parent();
          }
        };
        if (src.type() == fs3rpc::INODE_DIR && src_parent != dst_parent) {
          FF_ASSIGN_OR_RETURN(bool loop, under(dst_parent, src.ino()));
          if (loop) return InvalidArgument("cannot move a directory under itself");
        }
        const int64_t now = NowNs();
        // A directory that changes parent moves a link count with it.
        auto reparent = [&](Inode& dir_inode, Inode& from, Inode& to) {
          if (dir_inode.type() != fs3rpc::INODE_DIR || from.ino() == to.ino()) return;
          from.set_nlink(from.nlink() - 1);
          to.set_nlink(to.nlink() + 1);
          dir_inode.set_parent(to.ino());
        };
        Inode* dparent = src_parent == dst_parent ? &sdir : &ddir;
        if (dd) {
          FF_ASSIGN_OR_RETURN(Inode dst, t.GetInode(dd->ino()));
          if (flags & kRenameExchange) {
            if (dst.type() == fs3rpc::INODE_DIR && src_parent != dst_parent) {
              FF_ASSIGN_OR_RETURN(bool loop, under(src_parent, dst.ino()));
              if (loop) return InvalidArgument("cannot move a directory under itself");
            }
            if (StickyDenies(c, ddir, dst)) {
              return Err(StatusCode::kNotPermitted,
                         "sticky directory: not the owner of '" + dst_name + "'");
            }
            t.PutDentry(src_parent, src_name, *dd);
            t.PutDentry(dst_parent, dst_name, *sd);
            reparent(src, sdir, *dparent);
            reparent(dst, *dparent, sdir);
            src.set_ctime_ns(now);
            dst.set_ctime_ns(now);
            t.PutInode(src);
            t.PutInode(dst);
          } else {
            if (dst.ino() == src.ino())
              return Status::Ok();  // two links to one inode: nothing to do
            if (StickyDenies(c, ddir, dst)) {
              return Err(StatusCode::kNotPermitted,
                         "sticky directory: not the owner of '" + dst_name + "'");
            }
            if (src.type() == fs3rpc::INODE_DIR) {
              if (dst.type() != fs3rpc::INODE_DIR) {
                return Err(StatusCode::kNotADirectory, "'" + dst_name + "' is not a directory");
              }
              FF_ASSIGN_OR_RETURN(bool empty, t.DirEmpty(dst.ino()));
              if (!empty) return Err(StatusCode::kNotEmpty, "'" + dst_name + "' is not empty");
              dparent->set_nlink(dparent->nlink() - 1);  // the replaced directory's ".."
            } else if (dst.type() == fs3rpc::INODE_DIR) {
              return Err(StatusCode::kIsADirectory, "'" + dst_name + "' is a directory");
            }
            FF_RETURN_IF_ERROR(DropLink(t, dst, now));
            t.DeleteDentry(src_parent, src_name);
            t.PutDentry(dst_parent, dst_name, *sd);
            reparent(src, sdir, *dparent);
            src.set_ctime_ns(now);
            t.PutInode(src);
          }
        } else {
          t.DeleteDentry(src_parent, src_name);
          t.PutDentry(dst_parent, dst_name, *sd);
          reparent(src, sdir, *dparent);
          src.set_ctime_ns(now);
          t.PutInode(src);
        }
        sdir.set_mtime_ns(now);
        sdir.set_ctime_ns(now);
        t.PutInode(sdir);
        if (src_parent != dst_parent) {
          ddir.set_mtime_ns(now);
          ddir.set_ctime_ns(now);
          t.PutInode(ddir);
        }
        t.MarkDone(request_id);
        return t.Commit();
      },
      dirs);
}

Result<std::vector<DirEntry>> MetaStore::Readdir(const Caller& c, uint64_t ino,
                                                 const std::string& cursor,
                                                 std::size_t limit) const {
  return Run([&](Txn& t) -> Result<std::vector<DirEntry>> {
    FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(ino));
    if (!Permitted(c, dir, 4)) return PermissionDenied("no read permission on the directory");
    const std::string prefix = DirPrefix(ino);
    FF_ASSIGN_OR_RETURN(auto rows, t.Scan(prefix, cursor.empty() ? "" : prefix + cursor, limit));
    std::vector<DirEntry> out;
    for (const auto& [key, bytes] : rows) {
      Dentry d;
      if (!d.ParseFromString(bytes)) return DataLoss("corrupt directory entry");
      out.push_back({key.substr(prefix.size()), d.ino(), d.type()});
    }
    return out;
  });
}

}  // namespace ff::fs3

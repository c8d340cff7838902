// fs3-meta's store: attributes (setattr with POSIX's ownership rules), layouts and extended
// attributes.
#include <sys/stat.h>

#include <algorithm>

#include "meta_store_internal.h"

namespace ff::fs3 {

Result<Inode> MetaStore::SetStripe(const Caller& c, uint64_t ino, uint32_t stripe) {
  return Update([&](Txn& t) -> Result<Inode> {
    FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(ino));
    if (!c.root() && c.uid != dir.uid()) {
      return Err(StatusCode::kNotPermitted, "only the owner may change a directory's layout");
    }
    if (stripe == 0) return InvalidArgument("a stripe is at least one chain");
    dir.mutable_layout()->set_stripe(stripe);
    dir.set_ctime_ns(NowNs());
    t.PutInode(dir);
    FF_RETURN_IF_ERROR(t.Commit());
    return dir;
  });
}

Result<Inode> MetaStore::SetAttributes(const Caller& c, uint64_t ino, const SetAttr& a) {
  return Update([&](Txn& t) -> Result<Inode> {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    const bool owner = c.root() || c.uid == inode.uid();
    auto in_group = [&](uint32_t gid) {
      return c.gid == gid || std::find(c.groups.begin(), c.groups.end(), gid) != c.groups.end();
    };
    const int64_t now = NowNs();
    if (a.size) {
      if (inode.type() == fs3rpc::INODE_DIR)
        return Err(StatusCode::kIsADirectory, "a directory has no size to set");
      if (inode.type() != fs3rpc::INODE_FILE)
        return InvalidArgument("only regular files have a size to set");
      if (!a.through_writable_handle && !Permitted(c, inode, 2)) {
        return PermissionDenied("no write permission");
      }
    }
    // Anyone who may write the file may drop its set-user-ID and set-group-ID bits: the kernel asks
    // for exactly that before a write, truncate or chown by someone other than the owner (Linux's
    // ATTR_KILL_SUID / ATTR_KILL_SGID). Any other change of mode is the owner's.
    const auto kill_priv = static_cast<uint32_t>(S_ISUID | S_ISGID);
    const uint32_t was = inode.mode() & 07777;
    const bool only_drops_priv = a.mode && (*a.mode & 07777 & ~kill_priv) == (was & ~kill_priv) &&
                                 (*a.mode & kill_priv & ~was) == 0 &&
                                 (a.through_writable_handle || Permitted(c, inode, 2));
    if (a.mode && !owner && !only_drops_priv) {
      return Err(StatusCode::kNotPermitted, "only the owner may change the mode");
    }
    if (a.uid && *a.uid != inode.uid() && !c.root()) {
      return Err(StatusCode::kNotPermitted, "only root may change the owner");
    }
    if (a.gid && *a.gid != inode.gid() && !c.root() &&
        !(c.uid == inode.uid() && in_group(*a.gid))) {
      return Err(StatusCode::kNotPermitted,
                 "only root, or the owner to one of their groups, may change the group");
    }
    if ((a.atime_ns || a.mtime_ns) && !owner) {
      return Err(StatusCode::kNotPermitted, "only the owner may set explicit times");
    }
    if ((a.atime_now || a.mtime_now) && !owner && !Permitted(c, inode, 2)) {
      return PermissionDenied("no write permission");
    }
    if (a.mode) {
      uint32_t m = *a.mode & 07777;
      // chmod by the owner outside the file's group cannot set set-group-ID (a non-owner only
      // drops what the kernel asked to drop).
      if (owner && !c.root() && !in_group(inode.gid())) m &= ~static_cast<uint32_t>(S_ISGID);
      inode.set_mode(m);
    }
    if (a.uid || a.gid) {
      if (a.uid) inode.set_uid(*a.uid);
      if (a.gid) inode.set_gid(*a.gid);
      if (inode.type() != fs3rpc::INODE_DIR) {
        inode.set_mode(inode.mode() & ~static_cast<uint32_t>(S_ISUID | S_ISGID));
      }
    }
    if (a.size) {
      inode.set_size(*a.size);
      inode.set_mtime_ns(now);
    }
    if (a.atime_ns) inode.set_atime_ns(*a.atime_ns);
    if (a.mtime_ns) inode.set_mtime_ns(*a.mtime_ns);
    if (a.atime_now) inode.set_atime_ns(now);
    if (a.mtime_now) inode.set_mtime_ns(now);
    inode.set_ctime_ns(now);
    t.PutInode(inode);
    FF_RETURN_IF_ERROR(t.Commit());
    return inode;
  });
}

namespace {

// Who may touch an extended attribute: "trusted." is root's; "user." follows the file's
// read / write permission (and only on files and directories).
Status XattrAccess(const Caller& c, const Inode& inode, const std::string& name, bool write) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return Err(name.empty() ? StatusCode::kInvalidArgument : StatusCode::kNameTooLong,
               "bad attribute name");
  }
  const bool known = name.rfind("user.", 0) == 0 || name.rfind("trusted.", 0) == 0 ||
                     name.rfind("security.", 0) == 0 || name.rfind("system.", 0) == 0;
  if (!known)
    return Err(StatusCode::kNotSupported, "unknown attribute namespace in '" + name + "'");
  if (name.rfind("trusted.", 0) == 0 && !c.root()) {
    return Err(StatusCode::kNotPermitted, "trusted.* attributes are root's");
  }
  if (name.rfind("user.", 0) == 0) {
    if (inode.type() != fs3rpc::INODE_FILE && inode.type() != fs3rpc::INODE_DIR) {
      return Err(StatusCode::kNotPermitted, "user.* attributes live on files and directories");
    }
    if (!Permitted(c, inode, write ? 2 : 4)) return PermissionDenied("no permission");
  }
  if (write && (name.rfind("security.", 0) == 0 || name.rfind("system.", 0) == 0) && !c.root() &&
      c.uid != inode.uid()) {
    return Err(StatusCode::kNotPermitted, "not the owner");
  }
  return Status::Ok();
}

}  // namespace

Status MetaStore::SetXattr(const Caller& c, uint64_t ino, const std::string& name,
                           const std::string& value, uint32_t flags) {
  if (value.size() > kMaxXattrValueBytes) {
    return Err(StatusCode::kOutOfRange, "attribute values are at most 64 KiB");
  }
  return Update([&](Txn& t) -> Status {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    FF_RETURN_IF_ERROR(XattrAccess(c, inode, name, /*write=*/true));
    const bool exists = inode.xattrs().count(name) > 0;
    if ((flags & kXattrCreate) && exists) return Err(StatusCode::kAlreadyExists, name + " exists");
    if ((flags & kXattrReplace) && !exists) return Err(StatusCode::kNoAttribute, "no " + name);
    (*inode.mutable_xattrs())[name] = value;
    inode.set_ctime_ns(NowNs());
    t.PutInode(inode);
    return t.Commit();
  });
}

Result<std::string> MetaStore::GetXattr(const Caller& c, uint64_t ino,
                                        const std::string& name) const {
  return Run([&](Txn& t) -> Result<std::string> {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    FF_RETURN_IF_ERROR(XattrAccess(c, inode, name, /*write=*/false));
    auto it = inode.xattrs().find(name);
    if (it == inode.xattrs().end()) return Err(StatusCode::kNoAttribute, "no " + name);
    return it->second;
  });
}

Result<std::vector<std::string>> MetaStore::ListXattrs(const Caller& c, uint64_t ino) const {
  return Run([&](Txn& t) -> Result<std::vector<std::string>> {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    std::vector<std::string> names;
    for (const auto& [name, value] : inode.xattrs()) {
      if (name.rfind("trusted.", 0) == 0 && !c.root()) continue;  // hidden from others
      names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
  });
}

Status MetaStore::RemoveXattr(const Caller& c, uint64_t ino, const std::string& name) {
  return Update([&](Txn& t) -> Status {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    FF_RETURN_IF_ERROR(XattrAccess(c, inode, name, /*write=*/true));
    if (inode.mutable_xattrs()->erase(name) == 0)
      return Err(StatusCode::kNoAttribute, "no " + name);
    inode.set_ctime_ns(NowNs());
    t.PutInode(inode);
    return t.Commit();
  });
}

}  // namespace ff::fs3

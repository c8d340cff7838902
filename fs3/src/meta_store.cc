#include "fs3/meta_store.h"

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <map>

namespace ff::fs3 {
namespace {

using fs3rpc::Dentry;
using fs3rpc::Inode;
using fs3rpc::InodeType;

std::string BE8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  return s;
}

std::string InodeKey(uint64_t ino) {
  return "i/" + BE8(ino);
}
std::string DirPrefix(uint64_t parent) {
  return "d/" + BE8(parent);
}
std::string DentryKey(uint64_t parent, const std::string& name) {
  return DirPrefix(parent) + name;
}
std::string GarbageKey(uint64_t ino) {
  return "g/" + BE8(ino);
}

std::string RequestKey(uint64_t id) {
  return "r/" + BE8(id);
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

Status Err(StatusCode code, std::string m) {
  return Status(code, std::move(m));
}

// ENOENT for an empty name, EINVAL for '/', ENAMETOOLONG past 255 bytes; "." and ".." are the
// caller's to treat.
Status CheckName(const std::string& name) {
  if (name.empty()) return Err(StatusCode::kNotFound, "empty name");
  if (name.size() > kMaxNameBytes) {
    return Err(StatusCode::kNameTooLong, "name longer than " + std::to_string(kMaxNameBytes));
  }
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return InvalidArgument("a name may not contain '/' or NUL");
  }
  return Status::Ok();
}

bool Dot(const std::string& name) {
  return name == "." || name == "..";
}

}  // namespace

// Reads see the operation's own writes; Commit applies them in one synced batch.
class MetaStore::Txn {
 public:
  Txn(ProtoDb& db, std::atomic<uint64_t>* needed) : db_(db), needed_(needed) {}

  Result<Inode> GetInode(uint64_t ino) {
    const std::string key = InodeKey(ino);
    if (auto it = inodes_.find(key); it != inodes_.end()) {
      if (!it->second) return Err(StatusCode::kNotFound, "no inode " + std::to_string(ino));
      return *it->second;
    }
    Inode inode;
    Status st = db_.Get(key, &inode);
    if (st.code() == StatusCode::kNotFound) {
      return Err(StatusCode::kNotFound, "no inode " + std::to_string(ino));
    }
    FF_RETURN_IF_ERROR(st);
    return inode;
  }
  Result<Inode> GetDir(uint64_t ino) {
    FF_ASSIGN_OR_RETURN(Inode inode, GetInode(ino));
    if (inode.type() != fs3rpc::INODE_DIR) {
      return Err(StatusCode::kNotADirectory,
                 "inode " + std::to_string(ino) + " is not a directory");
    }
    return inode;
  }
  // No entry is an empty optional; a failed read (I/O error, a corrupt record) is an error, never
  // taken for a missing entry.
  Result<std::optional<Dentry>> GetDentry(uint64_t parent, const std::string& name) {
    const std::string key = DentryKey(parent, name);
    if (auto it = dentries_.find(key); it != dentries_.end()) return it->second;
    Dentry d;
    Status st = db_.Get(key, &d);
    if (st.code() == StatusCode::kNotFound) return std::optional<Dentry>();
    FF_RETURN_IF_ERROR(st);
    return std::optional<Dentry>(std::move(d));
  }
  Result<bool> DirEmpty(uint64_t ino) {
    for (const auto& [key, d] : dentries_) {
      if (key.rfind(DirPrefix(ino), 0) == 0 && d) return false;
    }
    FF_ASSIGN_OR_RETURN(auto rows, db_.ScanKeys(DirPrefix(ino), "", 64));
    for (const auto& [key, bytes] : rows) {
      auto it = dentries_.find(key);
      if (it == dentries_.end() || it->second) return false;  // not deleted in this operation
    }
    return true;
  }
  void PutInode(const Inode& inode) { inodes_[InodeKey(inode.ino())] = inode; }
  void DeleteInode(uint64_t ino) {
    inodes_[InodeKey(ino)] = std::nullopt;
    --inode_delta_;
  }
  void CountNewInode() { ++inode_delta_; }
  void SetInodeCount(uint64_t n) { inode_count_ = n; }
  void PutDentry(uint64_t parent, const std::string& name, const Dentry& d) {
    dentries_[DentryKey(parent, name)] = d;
  }
  void DeleteDentry(uint64_t parent, const std::string& name) {
    dentries_[DentryKey(parent, name)] = std::nullopt;
  }
  // A file's data to delete; its layout says where the chunks are (empty: every chain).
  void AddGarbage(uint64_t ino, const fs3rpc::Layout& layout = {}) {
    garbage_.emplace_back(ino, layout);
  }
  // Durable request ids: a mutating request already applied is answered, not applied again.
  Result<bool> Done(uint64_t request_id) {
    if (request_id == 0) return false;
    fs3rpc::Counter c;
    Status st = db_.Get(RequestKey(request_id), &c);
    if (st.code() == StatusCode::kNotFound) return false;
    FF_RETURN_IF_ERROR(st);
    return true;
  }
  void MarkDone(uint64_t request_id) { done_ = request_id; }
  Result<uint64_t> NextIno() {
    if (!counter_) {
      fs3rpc::Counter c;
      Status st = db_.Get("m/next_ino", &c);
      if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
      counter_ = std::max<uint64_t>(c.value(), kRootIno + 1);
    }
    return (*counter_)++;
  }

  // Applies and logs the batch; `durable`: MetaStore::AwaitDurable waits for it.
  Status Commit(bool durable = true) {
    std::vector<std::pair<std::string, const google::protobuf::Message*>> kvs;
    for (const auto& [key, inode] : inodes_)
      kvs.emplace_back(key, inode ? &*inode : nullptr);
    for (const auto& [key, d] : dentries_)
      kvs.emplace_back(key, d ? &*d : nullptr);
    fs3rpc::Counter next;
    if (counter_) {
      next.set_value(*counter_);
      kvs.emplace_back("m/next_ino", &next);
    }
    fs3rpc::Counter count;
    if (inode_delta_ != 0 || inode_count_) {
      if (inode_count_) {
        count.set_value(*inode_count_);
      } else {
        Status st = db_.Get("m/inodes", &count);
        if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
        count.set_value(static_cast<uint64_t>(
            std::max<int64_t>(0, static_cast<int64_t>(count.value()) + inode_delta_)));
      }
      kvs.emplace_back("m/inodes", &count);
    }
    fs3rpc::Counter when;
    if (done_ != 0) {
      when.set_value(static_cast<uint64_t>(NowNs() / 1000000000));
      kvs.emplace_back(RequestKey(done_), &when);
    }
    for (const auto& [ino, layout] : garbage_)
      kvs.emplace_back(GarbageKey(ino), &layout);
    FF_ASSIGN_OR_RETURN(uint64_t seq, db_.PutBatchLogged(kvs));
    if (durable && !kvs.empty()) needed_->store(std::max(needed_->load(), seq));
    return Status::Ok();
  }

 private:
  ProtoDb& db_;
  std::atomic<uint64_t>* needed_;
  std::map<std::string, std::optional<Inode>> inodes_;
  std::map<std::string, std::optional<Dentry>> dentries_;
  std::vector<std::pair<uint64_t, fs3rpc::Layout>> garbage_;
  std::optional<uint64_t> counter_;
  uint64_t done_ = 0;
  int64_t inode_delta_ = 0;              // inodes made minus inodes deleted
  std::optional<uint64_t> inode_count_;  // set outright (fsck)
};

Result<std::unique_ptr<MetaStore>> MetaStore::Open(const std::string& path,
                                                   const fs3rpc::Layout& default_layout) {
  FF_ASSIGN_OR_RETURN(auto db, ProtoDb::Open(path));
  std::unique_ptr<MetaStore> m(new MetaStore(std::move(db)));
  Inode root;
  Status st = m->db_->Get(InodeKey(kRootIno), &root);
  if (st.code() == StatusCode::kNotFound) {
    root.set_ino(kRootIno);
    root.set_type(fs3rpc::INODE_DIR);
    root.set_mode(0755);
    root.set_nlink(2);
    root.set_parent(kRootIno);
    const int64_t now = NowNs();
    root.set_atime_ns(now);
    root.set_mtime_ns(now);
    root.set_ctime_ns(now);
    *root.mutable_layout() = default_layout;
    fs3rpc::Counter one;
    one.set_value(1);
    FF_RETURN_IF_ERROR(m->db_->PutBatch({{InodeKey(kRootIno), &root}, {"m/inodes", &one}}));
  } else if (!st.ok()) {
    return st;
  }
  return m;
}

Result<Inode> MetaStore::GetAttr(uint64_t ino) const {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  return t.GetInode(ino);
}

Result<Inode> MetaStore::Lookup(const Caller& c, uint64_t parent, const std::string& name) const {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(parent));
  if (!Permitted(c, dir, 1)) return PermissionDenied("no search permission on the directory");
  if (name == ".") return dir;
  if (name == "..") return t.GetInode(dir.parent());
  FF_RETURN_IF_ERROR(CheckName(name));
  FF_ASSIGN_OR_RETURN(auto d, t.GetDentry(parent, name));
  if (!d) return Err(StatusCode::kNotFound, "no entry '" + name + "'");
  return t.GetInode(d->ino());
}

namespace {

// The sticky bit: only the entry's owner, the directory's owner or root may remove or rename it.
bool StickyDenies(const Caller& c, const Inode& dir, const Inode& victim) {
  return (dir.mode() & S_ISVTX) != 0 && !c.root() && c.uid != victim.uid() && c.uid != dir.uid();
}

}  // namespace

Result<Inode> MetaStore::MakeEntry(const Caller& c, uint64_t parent, const std::string& name,
                                   InodeType type, uint32_t mode, uint64_t request_id,
                                   uint64_t rdev, const std::string& symlink, bool open,
                                   const std::vector<uint32_t>& chain_ids) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
      if (existing.ok() && existing->create_request() == request_id) return *existing;  // a retry
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
  inode.set_sessions(open ? 1 : 0);
  if (type == fs3rpc::INODE_SYMLINK) {
    inode.set_symlink(symlink);
    inode.set_size(symlink.size());
  } else {
    *inode.mutable_layout() = dir.layout();
    inode.mutable_layout()->clear_chains();
    if (type == fs3rpc::INODE_FILE && !chain_ids.empty()) {
      // The file's chains: `stripe` consecutive chains of the table, starting at one that moves
      // with the inode number, so files spread evenly.
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
}

Result<Inode> MetaStore::Create(const Caller& c, uint64_t parent, const std::string& name,
                                uint32_t mode, uint64_t request_id, InodeType type, uint64_t rdev,
                                bool open, const std::vector<uint32_t>& chain_ids) {
  if (type == fs3rpc::INODE_DIR || type == fs3rpc::INODE_SYMLINK) {
    return InvalidArgument("use mkdir or symlink for that type");
  }
  if (open && type != fs3rpc::INODE_FILE) return InvalidArgument("only files are opened");
  return MakeEntry(c, parent, name, type, mode, request_id, rdev, "", open, chain_ids);
}

Result<Inode> MetaStore::Mkdir(const Caller& c, uint64_t parent, const std::string& name,
                               uint32_t mode, uint64_t request_id) {
  return MakeEntry(c, parent, name, fs3rpc::INODE_DIR, mode, request_id, 0, "", false, {});
}

Result<Inode> MetaStore::Symlink(const Caller& c, uint64_t parent, const std::string& name,
                                 const std::string& target, uint64_t request_id) {
  if (target.empty()) return Err(StatusCode::kNotFound, "empty symlink target");
  if (target.size() > 4096) return Err(StatusCode::kNameTooLong, "symlink target over 4096 bytes");
  return MakeEntry(c, parent, name, fs3rpc::INODE_SYMLINK, 0777, request_id, 0, target, false, {});
}

Result<std::string> MetaStore::Readlink(uint64_t ino) const {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  if (inode.type() != fs3rpc::INODE_SYMLINK) return InvalidArgument("not a symbolic link");
  return inode.symlink();
}

Result<Inode> MetaStore::Link(const Caller& c, uint64_t ino, uint64_t parent,
                              const std::string& name, uint64_t request_id) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
}

void MetaStore::DropLink(Txn& t, Inode inode, int64_t now) {
  if (inode.type() == fs3rpc::INODE_DIR) {
    t.DeleteInode(inode.ino());
    return;
  }
  inode.set_nlink(inode.nlink() - 1);
  inode.set_ctime_ns(now);
  if (inode.nlink() > 0 || inode.sessions() > 0) {
    t.PutInode(inode);  // still linked, or open: it lives on
    return;
  }
  t.DeleteInode(inode.ino());
  if (inode.type() == fs3rpc::INODE_FILE) t.AddGarbage(inode.ino(), inode.layout());
}

Status MetaStore::Unlink(const Caller& c, uint64_t parent, const std::string& name,
                         uint64_t request_id) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
    return Err(StatusCode::kNotPermitted, "sticky directory: not the owner of '" + name + "'");
  }
  const int64_t now = NowNs();
  t.DeleteDentry(parent, name);
  DropLink(t, inode, now);
  dir.set_mtime_ns(now);
  dir.set_ctime_ns(now);
  t.PutInode(dir);
  t.MarkDone(request_id);
  return t.Commit();
}

Status MetaStore::Rmdir(const Caller& c, uint64_t parent, const std::string& name,
                        uint64_t request_id) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
    return Err(StatusCode::kNotPermitted, "sticky directory: not the owner of '" + name + "'");
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
}

Status MetaStore::Rename(const Caller& c, uint64_t src_parent, const std::string& src_name,
                         uint64_t dst_parent, const std::string& dst_name, uint32_t flags,
                         uint64_t request_id) {
  if ((flags & kRenameNoReplace) && (flags & kRenameExchange)) {
    return InvalidArgument("RENAME_NOREPLACE and RENAME_EXCHANGE together");
  }
  if (Dot(src_name) || Dot(dst_name)) return Err(StatusCode::kBusy, "cannot rename '.' or '..'");
  FF_RETURN_IF_ERROR(CheckName(src_name));
  FF_RETURN_IF_ERROR(CheckName(dst_name));
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
    return Err(StatusCode::kNotPermitted, "sticky directory: not the owner of '" + src_name + "'");
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
      if (dst.ino() == src.ino()) return Status::Ok();  // two links to one inode: nothing to do
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
      DropLink(t, dst, now);
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
}

Result<std::vector<DirEntry>> MetaStore::Readdir(const Caller& c, uint64_t ino,
                                                 const std::string& cursor,
                                                 std::size_t limit) const {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(ino));
  if (!Permitted(c, dir, 4)) return PermissionDenied("no read permission on the directory");
  const std::string prefix = DirPrefix(ino);
  FF_ASSIGN_OR_RETURN(auto rows,
                      db_->ScanKeys(prefix, cursor.empty() ? "" : prefix + cursor, limit));
  std::vector<DirEntry> out;
  for (const auto& [key, bytes] : rows) {
    Dentry d;
    if (!d.ParseFromString(bytes)) return DataLoss("corrupt directory entry");
    out.push_back({key.substr(prefix.size()), d.ino(), d.type()});
  }
  return out;
}

Status MetaStore::OpenSession(uint64_t ino) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  inode.set_sessions(inode.sessions() + 1);
  t.PutInode(inode);
  return t.Commit();
}

Status MetaStore::CloseSession(uint64_t ino, std::optional<uint64_t> size) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  if (inode.sessions() == 0)
    return FailedPrecondition("inode " + std::to_string(ino) + " is not open");
  inode.set_sessions(inode.sessions() - 1);
  const bool grows = size && *size > inode.size();
  if (grows) {
    inode.set_size(*size);
    inode.set_mtime_ns(NowNs());
    inode.set_ctime_ns(inode.mtime_ns());
  }
  if (inode.sessions() == 0 && inode.nlink() == 0) {
    t.DeleteInode(ino);  // unlinked while open: its data goes now
    if (inode.type() == fs3rpc::INODE_FILE) t.AddGarbage(ino, inode.layout());
    return t.Commit();
  }
  t.PutInode(inode);
  return t.Commit(/*durable=*/grows);
}

Result<Inode> MetaStore::SettleLength(uint64_t ino, uint64_t length, bool written) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  if (inode.type() != fs3rpc::INODE_FILE) return inode;
  if (length > inode.size() || written) {
    inode.set_size(std::max(length, inode.size()));
    if (written) {  // data changed: mtime and ctime move (POSIX: on write)
      inode.set_mtime_ns(NowNs());
      inode.set_ctime_ns(inode.mtime_ns());
    }
    t.PutInode(inode);
    FF_RETURN_IF_ERROR(t.Commit());
  }
  return inode;
}

Result<uint64_t> MetaStore::InodeCount() const {
  std::lock_guard lock(mu_);
  fs3rpc::Counter c;
  Status st = db_->Get("m/inodes", &c);
  if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
  return c.value();
}

Result<std::vector<uint64_t>> MetaStore::Garbage() const {
  std::lock_guard lock(mu_);
  FF_ASSIGN_OR_RETURN(auto rows, db_->ScanKeys("g/", "", SIZE_MAX));
  std::vector<uint64_t> out;
  for (const auto& [key, bytes] : rows) {
    uint64_t ino = 0;
    for (std::size_t i = 2; i < 10 && i < key.size(); ++i)
      ino = (ino << 8) | static_cast<unsigned char>(key[i]);
    out.push_back(ino);
  }
  return out;
}

Result<std::size_t> MetaStore::PruneRequests(uint64_t max_age_s) {
  std::lock_guard lock(mu_);
  const auto now_s = static_cast<uint64_t>(NowNs() / 1000000000);
  FF_ASSIGN_OR_RETURN(auto rows, db_->ScanKeys("r/", "", SIZE_MAX));
  std::vector<std::pair<std::string, const google::protobuf::Message*>> old;
  for (const auto& [key, bytes] : rows) {
    fs3rpc::Counter when;
    if (!when.ParseFromString(bytes) || when.value() + max_age_s < now_s) {
      old.emplace_back(key, nullptr);
    }
  }
  if (!old.empty()) FF_RETURN_IF_ERROR(db_->PutBatch(old));
  return old.size();
}

Result<fs3rpc::Layout> MetaStore::GarbageLayout(uint64_t ino) const {
  std::lock_guard lock(mu_);
  fs3rpc::Layout layout;
  FF_RETURN_IF_ERROR(db_->Get(GarbageKey(ino), &layout));
  return layout;
}

Status MetaStore::Forget(uint64_t ino) {
  std::lock_guard lock(mu_);
  return db_->Delete(GarbageKey(ino));
}

Result<Inode> MetaStore::SetStripe(const Caller& c, uint64_t ino, uint32_t stripe) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
}

Result<Inode> MetaStore::SetAttributes(const Caller& c, uint64_t ino, const SetAttr& a) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
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
  if (a.gid && *a.gid != inode.gid() && !c.root() && !(c.uid == inode.uid() && in_group(*a.gid))) {
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
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  FF_RETURN_IF_ERROR(XattrAccess(c, inode, name, /*write=*/true));
  const bool exists = inode.xattrs().count(name) > 0;
  if ((flags & kXattrCreate) && exists) return Err(StatusCode::kAlreadyExists, name + " exists");
  if ((flags & kXattrReplace) && !exists) return Err(StatusCode::kNoAttribute, "no " + name);
  (*inode.mutable_xattrs())[name] = value;
  inode.set_ctime_ns(NowNs());
  t.PutInode(inode);
  return t.Commit();
}

Result<std::string> MetaStore::GetXattr(const Caller& c, uint64_t ino,
                                        const std::string& name) const {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  FF_RETURN_IF_ERROR(XattrAccess(c, inode, name, /*write=*/false));
  auto it = inode.xattrs().find(name);
  if (it == inode.xattrs().end()) return Err(StatusCode::kNoAttribute, "no " + name);
  return it->second;
}

Result<std::vector<std::string>> MetaStore::ListXattrs(const Caller& c, uint64_t ino) const {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  std::vector<std::string> names;
  for (const auto& [name, value] : inode.xattrs()) {
    if (name.rfind("trusted.", 0) == 0 && !c.root()) continue;  // hidden from others
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status MetaStore::RemoveXattr(const Caller& c, uint64_t ino, const std::string& name) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
  FF_RETURN_IF_ERROR(XattrAccess(c, inode, name, /*write=*/true));
  if (inode.mutable_xattrs()->erase(name) == 0) return Err(StatusCode::kNoAttribute, "no " + name);
  inode.set_ctime_ns(NowNs());
  t.PutInode(inode);
  return t.Commit();
}

Result<std::vector<std::string>> MetaStore::CheckData(const std::map<uint64_t, uint64_t>& stored,
                                                      bool repair) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  std::vector<std::string> problems;
  for (const auto& [ino, length] : stored) {
    auto inode = t.GetInode(ino);
    // Only a file that is surely gone makes its chunks garbage: a failed read stops the check
    // (a repair would otherwise delete a live file's data).
    if (!inode.ok() && inode.status().code() != StatusCode::kNotFound) return inode.status();
    if (!inode.ok()) {
      fs3rpc::Layout queued;
      Status q = db_->Get(GarbageKey(ino), &queued);
      if (q.ok()) continue;  // deletion under way
      if (q.code() != StatusCode::kNotFound) return q;
      problems.push_back("chunks of inode " + std::to_string(ino) + " (" + std::to_string(length) +
                         " bytes) belong to no file");
      if (repair) t.AddGarbage(ino);
      continue;
    }
    if (inode->type() == fs3rpc::INODE_FILE && inode->sessions() == 0 && length > inode->size()) {
      problems.push_back("inode " + std::to_string(ino) + " holds " + std::to_string(length) +
                         " bytes of data but records a length of " + std::to_string(inode->size()));
      if (repair) {
        inode->set_size(length);
        t.PutInode(*inode);
      }
    }
  }
  if (repair && !problems.empty()) FF_RETURN_IF_ERROR(t.Commit());
  return problems;
}

Result<std::vector<std::string>> MetaStore::Fsck(bool repair) {
  std::lock_guard lock(mu_);
  Txn t(*db_, &needed_);
  std::vector<std::string> problems;
  std::map<uint64_t, Inode> inodes;
  FF_ASSIGN_OR_RETURN(auto inode_rows, db_->ScanKeys("i/", "", SIZE_MAX));
  for (const auto& [key, bytes] : inode_rows) {
    Inode i;
    if (!i.ParseFromString(bytes)) return DataLoss("corrupt inode record");
    inodes[i.ino()] = i;
  }
  auto name_of = [](uint64_t parent, const std::string& name) {
    return "entry '" + name + "' in directory " + std::to_string(parent);
  };
  std::map<uint64_t, uint32_t> links;    // entries pointing at each inode
  std::map<uint64_t, uint32_t> subdirs;  // directories under each directory
  std::map<uint64_t, uint64_t> dir_parent;
  FF_ASSIGN_OR_RETURN(auto dentry_rows, db_->ScanKeys("d/", "", SIZE_MAX));
  for (const auto& [key, bytes] : dentry_rows) {
    Dentry d;
    if (!d.ParseFromString(bytes) || key.size() < 10) return DataLoss("corrupt directory entry");
    uint64_t parent = 0;
    for (std::size_t i = 2; i < 10; ++i)
      parent = (parent << 8) | static_cast<unsigned char>(key[i]);
    const std::string name = key.substr(10);
    auto it = inodes.find(d.ino());
    if (it == inodes.end()) {
      problems.push_back(name_of(parent, name) + " points at missing inode " +
                         std::to_string(d.ino()));
      if (repair) t.DeleteDentry(parent, name);
      continue;
    }
    if (d.type() != it->second.type()) {
      problems.push_back(name_of(parent, name) + " has the wrong type");
      if (repair) {
        d.set_type(it->second.type());
        t.PutDentry(parent, name, d);
      }
    }
    ++links[d.ino()];
    if (it->second.type() == fs3rpc::INODE_DIR) {
      ++subdirs[parent];
      dir_parent[d.ino()] = parent;
    }
  }
  uint64_t max_ino = kRootIno;
  for (auto& [ino, inode] : inodes) {
    max_ino = std::max(max_ino, ino);
    const uint32_t n = links[ino];
    bool changed = false;
    if (inode.type() == fs3rpc::INODE_DIR) {
      if (ino != kRootIno && n == 0) {
        problems.push_back("directory inode " + std::to_string(ino) + " is unreachable");
        if (repair) t.DeleteInode(ino);
        continue;
      }
      const uint32_t want = 2 + subdirs[ino];
      if (inode.nlink() != want) {
        problems.push_back("directory inode " + std::to_string(ino) + " has link count " +
                           std::to_string(inode.nlink()) + ", should be " + std::to_string(want));
        inode.set_nlink(want);
        changed = true;
      }
      if (ino != kRootIno && inode.parent() != dir_parent[ino]) {
        problems.push_back("directory inode " + std::to_string(ino) + " records the wrong parent");
        inode.set_parent(dir_parent[ino]);
        changed = true;
      }
    } else {
      if (n == 0 && inode.sessions() == 0) {
        problems.push_back("inode " + std::to_string(ino) + " is orphaned (no entry, not open)");
        if (repair) {
          t.DeleteInode(ino);
          if (inode.type() == fs3rpc::INODE_FILE) t.AddGarbage(ino, inode.layout());
        }
        continue;
      }
      if (inode.nlink() != n) {
        problems.push_back("inode " + std::to_string(ino) + " has link count " +
                           std::to_string(inode.nlink()) + ", entries say " + std::to_string(n));
        inode.set_nlink(n);
        changed = true;
      }
    }
    if (changed && repair) t.PutInode(inode);
  }
  uint64_t live = 0;
  for (const auto& [ino, inode] : inodes) {
    auto now = t.GetInode(ino);
    if (!now.ok() && now.status().code() != StatusCode::kNotFound) return now.status();
    live += now.ok();
  }
  fs3rpc::Counter counted;
  Status counted_st = db_->Get("m/inodes", &counted);
  if (!counted_st.ok() && counted_st.code() != StatusCode::kNotFound) return counted_st;
  if (counted.value() != inodes.size()) {  // as found, before any repair
    problems.push_back("the inode count (" + std::to_string(counted.value()) + ") is not " +
                       std::to_string(inodes.size()));
  }
  t.SetInodeCount(live);
  FF_ASSIGN_OR_RETURN(uint64_t next, t.NextIno());
  if (next <= max_ino) {
    problems.push_back("the inode counter (" + std::to_string(next) + ") is not past inode " +
                       std::to_string(max_ino));
  }
  if (repair && !problems.empty()) {
    while (next <= max_ino) {
      FF_ASSIGN_OR_RETURN(next, t.NextIno());
    }
    FF_RETURN_IF_ERROR(t.Commit());
  }
  return problems;
}

}  // namespace ff::fs3

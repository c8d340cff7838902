// fs3-meta's store: opening, lookups, file sessions and settled lengths, the garbage list.
#include <sys/stat.h>

#include <algorithm>

#include "meta_store_internal.h"

namespace ff::fs3 {

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

}  // namespace ff::fs3

// Inside fs3-meta's store, shared by the files that implement it (meta_store.cc: opening,
// lookups, sessions and lengths, garbage; meta_store_entries.cc: entries (make, link, unlink,
// rmdir, rename, readdir); meta_store_attrs.cc: attributes, layouts and extended attributes;
// meta_store_fsck.cc: the consistency check): the key layout in RocksDB, name rules, and the
// transaction every operation runs in.
//
// Keys: "i/" + ino (big-endian) -> Inode; "d/" + parent + name -> Dentry; "g/" + ino -> a removed
// file's layout, until its chunks are deleted; "r/" + request id -> what a mutation answered (so
// a retry is answered, not applied twice); "m/inodes" -> the live inode count.
#pragma once

#include <time.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fs3/meta_store.h"

namespace ff::fs3 {
namespace meta_detail {
inline std::string BE8(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  return s;
}

inline std::string InodeKey(uint64_t ino) {
  return "i/" + BE8(ino);
}
inline std::string DirPrefix(uint64_t parent) {
  return "d/" + BE8(parent);
}
inline std::string DentryKey(uint64_t parent, const std::string& name) {
  return DirPrefix(parent) + name;
}
inline std::string GarbageKey(uint64_t ino) {
  return "g/" + BE8(ino);
}

inline std::string RequestKey(uint64_t id) {
  return "r/" + BE8(id);
}

inline int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

inline Status Err(StatusCode code, std::string m) {
  return Status(code, std::move(m));
}

// ENOENT for an empty name, EINVAL for '/', ENAMETOOLONG past 255 bytes; "." and ".." are the
// caller's to treat.
inline Status CheckName(const std::string& name) {
  if (name.empty()) return Err(StatusCode::kNotFound, "empty name");
  if (name.size() > kMaxNameBytes) {
    return Err(StatusCode::kNameTooLong, "name longer than " + std::to_string(kMaxNameBytes));
  }
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return InvalidArgument("a name may not contain '/' or NUL");
  }
  return Status::Ok();
}

inline bool Dot(const std::string& name) {
  return name == "." || name == "..";
}

}  // namespace meta_detail

using fs3rpc::Dentry;
using fs3rpc::Inode;
using fs3rpc::InodeType;
using namespace meta_detail;

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

}  // namespace ff::fs3

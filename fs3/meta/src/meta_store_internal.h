// Inside fs3-meta's store, shared by the files that implement it (meta_store.cc: opening,
// lookups, sessions and lengths, garbage; meta_store_entries.cc: entries (make, link, unlink,
// rmdir, rename, readdir); meta_store_attrs.cc: attributes, layouts and extended attributes;
// meta_store_fsck.cc: the consistency check): the key layout in RocksDB, name rules, and the
// transaction every operation runs in.
//
// Keys: "i/" + ino (big-endian) -> Inode; "d/" + parent + name -> Dentry; "g/" + ino -> a removed
// file's layout, until its chunks are deleted; "r/" + request id -> when a mutation was applied
// (so a retry is answered, not applied twice); "m/next_ino" -> the first inode number no server
// has reserved; "m/inodes" -> the live inode count (serial engine only); "s/" + ino + client +
// handle -> an open file's session of a client (on etcd under the client's lease); "o/" + ino ->
// an inode unlinked while open, whose data goes when its last session ends; "c/" + client -> the
// client's etcd lease (etcd engine); "w/" + ino + client + handle -> a session's settle mark (not
// leased: it outlives a session that ends without its close), and "w/" + ino + 0 + 0 -> a length
// to settle again once late writes are over (SettleMark).
#pragma once

#include <time.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/txn_kv.h"
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
inline std::string SessionPrefix(uint64_t ino) {
  return "s/" + BE8(ino);
}
inline std::string SessionKey(uint64_t ino, const SessionId& s) {
  return SessionPrefix(ino) + BE8(s.client) + BE8(s.handle);
}
inline std::string SettlePrefix(uint64_t ino) {
  return "w/" + BE8(ino);
}
inline std::string SettleKey(uint64_t ino, const SessionId& s) {
  return SettlePrefix(ino) + BE8(s.client) + BE8(s.handle);
}
inline std::string OrphanKey(uint64_t ino) {
  return "o/" + BE8(ino);
}
inline std::string ClientKey(uint64_t client) {
  return "c/" + BE8(client);
}
// The number in 8 big-endian bytes of `key` from `at` (0 when the key is too short).
inline uint64_t ReadBE8(const std::string& key, std::size_t at) {
  if (key.size() < at + 8) return 0;
  uint64_t v = 0;
  for (std::size_t i = at; i < at + 8; ++i)
    v = (v << 8) | static_cast<unsigned char>(key[i]);
  return v;
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

inline const Status& TxnKvStatus(const Status& s) {
  return s;
}
template <typename T>
Status TxnKvStatus(const Result<T>& r) {
  return r.status();
}

// Inode numbers a server reserves at a time (one write of "m/next_ino" per block, not per create:
// servers on the optimistic engine would otherwise all conflict on it).
constexpr uint64_t kInoBlock = 1024;

inline bool Dot(const std::string& name) {
  return name == "." || name == "..";
}

}  // namespace meta_detail

using fs3rpc::Dentry;
using fs3rpc::Inode;
using fs3rpc::InodeType;
using namespace meta_detail;

// One operation's view of the namespace: records parsed from the transaction's reads, changes
// buffered until Commit() hands them to the transaction (which MetaStore::Run commits, and runs
// again from the start when the optimistic engine reports a conflict).
class MetaStore::Txn {
 public:
  Txn(const MetaStore& store, KvTxn& kv) : store_(store), kv_(kv) {}

  template <typename T>
  Result<std::optional<T>> Read(const std::string& key) {
    FF_ASSIGN_OR_RETURN(std::optional<std::string> bytes, kv_.Get(key));
    if (!bytes) return std::optional<T>();
    T value;
    if (!value.ParseFromString(*bytes)) return DataLoss("record " + key + " is corrupt");
    return std::optional<T>(std::move(value));
  }

  // Reads `keys` at once (one round trip on etcd), so that the operation's later reads of them
  // cost nothing: an operation first fetches every key it knows it will read.
  Status Prefetch(const std::vector<std::string>& keys) { return kv_.GetMany(keys).status(); }
  // The request id's key (when there is one), the directory and the entry `name` in it, and
  // `keys`.
  Status PrefetchEntry(uint64_t request_id, uint64_t parent, const std::string& name,
                       std::vector<std::string> keys = {}) {
    keys.push_back(InodeKey(parent));
    keys.push_back(DentryKey(parent, name));
    if (request_id != 0) keys.push_back(RequestKey(request_id));
    return Prefetch(keys);
  }

  Result<Inode> GetInode(uint64_t ino) {
    const std::string key = InodeKey(ino);
    if (auto it = inodes_.find(key); it != inodes_.end()) {
      if (!it->second) return Err(StatusCode::kNotFound, "no inode " + std::to_string(ino));
      return *it->second;
    }
    FF_ASSIGN_OR_RETURN(std::optional<Inode> inode, Read<Inode>(key));
    if (!inode) return Err(StatusCode::kNotFound, "no inode " + std::to_string(ino));
    return std::move(*inode);
  }
  // Several inodes read at once (one round trip on etcd); nullopt for a missing one.
  Result<std::vector<std::optional<Inode>>> GetInodes(const std::vector<uint64_t>& inos) {
    std::vector<std::string> keys;
    keys.reserve(inos.size());
    for (uint64_t ino : inos)
      keys.push_back(InodeKey(ino));
    FF_ASSIGN_OR_RETURN(auto values, kv_.GetMany(keys));
    std::vector<std::optional<Inode>> out(inos.size());
    for (std::size_t i = 0; i < inos.size(); ++i) {
      if (auto it = inodes_.find(keys[i]); it != inodes_.end()) {
        out[i] = it->second;
      } else if (values[i]) {
        Inode inode;
        if (!inode.ParseFromString(*values[i]))
          return DataLoss("record " + keys[i] + " is corrupt");
        out[i] = std::move(inode);
      }
    }
    return out;
  }
  // Open: an anonymous session counted in the inode, or a client's session key. `likely_not`:
  // assumed not, unread, at first (KvTxn::AssumeNoneUnder).
  Result<bool> IsOpen(const Inode& inode, bool likely_not = false) {
    if (inode.sessions() > 0) return true;
    if (likely_not) {
      FF_ASSIGN_OR_RETURN(bool none, kv_.AssumeNoneUnder(SessionPrefix(inode.ino())));
      return !none;
    }
    FF_ASSIGN_OR_RETURN(auto rows, kv_.Scan(SessionPrefix(inode.ino()), "", 1));
    return !rows.empty();
  }
  // A client's session (`lease`: the client's etcd lease, 0 on the serial engine), with its
  // settle mark: a session that ends without its close (its lease expired) leaves the mark, and
  // fs3-meta's sweep settles the file's length from storage (what the client wrote may have
  // landed past the recorded length).
  void PutSession(uint64_t ino, const SessionId& s, int64_t lease) {
    kv_.PutLeased(SessionKey(ino, s), "", lease);
    kv_.Put(SettleKey(ino, s), "");
  }
  void DeleteSession(uint64_t ino, const SessionId& s) {
    kv_.Delete(SessionKey(ino, s));
    kv_.Delete(SettleKey(ino, s));
  }
  // A settle mark under the inode: a length that the sweep has yet to settle.
  Result<bool> Settling(uint64_t ino) {
    FF_ASSIGN_OR_RETURN(auto rows, kv_.Scan(SettlePrefix(ino), "", 1));
    return !rows.empty();
  }
  // Marked as unlinked while open. `likely_not`: assumed not, unread, at first
  // (KvTxn::AssumeAbsent).
  Result<bool> Orphaned(uint64_t ino, bool likely_not = false) {
    if (likely_not) {
      FF_ASSIGN_OR_RETURN(bool absent, kv_.AssumeAbsent(OrphanKey(ino)));
      return !absent;
    }
    FF_ASSIGN_OR_RETURN(auto v, kv_.Get(OrphanKey(ino)));
    return v.has_value();
  }
  void MarkOrphan(uint64_t ino) { kv_.Put(OrphanKey(ino), ""); }
  void UnmarkOrphan(uint64_t ino) { kv_.Delete(OrphanKey(ino)); }
  // The etcd lease a client's sessions live under (recorded by MetaStore::KeepClient).
  Result<int64_t> ClientLease(uint64_t client) {
    FF_ASSIGN_OR_RETURN(auto c, Read<fs3rpc::Counter>(ClientKey(client)));
    if (!c) {
      return FailedPrecondition("client " + std::to_string(client) +
                                " holds no lease (its lease expired, or it never registered)");
    }
    return static_cast<int64_t>(c->value());
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
    return Read<Dentry>(key);
  }
  Result<bool> DirEmpty(uint64_t ino) {
    for (const auto& [key, d] : dentries_) {
      if (key.rfind(DirPrefix(ino), 0) == 0 && d) return false;
    }
    FF_ASSIGN_OR_RETURN(auto rows, kv_.Scan(DirPrefix(ino), "", 64));
    for (const auto& [key, bytes] : rows) {
      auto it = dentries_.find(key);
      if (it == dentries_.end() || it->second) return false;  // not deleted in this operation
    }
    return true;
  }
  // Committed records under `prefix` after `after` (readdir, fsck, the garbage list).
  Result<std::vector<std::pair<std::string, std::string>>> Scan(const std::string& prefix,
                                                                const std::string& after,
                                                                std::size_t limit) {
    return kv_.Scan(prefix, after, limit);
  }
  void PutInode(const Inode& inode) { inodes_[InodeKey(inode.ino())] = inode; }
  void DeleteInode(uint64_t ino) {
    inodes_[InodeKey(ino)] = std::nullopt;
    --inode_delta_;
  }
  // Deleted in this transaction.
  bool Deleted(uint64_t ino) const {
    auto it = inodes_.find(InodeKey(ino));
    return it != inodes_.end() && !it->second;
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
  void RemoveGarbage(uint64_t ino) { kv_.Delete(GarbageKey(ino)); }
  void DeleteKey(const std::string& key) { kv_.Delete(key); }
  void PutKey(const std::string& key, std::string value) { kv_.Put(key, std::move(value)); }
  // Raw values of `keys` (one round trip on etcd); nullopt for a missing one.
  Result<std::vector<std::optional<std::string>>> GetKeys(const std::vector<std::string>& keys) {
    return kv_.GetMany(keys);
  }
  void PutLeasedKey(const std::string& key, std::string value, int64_t lease) {
    kv_.PutLeased(key, std::move(value), lease);
  }
  // Durable request ids: a mutating request already applied is answered, not applied again.
  Result<bool> Done(uint64_t request_id) {
    if (request_id == 0) return false;
    FF_ASSIGN_OR_RETURN(auto c, Read<fs3rpc::Counter>(RequestKey(request_id)));
    return c.has_value();
  }
  void MarkDone(uint64_t request_id) { done_ = request_id; }

  // A fresh inode number: from this server's block of reserved numbers, or from a new block
  // reserved in this transaction ("m/next_ino" is the first number nobody reserved), which
  // becomes this server's once the transaction commits.
  Result<uint64_t> NextIno() {
    if (auto ino = store_.TakeIno()) return *ino;
    if (!next_block_) {
      FF_ASSIGN_OR_RETURN(auto c, Read<fs3rpc::Counter>("m/next_ino"));
      const uint64_t start = std::max<uint64_t>(c ? c->value() : 0, kRootIno + 1);
      next_block_ = {start, start + kInoBlock};
    }
    if (next_block_->first >= next_block_->second) {
      return Internal("inode block of this transaction used up");
    }
    return next_block_->first++;
  }
  // fsck: the next number to reserve, read as stored, and set.
  Result<uint64_t> StoredNextIno() {
    FF_ASSIGN_OR_RETURN(auto c, Read<fs3rpc::Counter>("m/next_ino"));
    return c ? c->value() : 0;
  }
  void SetStoredNextIno(uint64_t next) {
    fs3rpc::Counter c;
    c.set_value(next);
    kv_.Put("m/next_ino", c.SerializeAsString());
    reset_pool_ = true;
  }

  // Hands the changes to the transaction; `durable`: the operation waits for them to be on disk
  // before it answers (MetaStore::AwaitDurable).
  Status Commit(bool durable = true) {
    for (const auto& [key, inode] : inodes_)
      Write(key, inode ? &*inode : nullptr);
    for (const auto& [key, d] : dentries_)
      Write(key, d ? &*d : nullptr);
    if (next_block_) {
      fs3rpc::Counter next;
      next.set_value(next_block_->second);
      Write("m/next_ino", &next);
    }
    // The live inode count is kept by the serial engine only (one writer: no conflicts on it);
    // the optimistic engine counts inode keys instead.
    if (store_.kv_->serial() && (inode_delta_ != 0 || inode_count_)) {
      fs3rpc::Counter count;
      if (inode_count_) {
        count.set_value(*inode_count_);
      } else {
        FF_ASSIGN_OR_RETURN(auto stored, Read<fs3rpc::Counter>("m/inodes"));
        const int64_t was = stored ? static_cast<int64_t>(stored->value()) : 0;
        count.set_value(static_cast<uint64_t>(std::max<int64_t>(0, was + inode_delta_)));
      }
      Write("m/inodes", &count);
    }
    if (done_ != 0) {
      fs3rpc::Counter when;
      when.set_value(static_cast<uint64_t>(NowNs() / 1000000000));
      Write(RequestKey(done_), &when);
    }
    for (const auto& [ino, layout] : garbage_)
      Write(GarbageKey(ino), &layout);
    durable_ = durable;
    return Status::Ok();
  }

  bool durable() const { return durable_; }
  // The directories this transaction writes, as it writes them.
  std::vector<Inode> WrittenDirs() const {
    std::vector<Inode> out;
    for (const auto& [key, inode] : inodes_) {
      if (inode && inode->type() == fs3rpc::INODE_DIR) out.push_back(*inode);
    }
    return out;
  }
  // The block of inode numbers this transaction reserved and did not use.
  std::optional<std::pair<uint64_t, uint64_t>> unused_block() const { return next_block_; }
  bool reset_pool() const { return reset_pool_; }

 private:
  void Write(const std::string& key, const google::protobuf::Message* value) {
    if (value) {
      kv_.Put(key, value->SerializeAsString());
    } else {
      kv_.Delete(key);
    }
  }

  const MetaStore& store_;
  KvTxn& kv_;
  std::map<std::string, std::optional<Inode>> inodes_;
  std::map<std::string, std::optional<Dentry>> dentries_;
  std::vector<std::pair<uint64_t, fs3rpc::Layout>> garbage_;
  std::optional<std::pair<uint64_t, uint64_t>> next_block_;  // [next, end) reserved here
  uint64_t done_ = 0;
  int64_t inode_delta_ = 0;              // inodes made minus inodes deleted
  std::optional<uint64_t> inode_count_;  // set outright (fsck)
  bool durable_ = true;
  bool reset_pool_ = false;
};

template <typename F>
auto MetaStore::RunAs(bool update, F&& op, Dirs* dirs) const -> decltype(op(std::declval<Txn&>())) {
  bool durable = false;
  bool reset_pool = false;
  uint64_t block_first = 0, block_end = 0;  // inode numbers reserved and left ([first, end))
  uint64_t token = 0;
  auto body = [&](KvTxn& kv) {
    Txn t(*this, kv);
    auto out = op(t);
    durable = t.durable() && kv.has_writes();
    const auto block = t.unused_block();
    block_first = block ? block->first : 0;
    block_end = block ? block->second : 0;
    reset_pool = t.reset_pool();
    if (dirs) *dirs = t.WrittenDirs();
    return out;
  };
  auto r = update ? kv_->RunUpdate(body, &token) : kv_->Run(body, &token);
  if (TxnKvStatus(r).ok()) {
    if (durable) {
      uint64_t seen = needed_.load();
      while (seen < token && !needed_.compare_exchange_weak(seen, token)) {
      }
    }
    if (reset_pool) ResetInoPool();
    if (block_first < block_end) GiveInoBlock(block_first, block_end);
  }
  return r;
}

}  // namespace ff::fs3

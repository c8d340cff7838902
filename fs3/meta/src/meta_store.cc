// fs3-meta's store: opening, lookups, file sessions and settled lengths, the garbage list.
#include <sys/stat.h>

#include <algorithm>

#include "common/etcd.h"
#include "meta_store_internal.h"

namespace ff::fs3 {

Result<std::unique_ptr<MetaStore>> MetaStore::Open(const std::string& path,
                                                   const fs3rpc::Layout& default_layout) {
  FF_ASSIGN_OR_RETURN(auto db, ProtoDb::Open(path));
  return OpenKv(TxnKv::OpenSerial(std::move(db)), default_layout);
}

Result<std::unique_ptr<MetaStore>> MetaStore::OpenEtcd(etcd::Client* client,
                                                       const std::string& prefix,
                                                       const fs3rpc::Layout& default_layout) {
  FF_ASSIGN_OR_RETURN(auto kv, TxnKv::OpenEtcd(client, prefix));
  return OpenKv(std::move(kv), default_layout, client);
}

Result<std::unique_ptr<MetaStore>> MetaStore::OpenKv(std::unique_ptr<TxnKv> kv,
                                                     const fs3rpc::Layout& default_layout,
                                                     etcd::Client* etcd) {
  if (!kv->serial() && etcd == nullptr) {
    return InvalidArgument("the etcd engine's store needs the etcd client (clients' leases)");
  }
  std::unique_ptr<MetaStore> m(new MetaStore(std::move(kv), etcd));
  // The root, made once (by whichever server gets there first).
  FF_RETURN_IF_ERROR(m->Run([&](Txn& t) -> Status {
    auto root = t.GetInode(kRootIno);
    if (root.ok()) return Status::Ok();
    if (root.status().code() != StatusCode::kNotFound) return root.status();
    Inode r;
    r.set_ino(kRootIno);
    r.set_type(fs3rpc::INODE_DIR);
    r.set_mode(0755);
    r.set_nlink(2);
    r.set_parent(kRootIno);
    const int64_t now = NowNs();
    r.set_atime_ns(now);
    r.set_mtime_ns(now);
    r.set_ctime_ns(now);
    *r.mutable_layout() = default_layout;
    t.PutInode(r);
    t.CountNewInode();
    return t.Commit();
  }));
  FF_RETURN_IF_ERROR(m->AwaitDurable());
  return m;
}

std::optional<uint64_t> MetaStore::TakeIno() const {
  MutexLock lock(&ino_mu_);
  if (ino_next_ < ino_end_) return ino_next_++;
  return std::nullopt;
}

void MetaStore::GiveInoBlock(uint64_t first, uint64_t end) const {
  MutexLock lock(&ino_mu_);
  if (ino_next_ >= ino_end_ && first < end) {
    ino_next_ = first;
    ino_end_ = end;
  }
}

void MetaStore::ResetInoPool() const {
  MutexLock lock(&ino_mu_);
  ino_next_ = ino_end_ = 0;
}

Result<Inode> MetaStore::GetAttr(uint64_t ino) const {
  return Run([&](Txn& t) -> Result<Inode> { return t.GetInode(ino); });
}

Result<std::vector<std::optional<Inode>>> MetaStore::GetAttrs(
    const std::vector<uint64_t>& inos) const {
  return Run([&](Txn& t) { return t.GetInodes(inos); });
}

Result<Inode> MetaStore::Lookup(const Caller& c, uint64_t parent, const std::string& name) const {
  return Run([&](Txn& t) -> Result<Inode> {
    if (!Dot(name)) FF_RETURN_IF_ERROR(t.PrefetchEntry(0, parent, name));
    FF_ASSIGN_OR_RETURN(Inode dir, t.GetDir(parent));
    if (!Permitted(c, dir, 1)) return PermissionDenied("no search permission on the directory");
    if (name == ".") return dir;
    if (name == "..") return t.GetInode(dir.parent());
    FF_RETURN_IF_ERROR(CheckName(name));
    FF_ASSIGN_OR_RETURN(auto d, t.GetDentry(parent, name));
    if (!d) return Err(StatusCode::kNotFound, "no entry '" + name + "'");
    return t.GetInode(d->ino());
  });
}

Result<Inode> MetaStore::OpenSession(uint64_t ino, SessionId session) {
  return Update([&](Txn& t) -> Result<Inode> {
    if (session.client == 0) {
      FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
      inode.set_sessions(inode.sessions() + 1);
      t.PutInode(inode);
      FF_RETURN_IF_ERROR(t.Commit());
      return inode;
    }
    FF_RETURN_IF_ERROR(t.Prefetch({InodeKey(ino), ClientKey(session.client)}));
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    int64_t lease = 0;
    if (!kv_->serial()) {
      FF_ASSIGN_OR_RETURN(lease, t.ClientLease(session.client));
    }
    t.PutSession(ino, session, lease);
    FF_RETURN_IF_ERROR(t.Commit(/*durable=*/false));
    return inode;
  });
}

Status MetaStore::CloseSession(uint64_t ino, std::optional<uint64_t> size, SessionId session) {
  return Update([&](Txn& t) -> Status {
    // A client's close that only ends its session reads nothing on etcd: the file is assumed
    // not unlinked (checked at commit), and the commit deletes the session's key.
    const bool bare = session.client != 0 && !size;
    if (!bare) FF_RETURN_IF_ERROR(t.Prefetch({OrphanKey(ino), InodeKey(ino)}));
    std::optional<Inode> inode;
    if (session.client == 0) {
      FF_ASSIGN_OR_RETURN(inode, t.GetInode(ino));
      if (inode->sessions() == 0)
        return FailedPrecondition("inode " + std::to_string(ino) + " is not open");
      inode->set_sessions(inode->sessions() - 1);
    } else {
      t.DeleteSession(ino, session);
      if (size) {
        auto found = t.GetInode(ino);
        if (!found.ok() && found.status().code() != StatusCode::kNotFound) return found.status();
        if (found.ok()) inode = std::move(*found);
      }
    }
    const bool grows = inode && size && *size > inode->size();
    if (grows) {
      inode->set_size(*size);
      inode->set_mtime_ns(NowNs());
      inode->set_ctime_ns(inode->mtime_ns());
    }
    FF_ASSIGN_OR_RETURN(bool orphaned, t.Orphaned(ino, /*likely_not=*/bare));
    // Unlinked while open: its data goes with the last session (an anonymous session's inode
    // may predate the orphan marks).
    if (orphaned || (session.client == 0 && inode->nlink() == 0)) {
      if (!inode) {
        FF_ASSIGN_OR_RETURN(inode, t.GetInode(ino));
      }
      FF_ASSIGN_OR_RETURN(bool open, t.IsOpen(*inode));
      if (!open && inode->nlink() == 0) {
        t.DeleteInode(ino);
        t.UnmarkOrphan(ino);
        if (inode->type() == fs3rpc::INODE_FILE) t.AddGarbage(ino, inode->layout());
        return t.Commit();
      }
    }
    if (inode) t.PutInode(*inode);
    return t.Commit(/*durable=*/grows);
  });
}

Result<uint32_t> MetaStore::KeepClient(uint64_t client, bool first) {
  if (client == 0) return InvalidArgument("a client's number is not 0");
  const auto now = std::chrono::steady_clock::now();
  const Status expired(StatusCode::kNotFound, "client " + std::to_string(client) +
                                                  "'s lease expired: its sessions have ended");
  if (kv_->serial()) {
    // A client's record ("c/") says it registered; its deadline is kept here. A client this
    // server does not know (it restarted since) whose record is there: welcome back.
    {
      MutexLock lock(&clients_mu_);
      auto it = client_deadlines_.find(client);
      if (it != client_deadlines_.end()) {
        if (!first && it->second < now) return expired;  // the sweep ends its sessions
        it->second = now + std::chrono::seconds(client_lease_s_);
        return client_lease_s_;
      }
    }
    if (first) {
      FF_RETURN_IF_ERROR(Update([&](Txn& t) -> Status {
        t.PutLeasedKey(ClientKey(client), "", 0);
        return t.Commit();
      }));
    } else {
      FF_ASSIGN_OR_RETURN(auto recorded,
                          Run([&](Txn& t) { return t.Read<fs3rpc::Counter>(ClientKey(client)); }));
      if (!recorded) return expired;
    }
    MutexLock lock(&clients_mu_);
    client_deadlines_[client] = now + std::chrono::seconds(client_lease_s_);
    return client_lease_s_;
  }
  int64_t lease = 0;
  {
    MutexLock lock(&clients_mu_);
    if (auto it = client_leases_.find(client); it != client_leases_.end()) lease = it->second;
  }
  if (lease == 0) {  // registered through another server, maybe
    FF_ASSIGN_OR_RETURN(auto recorded,
                        Run([&](Txn& t) { return t.Read<fs3rpc::Counter>(ClientKey(client)); }));
    if (recorded) lease = static_cast<int64_t>(recorded->value());
  }
  if (lease != 0) {
    Result<int64_t> kept = etcd_->KeepAlive(lease);
    if (kept.ok()) {
      MutexLock lock(&clients_mu_);
      client_leases_[client] = lease;
      return client_lease_s_;
    }
    if (kept.status().code() != StatusCode::kNotFound) return kept.status();
    MutexLock lock(&clients_mu_);
    client_leases_.erase(client);
    lease = 0;
  }
  if (!first) return expired;
  FF_ASSIGN_OR_RETURN(lease, etcd_->GrantLease(client_lease_s_));
  fs3rpc::Counter record;
  record.set_value(static_cast<uint64_t>(lease));
  FF_RETURN_IF_ERROR(Update([&](Txn& t) -> Status {
    t.PutLeasedKey(ClientKey(client), record.SerializeAsString(), lease);
    return t.Commit(/*durable=*/false);
  }));
  MutexLock lock(&clients_mu_);
  client_leases_[client] = lease;
  return client_lease_s_;
}

Result<std::size_t> MetaStore::EndExpiredSessions() {
  std::size_t ended = 0;
  const auto now = std::chrono::steady_clock::now();
  if (kv_->serial()) {
    // The sessions and records of clients not heard from within their lease; a client this
    // server has not heard from since it started gets one lease's time from now.
    std::vector<uint64_t> expired;
    std::string after;
    for (;;) {
      FF_ASSIGN_OR_RETURN(auto rows, Run([&](Txn& t) { return t.Scan("s/", after, 512); }));
      std::vector<std::string> gone;
      {
        MutexLock lock(&clients_mu_);
        for (const auto& [key, value] : rows) {
          const uint64_t client = ReadBE8(key, 10);
          if (client == 0) continue;
          auto [it, fresh] =
              client_deadlines_.try_emplace(client, now + std::chrono::seconds(client_lease_s_));
          if (!fresh && it->second < now) gone.push_back(key);
        }
      }
      if (!gone.empty()) {
        FF_RETURN_IF_ERROR(Update([&](Txn& t) -> Status {
          for (const std::string& key : gone)
            t.DeleteKey(key);
          return t.Commit(/*durable=*/false);
        }));
        ended += gone.size();
      }
      if (rows.size() < 512) break;
      after = rows.back().first;
    }
    {
      MutexLock lock(&clients_mu_);
      for (auto it = client_deadlines_.begin(); it != client_deadlines_.end();) {
        if (it->second < now) {
          expired.push_back(it->first);
          it = client_deadlines_.erase(it);
        } else {
          ++it;
        }
      }
    }
    // Their records go too (a later renewal is told its lease expired).
    for (std::size_t i = 0; i < expired.size(); i += 256) {
      FF_RETURN_IF_ERROR(Update([&](Txn& t) -> Status {
        for (std::size_t j = i; j < std::min(expired.size(), i + 256); ++j)
          t.DeleteKey(ClientKey(expired[j]));
        return t.Commit(/*durable=*/false);
      }));
    }
  }
  // Files unlinked while open whose sessions have all ended.
  FF_ASSIGN_OR_RETURN(auto orphans, Run([&](Txn& t) { return t.Scan("o/", "", 1000); }));
  for (const auto& [key, value] : orphans) {
    const uint64_t ino = ReadBE8(key, 2);
    FF_ASSIGN_OR_RETURN(bool reclaimed, Update([&](Txn& t) -> Result<bool> {
                          FF_ASSIGN_OR_RETURN(bool still, t.Orphaned(ino));
                          if (!still) return false;
                          auto inode = t.GetInode(ino);
                          if (!inode.ok() && inode.status().code() != StatusCode::kNotFound) {
                            return inode.status();
                          }
                          bool open = false;
                          if (inode.ok()) {
                            FF_ASSIGN_OR_RETURN(open, t.IsOpen(*inode));
                          }
                          if (inode.ok() && (open || inode->nlink() > 0)) {
                            if (inode->nlink() == 0) return false;  // still open
                            t.UnmarkOrphan(ino);                    // linked again (fsck)
                          } else {
                            t.UnmarkOrphan(ino);
                            if (inode.ok()) {
                              t.DeleteInode(ino);
                              if (inode->type() == fs3rpc::INODE_FILE)
                                t.AddGarbage(ino, inode->layout());
                            }
                          }
                          FF_RETURN_IF_ERROR(t.Commit());
                          return inode.ok() && inode->nlink() == 0;
                        }));
    ended += reclaimed;
  }
  return ended;
}

Result<Inode> MetaStore::SettleLength(uint64_t ino, uint64_t length, bool written,
                                      std::optional<uint64_t> stored_bytes) {
  return Update([&](Txn& t) -> Result<Inode> {
    FF_ASSIGN_OR_RETURN(Inode inode, t.GetInode(ino));
    if (inode.type() != fs3rpc::INODE_FILE) return inode;
    const bool new_stored =
        stored_bytes && (!inode.has_stored_bytes() || inode.stored_bytes() != *stored_bytes);
    if (length > inode.size() || written || new_stored) {
      inode.set_size(std::max(length, inode.size()));
      if (stored_bytes) inode.set_stored_bytes(*stored_bytes);
      if (written) {  // data changed: mtime and ctime move (POSIX: on write)
        inode.set_mtime_ns(NowNs());
        inode.set_ctime_ns(inode.mtime_ns());
      }
      t.PutInode(inode);
      FF_RETURN_IF_ERROR(t.Commit());
    }
    return inode;
  });
}

Status MetaStore::MarkRecheck(uint64_t ino, uint64_t at_unix_s) {
  return Update([&](Txn& t) -> Status {
    const std::string key = SettleKey(ino, {});
    FF_ASSIGN_OR_RETURN(auto was, t.Read<fs3rpc::Counter>(key));
    if (was && was->value() >= at_unix_s) return Status::Ok();
    fs3rpc::Counter at;
    at.set_value(at_unix_s);
    t.PutKey(key, at.SerializeAsString());
    return t.Commit();
  });
}

Result<std::vector<MetaStore::SettleMark>> MetaStore::DueSettles(const std::string& after,
                                                                 std::size_t max,
                                                                 std::string* next) {
  return Run([&](Txn& t) -> Result<std::vector<SettleMark>> {
    FF_ASSIGN_OR_RETURN(auto rows, t.Scan("w/", after, max));
    *next = rows.size() < max || rows.empty() ? "" : rows.back().first;
    const auto now_s = static_cast<uint64_t>(NowNs() / 1000000000);
    std::vector<SettleMark> marks;
    std::vector<std::string> sessions;  // of the session marks, in order
    for (const auto& [key, value] : rows) {
      SettleMark m;
      m.ino = ReadBE8(key, 2);
      m.session = {ReadBE8(key, 10), ReadBE8(key, 18)};
      m.key = key;
      if (m.session.client == 0) {
        fs3rpc::Counter at;
        if (!at.ParseFromString(value)) return DataLoss("record " + key + " is corrupt");
        m.at_unix_s = at.value();
        if (m.at_unix_s > now_s) continue;
      } else {
        sessions.push_back(SessionKey(m.ino, m.session));
      }
      marks.push_back(std::move(m));
    }
    // A session mark is due once its session is gone without its close.
    std::vector<std::optional<std::string>> open;
    if (!sessions.empty()) {
      FF_ASSIGN_OR_RETURN(open, t.GetKeys(sessions));
    }
    std::vector<SettleMark> due;
    std::size_t i = 0;
    for (SettleMark& m : marks) {
      if (m.session.client != 0 && open[i++]) continue;
      due.push_back(std::move(m));
    }
    return due;
  });
}

Status MetaStore::SettleDone(const SettleMark& mark, uint64_t recheck_at_unix_s) {
  return Update([&](Txn& t) -> Status {
    FF_ASSIGN_OR_RETURN(auto now, t.GetKeys({mark.key}));
    if (!now[0]) return Status::Ok();
    if (mark.session.client == 0) {  // a recheck asked for again meanwhile stays
      fs3rpc::Counter at;
      if (at.ParseFromString(*now[0]) && at.value() != mark.at_unix_s) return Status::Ok();
    }
    t.DeleteKey(mark.key);
    if (recheck_at_unix_s != 0) {
      const std::string key = SettleKey(mark.ino, {});
      FF_ASSIGN_OR_RETURN(auto was, t.Read<fs3rpc::Counter>(key));
      if (!was || was->value() < recheck_at_unix_s) {
        fs3rpc::Counter at;
        at.set_value(recheck_at_unix_s);
        t.PutKey(key, at.SerializeAsString());
      }
    }
    return t.Commit(/*durable=*/recheck_at_unix_s != 0);
  });
}

Result<uint64_t> MetaStore::InodeCount() const {
  if (!kv_->serial()) return kv_->CountKeys("i/");
  return Run([&](Txn& t) -> Result<uint64_t> {
    FF_ASSIGN_OR_RETURN(auto c, t.Read<fs3rpc::Counter>("m/inodes"));
    return c ? c->value() : 0;
  });
}

Result<std::vector<uint64_t>> MetaStore::Garbage() const {
  return Run([&](Txn& t) -> Result<std::vector<uint64_t>> {
    FF_ASSIGN_OR_RETURN(auto rows, t.Scan("g/", "", SIZE_MAX));
    std::vector<uint64_t> out;
    for (const auto& [key, bytes] : rows) {
      uint64_t ino = 0;
      for (std::size_t i = 2; i < 10 && i < key.size(); ++i)
        ino = (ino << 8) | static_cast<unsigned char>(key[i]);
      out.push_back(ino);
    }
    return out;
  });
}

Result<std::size_t> MetaStore::PruneRequests(uint64_t max_age_s) {
  const auto now_s = static_cast<uint64_t>(NowNs() / 1000000000);
  std::size_t pruned = 0;
  std::string after;
  // In pages, so that one transaction stays within the engine's limits.
  for (;;) {
    using Page = std::pair<std::size_t, std::string>;  // pruned, the next page's cursor
    FF_ASSIGN_OR_RETURN(Page page, Update([&](Txn& t) -> Result<Page> {
                          FF_ASSIGN_OR_RETURN(auto rows, t.Scan("r/", after, 512));
                          std::size_t old = 0;
                          for (const auto& [key, bytes] : rows) {
                            fs3rpc::Counter when;
                            if (!when.ParseFromString(bytes) || when.value() + max_age_s < now_s) {
                              t.DeleteKey(key);
                              ++old;
                            }
                          }
                          FF_RETURN_IF_ERROR(t.Commit(/*durable=*/false));
                          return Page(old, rows.size() < 512 ? "" : rows.back().first);
                        }));
    pruned += page.first;
    if (page.second.empty()) return pruned;
    after = page.second;
  }
}

Result<fs3rpc::Layout> MetaStore::GarbageLayout(uint64_t ino) const {
  return Run([&](Txn& t) -> Result<fs3rpc::Layout> {
    FF_ASSIGN_OR_RETURN(auto layout, t.Read<fs3rpc::Layout>(GarbageKey(ino)));
    if (!layout) return NotFound("inode " + std::to_string(ino) + " is not awaiting deletion");
    return *layout;
  });
}

Status MetaStore::Forget(uint64_t ino) {
  return Update([&](Txn& t) -> Status {
    t.RemoveGarbage(ino);
    return t.Commit();
  });
}

}  // namespace ff::fs3

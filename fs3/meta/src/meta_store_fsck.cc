// fs3-meta's store: the consistency check of the namespace (and, with storage's lengths, of the
// data), with repair. The check reads one snapshot, without the store's lock (live operations go
// on), one pass over each kind of record; each repair is a small transaction that reads again
// what it mends and goes ahead only while that is as the snapshot showed it.
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "meta_store_internal.h"

namespace ff::fs3 {

// What the check reads: every record it judges, parsed, with the raw bytes of those a repair
// compares against (a record whose bytes changed was written since the snapshot).
struct MetaStore::FsckSnapshot {
  std::map<uint64_t, Inode> inodes;
  std::map<uint64_t, std::string> inode_bytes;
  struct Entry {
    uint64_t parent;
    std::string name;
    Dentry dentry;
    std::string bytes;
  };
  std::vector<Entry> entries;
  std::vector<std::string> session_keys;  // "s/" + ino + client + handle
  std::set<uint64_t> open_inos;           // inodes with a client's session
  std::set<uint64_t> marked;              // orphan marks ("o/")
  std::set<uint64_t> garbage;             // data awaiting deletion ("g/")
  std::set<uint64_t> settling;            // lengths to settle ("w/")
  std::optional<uint64_t> inode_count;    // "m/inodes" (serial engine)
  uint64_t next_ino = 0;                  // "m/next_ino"
};

namespace {

// Calls `each(key, bytes)` for every record under `prefix` of `t`'s snapshot, a page at a time,
// telling `observe` after each page.
template <typename T, typename F>
Status ScanAll(T& t, const std::string& prefix, const std::string& phase,
               const MetaStore::FsckObserver& observe, F&& each) {
  constexpr std::size_t kPage = 4096;
  std::string after;
  uint64_t done = 0;
  for (;;) {
    FF_ASSIGN_OR_RETURN(auto rows, t.Scan(prefix, after, kPage));
    for (const auto& [key, bytes] : rows)
      FF_RETURN_IF_ERROR(each(key, bytes));
    done += rows.size();
    if (observe) observe({.phase = phase, .done = done});
    if (rows.size() < kPage) return Status::Ok();
    after = rows.back().first;
  }
}

// Whether the record at `key` still holds `bytes` (nullopt: still absent).
template <typename T>
Result<bool> Unchanged(T& t, const std::string& key, const std::optional<std::string>& bytes) {
  FF_ASSIGN_OR_RETURN(auto now, t.GetKeys({key}));
  return now[0] == bytes;
}

}  // namespace

Result<MetaStore::FsckSnapshot> MetaStore::ReadFsckSnapshot(const FsckObserver& observe) const {
  std::unique_ptr<KvTxn> kv = kv_->BeginSnapshot();
  Txn t(*this, *kv);
  FsckSnapshot snap;
  FF_RETURN_IF_ERROR(ScanAll(t, "i/", "inodes", observe, [&](const auto&, const auto& bytes) {
    Inode i;
    if (!i.ParseFromString(bytes)) return DataLoss("corrupt inode record");
    snap.inode_bytes[i.ino()] = bytes;
    snap.inodes[i.ino()] = std::move(i);
    return Status::Ok();
  }));
  FF_RETURN_IF_ERROR(ScanAll(t, "d/", "entries", observe, [&](const auto& key, const auto& bytes) {
    Dentry d;
    if (!d.ParseFromString(bytes) || key.size() < 10) return DataLoss("corrupt directory entry");
    snap.entries.push_back({ReadBE8(key, 2), key.substr(10), std::move(d), bytes});
    return Status::Ok();
  }));
  FF_RETURN_IF_ERROR(ScanAll(t, "s/", "sessions", observe, [&](const auto& key, const auto&) {
    snap.session_keys.push_back(key);
    snap.open_inos.insert(ReadBE8(key, 2));
    return Status::Ok();
  }));
  FF_RETURN_IF_ERROR(ScanAll(t, "o/", "sessions", observe, [&](const auto& key, const auto&) {
    snap.marked.insert(ReadBE8(key, 2));
    return Status::Ok();
  }));
  FF_RETURN_IF_ERROR(ScanAll(t, "g/", "sessions", observe, [&](const auto& key, const auto&) {
    snap.garbage.insert(ReadBE8(key, 2));
    return Status::Ok();
  }));
  FF_RETURN_IF_ERROR(ScanAll(t, "w/", "sessions", observe, [&](const auto& key, const auto&) {
    snap.settling.insert(ReadBE8(key, 2));
    return Status::Ok();
  }));
  if (kv_->serial()) {
    FF_ASSIGN_OR_RETURN(auto counted, t.Read<fs3rpc::Counter>("m/inodes"));
    snap.inode_count = counted ? counted->value() : 0;
  }
  FF_ASSIGN_OR_RETURN(snap.next_ino, t.StoredNextIno());
  return snap;
}

std::vector<MetaStore::FsckFinding> MetaStore::FindProblems(const FsckSnapshot& snap, bool serial) {
  std::vector<FsckFinding> out;
  auto found = [&](std::string problem, std::function<Result<bool>(Txn&)> repair) {
    out.push_back({std::move(problem), std::move(repair)});
  };
  auto bytes_of = [&](uint64_t ino) -> std::optional<std::string> {
    auto it = snap.inode_bytes.find(ino);
    return it == snap.inode_bytes.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  // The inode as the snapshot had it, still: then nothing linked, unlinked, opened through a
  // count, renamed or resized it since (each of those writes the inode).
  auto inode_as_seen = [bytes_of](Txn& t, uint64_t ino) {
    return Unchanged(t, InodeKey(ino), bytes_of(ino));
  };
  // A repair that makes `change` while the inode is as the snapshot had it.
  auto if_inode_as_seen = [inode_as_seen](uint64_t ino, std::function<void(Txn&)> change) {
    return [=](Txn& t) -> Result<bool> {
      FF_ASSIGN_OR_RETURN(bool same, inode_as_seen(t, ino));
      if (!same) return false;
      change(t);
      FF_RETURN_IF_ERROR(t.Commit());
      return true;
    };
  };
  auto name_of = [](uint64_t parent, const std::string& name) {
    return "entry '" + name + "' in directory " + std::to_string(parent);
  };

  std::map<uint64_t, uint32_t> links;    // entries pointing at each inode
  std::map<uint64_t, uint32_t> subdirs;  // directories under each directory
  std::map<uint64_t, uint64_t> dir_parent;
  for (const FsckSnapshot::Entry& e : snap.entries) {
    const std::string key = DentryKey(e.parent, e.name);
    auto it = snap.inodes.find(e.dentry.ino());
    if (it == snap.inodes.end()) {
      found(
          name_of(e.parent, e.name) + " points at missing inode " + std::to_string(e.dentry.ino()),
          [=, bytes = e.bytes](Txn& t) -> Result<bool> {
            FF_ASSIGN_OR_RETURN(bool same, Unchanged(t, key, bytes));
            FF_ASSIGN_OR_RETURN(bool gone, Unchanged(t, InodeKey(e.dentry.ino()), std::nullopt));
            if (!same || !gone) return false;
            t.DeleteDentry(e.parent, e.name);
            FF_RETURN_IF_ERROR(t.Commit());
            return true;
          });
      continue;
    }
    if (e.dentry.type() != it->second.type()) {
      Dentry fixed = e.dentry;
      fixed.set_type(it->second.type());
      const uint64_t ino = e.dentry.ino();
      found(name_of(e.parent, e.name) + " has the wrong type",
            [=, bytes = e.bytes](Txn& t) -> Result<bool> {
              FF_ASSIGN_OR_RETURN(bool same, Unchanged(t, key, bytes));
              FF_ASSIGN_OR_RETURN(bool inode_same, inode_as_seen(t, ino));
              if (!same || !inode_same) return false;
              t.PutDentry(e.parent, e.name, fixed);
              FF_RETURN_IF_ERROR(t.Commit());
              return true;
            });
    }
    ++links[e.dentry.ino()];
    if (it->second.type() == fs3rpc::INODE_DIR) {
      ++subdirs[e.parent];
      dir_parent[e.dentry.ino()] = e.parent;
    }
  }
  for (const std::string& key : snap.session_keys) {
    const uint64_t ino = ReadBE8(key, 2);
    if (snap.inodes.count(ino) > 0) continue;
    found("a session of client " + std::to_string(ReadBE8(key, 10)) + " holds missing inode " +
              std::to_string(ino),
          [=](Txn& t) -> Result<bool> {
            FF_ASSIGN_OR_RETURN(bool gone, Unchanged(t, InodeKey(ino), std::nullopt));
            if (!gone) return false;
            t.DeleteKey(key);
            FF_RETURN_IF_ERROR(t.Commit());
            return true;
          });
  }
  uint64_t max_ino = kRootIno;
  for (const auto& entry : snap.inodes) {
    const uint64_t ino = entry.first;  // not a structured binding: the repairs capture it
    const Inode& inode = entry.second;
    max_ino = std::max(max_ino, ino);
    const uint32_t n = links.count(ino) ? links.at(ino) : 0;
    if (inode.type() == fs3rpc::INODE_DIR) {
      if (ino != kRootIno && n == 0) {
        found("directory inode " + std::to_string(ino) + " is unreachable",
              if_inode_as_seen(ino, [ino](Txn& t) { t.DeleteInode(ino); }));
        continue;
      }
      const uint32_t want = 2 + (subdirs.count(ino) ? subdirs.at(ino) : 0);
      const uint64_t parent = dir_parent.count(ino) ? dir_parent.at(ino) : 0;
      const bool wrong_links = inode.nlink() != want;
      const bool wrong_parent = ino != kRootIno && inode.parent() != parent;
      if (!wrong_links && !wrong_parent) continue;
      Inode fixed = inode;
      std::string problem;
      if (wrong_links) {
        problem = "directory inode " + std::to_string(ino) + " has link count " +
                  std::to_string(inode.nlink()) + ", should be " + std::to_string(want);
        fixed.set_nlink(want);
      }
      if (wrong_parent) {
        problem += (problem.empty() ? "" : "; ") +
                   ("directory inode " + std::to_string(ino) + " records the wrong parent");
        fixed.set_parent(parent);
      }
      found(problem, if_inode_as_seen(ino, [fixed](Txn& t) { t.PutInode(fixed); }));
      continue;
    }
    const bool open = inode.sessions() > 0 || snap.open_inos.count(ino) > 0;
    const bool marked = snap.marked.count(ino) > 0;
    if (n == 0 && open && !marked) {
      found("inode " + std::to_string(ino) +
                " is unlinked and open but not marked to go at its last close",
            [=](Txn& t) -> Result<bool> {
              FF_ASSIGN_OR_RETURN(bool same, inode_as_seen(t, ino));
              if (!same) return false;
              FF_ASSIGN_OR_RETURN(bool marked_now, t.Orphaned(ino));
              if (marked_now) return true;  // marked meanwhile: what the repair would do
              t.MarkOrphan(ino);
              FF_RETURN_IF_ERROR(t.Commit());
              return true;
            });
    }
    if (n == 0 && !open && marked) continue;  // the sweep's to reclaim
    if (n == 0 && !open) {
      found("inode " + std::to_string(ino) + " is orphaned (no entry, not open)",
            [=](Txn& t) -> Result<bool> {
              FF_ASSIGN_OR_RETURN(bool same, inode_as_seen(t, ino));
              if (!same) return false;
              FF_ASSIGN_OR_RETURN(Inode now, t.GetInode(ino));
              FF_ASSIGN_OR_RETURN(bool opened, t.IsOpen(now));
              if (opened) return false;
              t.DeleteInode(ino);
              if (now.type() == fs3rpc::INODE_FILE) t.AddGarbage(ino, now.layout());
              FF_RETURN_IF_ERROR(t.Commit());
              return true;
            });
      continue;
    }
    if (inode.nlink() != n) {
      Inode fixed = inode;
      fixed.set_nlink(n);
      found("inode " + std::to_string(ino) + " has link count " + std::to_string(inode.nlink()) +
                ", entries say " + std::to_string(n),
            if_inode_as_seen(ino, [fixed](Txn& t) { t.PutInode(fixed); }));
    }
  }
  for (uint64_t ino : snap.marked) {
    auto it = snap.inodes.find(ino);
    if (it != snap.inodes.end() && links[ino] == 0) continue;
    found("inode " + std::to_string(ino) + " is marked unlinked but " +
              (it == snap.inodes.end() ? "is gone" : "has entries"),
          if_inode_as_seen(ino, [ino](Txn& t) { t.UnmarkOrphan(ino); }));
  }
  if (serial && snap.inode_count && *snap.inode_count != snap.inodes.size()) {
    // The count is kept by the serial engine alone, in the transactions that add and remove
    // inodes: what it missed at the snapshot it still misses, whatever happened since.
    const int64_t missed =
        static_cast<int64_t>(snap.inodes.size()) - static_cast<int64_t>(*snap.inode_count);
    found("the inode count (" + std::to_string(*snap.inode_count) + ") is not " +
              std::to_string(snap.inodes.size()),
          [=](Txn& t) -> Result<bool> {
            FF_ASSIGN_OR_RETURN(auto counted, t.Read<fs3rpc::Counter>("m/inodes"));
            const int64_t now = counted ? static_cast<int64_t>(counted->value()) : 0;
            t.SetInodeCount(static_cast<uint64_t>(std::max<int64_t>(0, now + missed)));
            FF_RETURN_IF_ERROR(t.Commit());
            return true;
          });
  }
  const uint64_t next = std::max<uint64_t>(snap.next_ino, kRootIno + 1);
  if (next <= max_ino) {
    found("the inode counter (" + std::to_string(next) + ") is not past inode " +
              std::to_string(max_ino),
          [=](Txn& t) -> Result<bool> {
            FF_ASSIGN_OR_RETURN(uint64_t now, t.StoredNextIno());
            if (now > max_ino) return true;  // moved past it meanwhile
            t.SetStoredNextIno(max_ino + 1);
            FF_RETURN_IF_ERROR(t.Commit());
            return true;
          });
  }
  return out;
}

Result<MetaStore::FsckReport> MetaStore::Mend(std::vector<FsckFinding> findings, bool repair,
                                              const FsckObserver& observe) {
  FsckReport report;
  for (const FsckFinding& f : findings)
    report.problems.push_back(f.problem);
  if (!repair) return report;
  uint64_t tried = 0;
  for (FsckFinding& f : findings) {
    FF_ASSIGN_OR_RETURN(bool mended, Update([&](Txn& t) { return f.repair(t); }));
    ++(mended ? report.repaired : report.left);
    if (observe && ++tried % 256 == 0) {
      observe({.phase = "repairing", .done = tried, .found = findings.size()});
    }
  }
  return report;
}

Result<MetaStore::FsckSnapshot> MetaStore::ReadFsckSnapshotAgain(
    const FsckObserver& observe) const {
  // On etcd the snapshot is a revision, which compaction may take away under a long check: a
  // read of it then fails with kAborted, and the check starts over at a new one.
  for (int attempt = 0;; ++attempt) {
    auto snap = ReadFsckSnapshot(observe);
    if (snap.ok() || snap.status().code() != StatusCode::kAborted || attempt == 2) return snap;
  }
}

Result<MetaStore::FsckReport> MetaStore::Fsck(bool repair, const FsckObserver& observe) {
  FF_ASSIGN_OR_RETURN(FsckSnapshot snap, ReadFsckSnapshotAgain(observe));
  auto findings = FindProblems(snap, kv_->serial());
  if (observe) observe({.phase = "checking", .done = snap.inodes.size(), .found = findings.size()});
  return Mend(std::move(findings), repair, observe);
}

Result<MetaStore::FsckReport> MetaStore::CheckData(const std::map<uint64_t, uint64_t>& stored,
                                                   bool repair, const FsckObserver& observe) {
  FF_ASSIGN_OR_RETURN(FsckSnapshot snap, ReadFsckSnapshotAgain(observe));
  std::vector<FsckFinding> findings;
  for (const auto& entry : stored) {
    const uint64_t ino = entry.first;  // not a structured binding: the repairs capture it
    const uint64_t length = entry.second;
    auto it = snap.inodes.find(ino);
    if (it == snap.inodes.end()) {
      if (snap.garbage.count(ino) > 0) continue;  // deletion under way
      // Only a file that is surely gone makes its chunks garbage: gone still, and not queued.
      findings.push_back(
          {"chunks of inode " + std::to_string(ino) + " (" + std::to_string(length) +
               " bytes) belong to no file",
           [ino](Txn& t) -> Result<bool> {
             FF_ASSIGN_OR_RETURN(bool gone, Unchanged(t, InodeKey(ino), std::nullopt));
             FF_ASSIGN_OR_RETURN(bool unqueued, Unchanged(t, GarbageKey(ino), std::nullopt));
             if (!gone) return false;
             if (!unqueued) return true;  // queued meanwhile: what the repair would do
             t.AddGarbage(ino);
             FF_RETURN_IF_ERROR(t.Commit());
             return true;
           }});
      continue;
    }
    const Inode& inode = it->second;
    // An open file's length is settled by its close; one whose writer went without closing (or
    // whose write failed) by fs3-meta's sweep (MetaStore::DueSettles).
    const bool open =
        inode.sessions() > 0 || snap.open_inos.count(ino) > 0 || snap.settling.count(ino) > 0;
    if (inode.type() != fs3rpc::INODE_FILE || open || length <= inode.size()) continue;
    Inode fixed = inode;
    fixed.set_size(length);
    findings.push_back({"inode " + std::to_string(ino) + " holds " + std::to_string(length) +
                            " bytes of data but records a length of " +
                            std::to_string(inode.size()),
                        [ino, fixed, bytes = snap.inode_bytes.at(ino)](Txn& t) -> Result<bool> {
                          // Unchanged (not truncated, written or opened through a count since), no
                          // session and no settle mark now.
                          FF_ASSIGN_OR_RETURN(bool same, Unchanged(t, InodeKey(ino), bytes));
                          if (!same) return false;
                          FF_ASSIGN_OR_RETURN(bool opened, t.IsOpen(fixed));
                          FF_ASSIGN_OR_RETURN(bool settling, t.Settling(ino));
                          if (opened || settling) return false;
                          t.PutInode(fixed);
                          FF_RETURN_IF_ERROR(t.Commit());
                          return true;
                        }});
  }
  if (observe) observe({.phase = "data", .done = stored.size(), .found = findings.size()});
  return Mend(std::move(findings), repair, observe);
}

}  // namespace ff::fs3

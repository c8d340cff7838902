// fs3-meta's store: the consistency check of the namespace (and, with storage's lengths, of
// the data), with repair.
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "meta_store_internal.h"

namespace ff::fs3 {

Result<std::vector<std::string>> MetaStore::CheckData(const std::map<uint64_t, uint64_t>& stored,
                                                      bool repair) {
  return Run([&](Txn& t) -> Result<std::vector<std::string>> {
    std::vector<std::string> problems;
    for (const auto& [ino, length] : stored) {
      auto inode = t.GetInode(ino);
      // Only a file that is surely gone makes its chunks garbage: a failed read stops the check
      // (a repair would otherwise delete a live file's data).
      if (!inode.ok() && inode.status().code() != StatusCode::kNotFound) return inode.status();
      if (!inode.ok()) {
        FF_ASSIGN_OR_RETURN(auto queued, t.Read<fs3rpc::Layout>(GarbageKey(ino)));
        if (queued) continue;  // deletion under way
        problems.push_back("chunks of inode " + std::to_string(ino) + " (" +
                           std::to_string(length) + " bytes) belong to no file");
        if (repair) t.AddGarbage(ino);
        continue;
      }
      // An open file's length is settled by its close; one whose writer went without closing
      // (or whose write failed) by fs3-meta's sweep (MetaStore::DueSettles).
      FF_ASSIGN_OR_RETURN(bool open, t.IsOpen(*inode));
      if (!open && length > inode->size()) {
        FF_ASSIGN_OR_RETURN(open, t.Settling(ino));
      }
      if (inode->type() == fs3rpc::INODE_FILE && !open && length > inode->size()) {
        problems.push_back("inode " + std::to_string(ino) + " holds " + std::to_string(length) +
                           " bytes of data but records a length of " +
                           std::to_string(inode->size()));
        if (repair) {
          inode->set_size(length);
          t.PutInode(*inode);
        }
      }
    }
    if (repair && !problems.empty()) FF_RETURN_IF_ERROR(t.Commit());
    return problems;
  });
}

Result<std::vector<std::string>> MetaStore::Fsck(bool repair) {
  bool deferred = false;
  FF_ASSIGN_OR_RETURN(auto problems, FsckPass(repair, &deferred));
  // Repairs that did not fit in one transaction: further passes apply the rest.
  for (int pass = 1; deferred; ++pass) {
    if (pass >= 100000) return Internal("fsck: repairs still left after 100000 passes");
    FF_RETURN_IF_ERROR(FsckPass(true, &deferred).status());
  }
  return problems;
}

Result<std::vector<std::string>> MetaStore::FsckPass(bool repair, bool* deferred) {
  return Run([&](Txn& t) -> Result<std::vector<std::string>> {
    // One etcd transaction holds at most --max-txn-ops keys: at most kRepairsPerPass repairs go
    // in one (each writes at most three keys); the rest wait for the next pass.
    std::size_t budget = kv_->serial() ? SIZE_MAX : kRepairsPerPass;
    *deferred = false;
    auto fix = [&] {
      if (!repair) return false;
      if (budget == 0) {
        *deferred = true;
        return false;
      }
      --budget;
      return true;
    };
    std::vector<std::string> problems;
    std::map<uint64_t, Inode> inodes;
    FF_ASSIGN_OR_RETURN(auto inode_rows, t.Scan("i/", "", SIZE_MAX));
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
    FF_ASSIGN_OR_RETURN(auto dentry_rows, t.Scan("d/", "", SIZE_MAX));
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
        if (fix()) t.DeleteDentry(parent, name);
        continue;
      }
      if (d.type() != it->second.type()) {
        problems.push_back(name_of(parent, name) + " has the wrong type");
        if (fix()) {
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
    // Sessions (keys of clients' sessions) and the marks of files unlinked while open.
    std::set<uint64_t> open_inos;
    FF_ASSIGN_OR_RETURN(auto session_rows, t.Scan("s/", "", SIZE_MAX));
    for (const auto& [key, bytes] : session_rows) {
      const uint64_t ino = ReadBE8(key, 2);
      if (inodes.count(ino) == 0) {
        problems.push_back("a session of client " + std::to_string(ReadBE8(key, 10)) +
                           " holds missing inode " + std::to_string(ino));
        if (fix()) t.DeleteKey(key);
        continue;
      }
      open_inos.insert(ino);
    }
    std::set<uint64_t> marked;
    FF_ASSIGN_OR_RETURN(auto orphan_rows, t.Scan("o/", "", SIZE_MAX));
    for (const auto& [key, bytes] : orphan_rows)
      marked.insert(ReadBE8(key, 2));
    uint64_t max_ino = kRootIno;
    for (auto& [ino, inode] : inodes) {
      max_ino = std::max(max_ino, ino);
      const uint32_t n = links[ino];
      bool changed = false;
      if (inode.type() == fs3rpc::INODE_DIR) {
        if (ino != kRootIno && n == 0) {
          problems.push_back("directory inode " + std::to_string(ino) + " is unreachable");
          if (fix()) t.DeleteInode(ino);
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
          problems.push_back("directory inode " + std::to_string(ino) +
                             " records the wrong parent");
          inode.set_parent(dir_parent[ino]);
          changed = true;
        }
      } else {
        const bool open = inode.sessions() > 0 || open_inos.count(ino) > 0;
        if (n == 0 && open && marked.count(ino) == 0) {
          problems.push_back("inode " + std::to_string(ino) +
                             " is unlinked and open but not marked to go at its last close");
          if (fix()) t.MarkOrphan(ino);
        }
        if (n == 0 && !open && marked.count(ino) > 0) continue;  // the sweep's to reclaim
        if (n == 0 && !open) {
          problems.push_back("inode " + std::to_string(ino) + " is orphaned (no entry, not open)");
          if (fix()) {
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
      if (changed && fix()) t.PutInode(inode);
    }
    for (uint64_t ino : marked) {
      auto it = inodes.find(ino);
      if (it == inodes.end() || links[ino] > 0) {
        problems.push_back("inode " + std::to_string(ino) + " is marked unlinked but " +
                           (it == inodes.end() ? "is gone" : "has entries"));
        if (fix()) t.UnmarkOrphan(ino);
      }
    }
    uint64_t live = 0;
    for (const auto& [ino, inode] : inodes)
      live += !t.Deleted(ino);  // as repaired
    if (kv_->serial()) {        // the optimistic engine keeps no count (it counts keys)
      FF_ASSIGN_OR_RETURN(auto counted, t.Read<fs3rpc::Counter>("m/inodes"));
      const uint64_t n = counted ? counted->value() : 0;
      if (n != inodes.size()) {  // as found, before any repair
        problems.push_back("the inode count (" + std::to_string(n) + ") is not " +
                           std::to_string(inodes.size()));
      }
      t.SetInodeCount(live);
    }
    FF_ASSIGN_OR_RETURN(uint64_t stored_next, t.StoredNextIno());
    const uint64_t next = std::max<uint64_t>(stored_next, kRootIno + 1);
    if (next <= max_ino) {
      problems.push_back("the inode counter (" + std::to_string(next) + ") is not past inode " +
                         std::to_string(max_ino));
      if (fix()) t.SetStoredNextIno(max_ino + 1);
    }
    if (repair && !problems.empty()) FF_RETURN_IF_ERROR(t.Commit());
    return problems;
  });
}

}  // namespace ff::fs3

// fs3's namespace: inodes and directory entries in a transactional key-value store
// (common/txn_kv.h), every operation one transaction, in one of two engines: RocksDB (one
// server; operations serialised, each one atomic batch, group-committed) or etcd (any number of
// fs3-meta servers over one namespace; optimistic transactions, an operation that conflicts with
// another runs again), with POSIX
// semantics: permission checks by uid / gid / supplementary groups / mode bits / sticky bit,
// nanosecond timestamps updated as POSIX says, link counts, unlink of open files (the inode
// lives until its last session closes, then goes to the garbage list whose chunks a collector
// deletes), rename with replace / RENAME_NOREPLACE / RENAME_EXCHANGE and no directory moved under
// itself, idempotent create (a retried request returns what it created).
//
// Errors carry the POSIX errno's code (kNotFound = ENOENT, kAlreadyExists = EEXIST, ...).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/proto_db.h"
#include "common/thread_annotations.h"
#include "common/txn_kv.h"
#include "fs3/permissions.h"
#include "fs3/proto/meta.pb.h"

namespace ff::fs3 {

// setattr: the fields to change.
struct SetAttr {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid, gid;
  std::optional<uint64_t> size;
  std::optional<int64_t> atime_ns, mtime_ns;  // explicit times
  bool atime_now = false, mtime_now = false;  // utimensat(UTIME_NOW)
  // ftruncate on a descriptor opened for writing: permission was decided at open.
  bool through_writable_handle = false;
};

constexpr std::size_t kMaxXattrValueBytes = 64 * 1024;

// An open file's session: its owner, a client that holds a lease (MetaStore::KeepClient), and the
// client's number for it. Client 0: an anonymous session, counted in the inode, that only its
// close ends.
struct SessionId {
  uint64_t client = 0;
  uint64_t handle = 0;
};

class MetaStore {
 public:
  using Dirs = std::vector<fs3rpc::Inode>;
  // Opens (creating, with a root directory owned by root, mode 0755) the namespace at `path`.
  // `default_layout` is the root's layout; directories pass theirs to what is created in them.
  static Result<std::unique_ptr<MetaStore>> Open(const std::string& path,
                                                 const fs3rpc::Layout& default_layout);
  // The namespace under `prefix` in etcd, shared by every server that opens it.
  static Result<std::unique_ptr<MetaStore>> OpenEtcd(etcd::Client* client,
                                                     const std::string& prefix,
                                                     const fs3rpc::Layout& default_layout);
  // Over a store already made (tests); creates the root when missing.
  // (`etcd`: the etcd engine's client, for clients' leases.)
  static Result<std::unique_ptr<MetaStore>> OpenKv(std::unique_ptr<TxnKv> kv,
                                                   const fs3rpc::Layout& default_layout,
                                                   etcd::Client* etcd = nullptr);
  // "rocksdb" or "etcd".
  const char* engine() const { return kv_->engine(); }

  Result<fs3rpc::Inode> GetAttr(uint64_t ino) const;
  // Several inodes in one transaction (readdir's attributes); nullopt for one that is gone.
  Result<std::vector<std::optional<fs3rpc::Inode>>> GetAttrs(
      const std::vector<uint64_t>& inos) const;
  Result<fs3rpc::Inode> Lookup(const Caller& c, uint64_t parent, const std::string& name) const;

  // Operations on entries give, in `dirs` (when not null), the directories they changed as they
  // left them (none for a retried request answered from its record).
  Result<fs3rpc::Inode> Mkdir(const Caller& c, uint64_t parent, const std::string& name,
                              uint32_t mode, uint64_t request_id = 0, Dirs* dirs = nullptr);
  // A regular file (or, with `type`, a FIFO / socket / device node with `rdev`). With
  // `request_id` != 0, a retry of the same request returns the inode it created. With `open`,
  // the file is created with a session open (create + open in one step). A file's layout is its
  // directory's (chunk size, stripe) with `stripe` of `chain_ids` (the storage chains) as the
  // chains its chunks rotate over; with no chain ids, no chains (the default placement).
  Result<fs3rpc::Inode> Create(const Caller& c, uint64_t parent, const std::string& name,
                               uint32_t mode, uint64_t request_id = 0,
                               fs3rpc::InodeType type = fs3rpc::INODE_FILE, uint64_t rdev = 0,
                               bool open = false, const std::vector<uint32_t>& chain_ids = {},
                               SessionId session = {}, Dirs* dirs = nullptr);
  // A directory's stripe (chains per file) for what is created in it from now on (the owner or
  // root); subdirectories made later inherit it.
  Result<fs3rpc::Inode> SetStripe(const Caller& c, uint64_t ino, uint32_t stripe);
  Result<fs3rpc::Inode> Symlink(const Caller& c, uint64_t parent, const std::string& name,
                                const std::string& target, uint64_t request_id = 0,
                                Dirs* dirs = nullptr);
  Result<std::string> Readlink(uint64_t ino) const;
  // Mutations with a `request_id` (!= 0) are applied once: the id is recorded in the same batch,
  // and a retry (even after a restart) gets success without applying it again.
  Result<fs3rpc::Inode> Link(const Caller& c, uint64_t ino, uint64_t parent,
                             const std::string& name, uint64_t request_id = 0,
                             Dirs* dirs = nullptr);
  Status Unlink(const Caller& c, uint64_t parent, const std::string& name, uint64_t request_id = 0,
                Dirs* dirs = nullptr);
  Status Rmdir(const Caller& c, uint64_t parent, const std::string& name, uint64_t request_id = 0,
               Dirs* dirs = nullptr);
  Status Rename(const Caller& c, uint64_t src_parent, const std::string& src_name,
                uint64_t dst_parent, const std::string& dst_name, uint32_t flags = 0,
                uint64_t request_id = 0, Dirs* dirs = nullptr);
  // Forgets request ids recorded more than `max_age_s` seconds ago; returns how many.
  Result<std::size_t> PruneRequests(uint64_t max_age_s);

  // chmod / chown / truncate / utimens with POSIX's rules: mode by the owner or root (setgid
  // dropped when the owner is not in the group); uid by root only; gid by root or the owner to
  // one of their groups (clearing setuid/setgid on files); size needs write permission; explicit
  // times need ownership, "now" needs ownership or write permission. ctime always moves.
  Result<fs3rpc::Inode> SetAttributes(const Caller& c, uint64_t ino, const SetAttr& attr);

  // Extended attributes, any namespace ("user.", "trusted." root only, "security.", "system.").
  Status SetXattr(const Caller& c, uint64_t ino, const std::string& name, const std::string& value,
                  uint32_t flags = 0);
  Result<std::string> GetXattr(const Caller& c, uint64_t ino, const std::string& name) const;
  Result<std::vector<std::string>> ListXattrs(const Caller& c, uint64_t ino) const;
  Status RemoveXattr(const Caller& c, uint64_t ino, const std::string& name);

  // Up to `limit` entries after `cursor` (a name; "" from the start), in name order.
  Result<std::vector<DirEntry>> Readdir(const Caller& c, uint64_t ino, const std::string& cursor,
                                        std::size_t limit) const;

  // Durability. An operation returns once applied and logged (it survives a kill of the
  // process); AwaitDurable returns once every change applied so far is on disk, so a server
  // calls it after each operation before it answers (reads too: what they saw must not vanish in
  // a crash). Concurrent operations share one sync instead of holding the lock through one each.
  Status AwaitDurable() const { return kv_->AwaitDurable(needed_); }
  // Syncs everything logged so far (the changes not waited for, such as closes, too), and the key
  // writes logged and not yet on disk: what a crash of the machine now would lose (0 on etcd).
  Status SyncAll() const { return kv_->SyncAll(); }
  uint64_t UnsyncedWrites() const { return kv_->UnsyncedWrites(); }
  // Transactions committed and log syncs made for them since Open (their ratio: how many
  // operations share a sync; no syncs on etcd, where a commit is durable when it returns), and
  // transactions run again after a conflict (etcd).
  uint64_t LoggedBatches() const { return kv_->Commits(); }
  uint64_t LogSyncs() const { return kv_->LogSyncs(); }
  uint64_t Conflicts() const { return kv_->Conflicts(); }
  // Operations whose commit shared one etcd request with others (group commit).
  uint64_t GroupedCommits() const { return kv_->GroupedCommits(); }

  // Sessions: an open file keeps its inode after unlink until its last session ends (closed, or
  // its client's lease expired). Returns the inode.
  Result<fs3rpc::Inode> OpenSession(uint64_t ino, SessionId session = {});
  // Closes a session; `size` (if set) is a length the file has at least (what the closing
  // client wrote up to): the recorded length grows to it. A close that only ends a session (the
  // length as it was, the file still linked) does not wait for the disk: lost in a crash of the
  // machine, the session stays until its client's lease ends it (an anonymous one stays, which
  // keeps an unlinked file's data, never loses any). A client's session already gone (its lease
  // expired) closes without error.
  Status CloseSession(uint64_t ino, std::optional<uint64_t> size, SessionId session = {});

  // Clients' leases: a client registers (`first`) and then renews within the lease's time, or
  // its sessions end. Returns the lease's length in seconds. kNotFound when the client's lease
  // had expired (its sessions ended; it registers again as a new client).
  Result<uint32_t> KeepClient(uint64_t client, bool first);
  // How long a client's lease lasts (default 30 s).
  void set_client_lease_s(uint32_t s) { client_lease_s_ = s; }
  // The sweep (the garbage collector runs it): ends the sessions of clients whose lease ran out
  // (the serial engine; etcd ends them itself), and sends an unlinked file whose sessions all
  // ended to the garbage list. Returns how many sessions and files it ended.
  Result<std::size_t> EndExpiredSessions();

  // A file's length as its data says (close, fsync): grows the recorded length to `length`;
  // `written` (data was written) moves mtime and ctime; `stored_bytes`, when storage was asked,
  // records what the data stores (Inode.stored_bytes).
  Result<fs3rpc::Inode> SettleLength(uint64_t ino, uint64_t length, bool written = false,
                                     std::optional<uint64_t> stored_bytes = std::nullopt);

  // Lengths to settle from storage later. A client's session leaves a mark that its close
  // removes; a session that ends otherwise (its client's lease expired: a mount killed, a
  // process gone) leaves the mark behind, and what it wrote may lie past the recorded length.
  // A write that failed may also still commit in its chain after its client gave up (a
  // successor's retries outlast it): MarkRecheck asks for the length to be settled again at
  // `at_unix_s`. fs3-meta's sweep takes the due marks (DueSettles), settles the files' lengths
  // from storage and then drops each mark (SettleDone). fsck leaves a marked file's length alone.
  struct SettleMark {
    uint64_t ino = 0;
    SessionId session;       // {0, 0}: a recheck
    std::string key;         // as stored (SettleDone drops it only if unchanged)
    uint64_t at_unix_s = 0;  // a recheck's time
  };
  Status MarkRecheck(uint64_t ino, uint64_t at_unix_s);
  // Up to `max` due marks after the key `after` (a cursor: the last key of the previous call's
  // page; "" from the start); `next` gets the cursor for the following call ("" at the end).
  Result<std::vector<SettleMark>> DueSettles(const std::string& after, std::size_t max,
                                             std::string* next);
  // Drops `mark`, settled; a session's mark becomes a recheck at `recheck_at_unix_s` (0: none).
  Status SettleDone(const SettleMark& mark, uint64_t recheck_at_unix_s);
  // Live inodes (statfs).
  Result<uint64_t> InodeCount() const;

  // Inodes whose data awaits deletion (unlinked, no sessions); Forget removes one from the list.
  Result<std::vector<uint64_t>> Garbage() const;
  // Where a garbage inode's chunks are (its layout; no chains: unknown, every chain).
  Result<fs3rpc::Layout> GarbageLayout(uint64_t ino) const;
  Status Forget(uint64_t ino);

  // fsck. The check reads one snapshot of the namespace (TxnKv::BeginSnapshot: it holds no lock,
  // so every other operation runs as usual meanwhile, on either engine), one pass over each kind
  // of record. Each repair is a transaction of its own that first reads again what it mends and
  // goes ahead only while that is still as the snapshot showed it; a record changed since is left
  // alone (`left`), for the next check to judge: a change made during the check is never
  // "repaired". `observe`, when given, hears of the check's progress (on the calling thread).
  struct FsckProgress {
    std::string phase;   // "inodes", "entries", "sessions", "checking", "repairing", "data"
    uint64_t done = 0;   // records read (or repairs tried) in this phase so far
    uint64_t found = 0;  // problems found so far
  };
  using FsckObserver = std::function<void(const FsckProgress&)>;
  struct FsckReport {
    std::vector<std::string> problems;  // one line per problem found
    uint64_t repaired = 0;              // with repair: problems mended
    uint64_t left = 0;  // with repair: problems whose records changed during the check
  };
  // Checks that directory entries, inodes, link counts, parents, sessions, orphan marks and the
  // inode counters agree; with `repair`, mends what it finds (dangling entries removed, link
  // counts, parents and entry types corrected, unreachable or orphaned inodes removed and their
  // data queued for deletion, counters set).
  Result<FsckReport> Fsck(bool repair, const FsckObserver& observe = nullptr);

  // fsck against storage: `stored` maps each inode with chunks to the length they imply (asked of
  // storage before this is called). Chunks of no file (and not awaiting deletion) are reported,
  // and with `repair` queued for deletion; a closed file (no session, no length being settled)
  // whose chunks reach past its recorded length is reported, and with `repair` given that length
  // (the data is kept). The same snapshot and repairs as Fsck.
  Result<FsckReport> CheckData(const std::map<uint64_t, uint64_t>& stored, bool repair,
                               const FsckObserver& observe = nullptr);

 private:
  class Txn;
  explicit MetaStore(std::unique_ptr<TxnKv> kv, etcd::Client* etcd = nullptr)
      : kv_(std::move(kv)), etcd_(etcd) {}
  // Runs `op` (Txn& -> Status or Result<T>) as one transaction (again on a conflict), then
  // records what the answer must wait for (durability) and the inode numbers it reserved.
  template <typename F>
  auto Run(F&& op) const -> decltype(op(std::declval<Txn&>())) {
    return RunAs(/*update=*/false, op);
  }
  // The same for an operation that changes the namespace (reads served as TxnKv::RunUpdate's).
  // (`dirs`: the directories the committed transaction wrote, as it wrote them.)
  template <typename F>
  auto Update(F&& op, Dirs* dirs = nullptr) -> decltype(op(std::declval<Txn&>())) {
    return RunAs(/*update=*/true, op, dirs);
  }
  template <typename F>
  auto RunAs(bool update, F&& op, Dirs* dirs = nullptr) const -> decltype(op(std::declval<Txn&>()));
  // This server's reserved inode numbers: one, if any is left; a block given back.
  std::optional<uint64_t> TakeIno() const;
  void GiveInoBlock(uint64_t first, uint64_t end) const;
  void ResetInoPool() const;
  // One link to `inode` is gone: with none left (and no open session) the inode goes, and a
  // file's data is queued for deletion.
  static Status DropLink(Txn& t, fs3rpc::Inode inode, int64_t now);
  // fsck (meta_store_fsck.cc): a problem found in the snapshot, and its repair: a transaction
  // body that re-checks and mends (true), or finds the records changed and leaves them (false).
  struct FsckFinding {
    std::string problem;
    std::function<Result<bool>(Txn&)> repair;
  };
  struct FsckSnapshot;
  // Reads the namespace's records at one snapshot; ...Again starts over (up to three times) when
  // the snapshot went under it (an etcd revision compacted away).
  Result<FsckSnapshot> ReadFsckSnapshot(const FsckObserver& observe) const;
  Result<FsckSnapshot> ReadFsckSnapshotAgain(const FsckObserver& observe) const;
  // The problems in `snap`, in the order the check reports them (their repairs read `snap`: they
  // must not outlive it).
  static std::vector<FsckFinding> FindProblems(const FsckSnapshot& snap, bool serial);
  // Reports `findings` into a report and, with `repair`, runs each one's repair.
  Result<FsckReport> Mend(std::vector<FsckFinding> findings, bool repair,
                          const FsckObserver& observe);
  // A new entry `name` in directory `parent` with a fresh inode (mkdir, create, mknod, symlink).
  Result<fs3rpc::Inode> MakeEntry(const Caller& c, uint64_t parent, const std::string& name,
                                  fs3rpc::InodeType type, uint32_t mode, uint64_t request_id,
                                  uint64_t rdev, const std::string& symlink, bool open,
                                  const std::vector<uint32_t>& chain_ids, SessionId session,
                                  Dirs* dirs);

  std::unique_ptr<TxnKv> kv_;
  etcd::Client* const etcd_;  // the etcd engine's client (leases), else null
  uint32_t client_lease_s_ = 30;
  // Clients' leases: on etcd, each one's lease id (a cache of "c/" keys); on the serial engine,
  // when each expires (kept here only: after a restart, every client has one lease's time).
  mutable Mutex clients_mu_;
  std::map<uint64_t, int64_t> client_leases_ FF_GUARDED_BY(clients_mu_);
  std::map<uint64_t, std::chrono::steady_clock::time_point> client_deadlines_
      FF_GUARDED_BY(clients_mu_);
  // The newest batch that must be on disk before anything is acknowledged or read (group commit).
  mutable std::atomic<uint64_t> needed_{0};
  mutable Mutex ino_mu_;
  // [next, end): reserved, not yet used.
  mutable uint64_t ino_next_ FF_GUARDED_BY(ino_mu_) = 0;
  mutable uint64_t ino_end_ FF_GUARDED_BY(ino_mu_) = 0;
};

}  // namespace ff::fs3

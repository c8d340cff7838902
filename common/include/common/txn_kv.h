// A small transactional key-value interface (fs3-meta's namespace runs over it, as 3FS's meta
// servers run over FoundationDB), with two engines:
//
//   Serial (OpenSerial, over a ProtoDb, in practice RocksDB): one transaction at a time in this
//   process; Begin() waits for the previous one to end. No conflicts, group commit (Commit logs
//   the batch, AwaitDurable syncs it after the caller let go). One server: today's speed.
//
//   Optimistic (OpenEtcd): any number of transactions at once, in any number of processes. Reads
//   see one snapshot (the etcd revision of the transaction's first read) plus the transaction's
//   own writes; Commit is one etcd transaction that applies the writes only if no key the
//   transaction read has changed since (compared by mod revision; a key read as absent must still
//   be absent) and no key was added to or changed in a range it scanned. Otherwise Commit fails
//   with kAborted and the caller runs the operation again from the start (Run does). A commit
//   whose outcome is unknown (etcd did not answer in time) also fails with kAborted: running the
//   operation again is safe, because the comparisons refuse whichever of the two comes second.
//   Scans see additions and changes, not removals, as conflicts: a removal only makes a range
//   emptier. Commits that arrive while another is on its way to etcd go together as one etcd
//   transaction when no key one writes is read or written by another (group commit: etcd's cost
//   is mostly per request); when such a group's comparisons fail, each commit is tried alone.
//
//   Reads. A transaction begun for reading (Run) reads the newest state: its first read asks the
//   Raft leader (linearizable), the others read that revision from the member's own copy. One begun
//   for an update (RunUpdate) reads every key from the member's copy without asking the leader (a
//   round trip less), possibly a moment behind: that is sound because Commit compares every read
//   with the newest state, and an update that ends without committing a change (an error, or
//   nothing to do) is run again reading the newest state, so that no answer rests on a stale read.
//
// Thread-safe: each transaction is used by one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/proto_db.h"
#include "common/result.h"

namespace ff {
namespace etcd {
class Client;
}  // namespace etcd

class KvTxn {
 public:
  virtual ~KvTxn() = default;
  // A key's value as this transaction sees it (its own writes included); nullopt when absent.
  Result<std::optional<std::string>> Get(const std::string& key);
  // Several keys at once (one round trip on etcd, the transaction's first read included); each
  // nullopt when absent. A key read once is not read again: later Gets of it cost nothing, so an
  // operation can fetch every key it knows it will need in one GetMany first.
  Result<std::vector<std::optional<std::string>>> GetMany(const std::vector<std::string>& keys);
  // Up to `limit` keys starting with `prefix` and sorting after `after` ("": from the first), in
  // key order, as this transaction sees them (its own writes included).
  Result<std::vector<std::pair<std::string, std::string>>> Scan(const std::string& prefix,
                                                                const std::string& after,
                                                                std::size_t limit);
  // Whether `key` is absent, where absence is likely: the optimistic engine's first attempt
  // assumes it without reading (no round trip) and Commit checks it like a read (wrong: the
  // transaction conflicts and runs again, then reading it); the serial engine reads it.
  Result<bool> AssumeAbsent(const std::string& key);
  // The same for "no key starts with `prefix`".
  Result<bool> AssumeNoneUnder(const std::string& prefix);
  void Put(const std::string& key, std::string value) {
    writes_[key] = std::move(value);
    leases_.erase(key);
  }
  // A key that lives as long as an etcd lease (`lease`: its id): etcd deletes it when the lease
  // expires. The serial engine has no leases: there it is a plain Put.
  void PutLeased(const std::string& key, std::string value, int64_t lease) {
    writes_[key] = std::move(value);
    leases_[key] = lease;
  }
  void Delete(const std::string& key) {
    writes_[key] = std::nullopt;
    leases_.erase(key);
  }
  bool has_writes() const { return !writes_.empty(); }
  // Applies the writes at once, or fails (kAborted: conflict, run again). Returns a token for
  // TxnKv::AwaitDurable. A transaction without writes commits nothing and cannot conflict.
  virtual Result<uint64_t> Commit() = 0;
  // Which run of its operation this transaction is (0: the first; TxnKv::Run sets it).
  void set_attempt(int attempt) { attempt_ = attempt; }

 protected:
  // Records `key` as absent in the snapshot, unread (AssumeAbsent); false where this engine
  // cannot check that at commit.
  virtual bool AssumeAbsentUnread(const std::string& key) {
    (void)key;
    return false;
  }
  virtual bool AssumeNoneUnderUnread(const std::string& prefix) {
    (void)prefix;
    return false;
  }
  // The committed state the transaction reads from (its snapshot), recorded for conflicts.
  virtual Result<std::optional<std::string>> ReadCommitted(const std::string& key) = 0;
  // The committed values of `keys` (the default: one by one).
  virtual Result<std::vector<std::optional<std::string>>> ReadCommittedMany(
      const std::vector<std::string>& keys);
  virtual Result<std::vector<std::pair<std::string, std::string>>> ScanCommitted(
      const std::string& prefix, const std::string& after, std::size_t limit) = 0;
  std::map<std::string, std::optional<std::string>> writes_;
  std::map<std::string, int64_t> leases_;  // keys written with PutLeased
  int attempt_ = 0;

 private:
  // Committed values read so far (the snapshot's), so that each key is read once.
  std::map<std::string, std::optional<std::string>> read_;
};

class TxnKv {
  static const Status& StatusOf(const Status& s) { return s; }
  template <typename T>
  static Status StatusOf(const Result<T>& r) {
    return r.status();
  }

 public:
  // The serial engine over `db` (which it owns).
  static std::unique_ptr<TxnKv> OpenSerial(std::unique_ptr<ProtoDb> db);
  // The optimistic engine: keys under `prefix` in etcd. `client` outlives the store.
  static Result<std::unique_ptr<TxnKv>> OpenEtcd(etcd::Client* client, std::string prefix);
  virtual ~TxnKv() = default;

  virtual const char* engine() const = 0;
  // Transactions run one at a time (the serial engine): nothing ever conflicts.
  virtual bool serial() const = 0;

  // `for_update`: see "Reads" above (the serial engine has one way of reading).
  virtual std::unique_ptr<KvTxn> Begin(bool for_update = false) = 0;
  // A read-only transaction over one consistent state that holds back no other transaction, for
  // long reads beside live traffic (fsck): the serial engine reads a RocksDB snapshot without
  // taking its lock (ProtoDb::Snapshot), the optimistic engine one etcd revision (a revision
  // compacted away meanwhile fails its reads with kAborted). Committing writes through it fails:
  // changes go in transactions of their own, which re-check what they change.
  virtual std::unique_ptr<KvTxn> BeginSnapshot() = 0;
  // How many keys start with `prefix` (committed state; the serial engine reads them all).
  virtual Result<uint64_t> CountKeys(const std::string& prefix) = 0;
  // Returns once what the transaction that gave `token` committed is durable (see above).
  virtual Status AwaitDurable(uint64_t token) = 0;
  // Syncs everything committed so far, and how many key writes are committed but not on disk
  // yet (the serial engine's log; nothing to do, and 0, on etcd).
  virtual Status SyncAll() { return Status::Ok(); }
  virtual uint64_t UnsyncedWrites() const { return 0; }

  // Transactions committed with writes, and those that conflicted and ran again (metrics).
  uint64_t Commits() const { return commits_; }
  uint64_t Conflicts() const { return conflicts_; }
  // Commits that shared one log sync (serial engine; 0 elsewhere).
  virtual uint64_t LogSyncs() const { return 0; }
  // Commits that went to etcd in one request with others (etcd engine; 0 elsewhere).
  virtual uint64_t GroupedCommits() const { return 0; }

  // Runs `op` (KvTxn& -> Status or Result<T>) in a transaction and commits it, again from the
  // start on a conflict, until it has tried `max_attempts` times and for kConflictPatience (each
  // conflict is another operation's progress: on a loaded machine a hot directory's operations
  // may lose many rounds in a row, and a count alone gave up on them); `op` returning an error
  // ends it without committing (kAborted: run again). The token of the commit goes to `*token`
  // when given.
  template <typename F>
  auto Run(F&& op, uint64_t* token = nullptr, int max_attempts = 64)
      -> decltype(op(std::declval<KvTxn&>())) {
    return RunAs(/*for_update=*/false, op, token, max_attempts);
  }
  // The same for an operation that means to change something (see "Reads" above).
  template <typename F>
  auto RunUpdate(F&& op, uint64_t* token = nullptr, int max_attempts = 64)
      -> decltype(op(std::declval<KvTxn&>())) {
    return RunAs(/*for_update=*/true, op, token, max_attempts);
  }

 protected:
  static constexpr std::chrono::seconds kConflictPatience{10};

  template <typename F>
  auto RunAs(bool for_update, F&& op, uint64_t* token, int max_attempts)
      -> decltype(op(std::declval<KvTxn&>())) {
    Status last;
    bool stale_ok = for_update && !serial();
    const auto patience = std::chrono::steady_clock::now() + kConflictPatience;
    int attempt = 0;
    for (; attempt < max_attempts || std::chrono::steady_clock::now() < patience; ++attempt) {
      std::unique_ptr<KvTxn> txn = Begin(stale_ok);
      txn->set_attempt(attempt);
      auto r = op(*txn);
      if (!StatusOf(r).ok()) {
        // A read at a revision compacted away: run again from a new one.
        if (StatusOf(r).code() != StatusCode::kAborted) {
          if (!stale_ok) return r;
          stale_ok = false;  // the answer rests on reads that may be behind: read the newest
          continue;
        }
        ++conflicts_;
        last = StatusOf(r);
        BackOff(attempt);
        continue;
      }
      if (stale_ok && !txn->has_writes()) {  // nothing to commit, so nothing checked the reads
        stale_ok = false;
        continue;
      }
      Result<uint64_t> committed = txn->Commit();
      if (committed.ok()) {
        if (txn->has_writes()) ++commits_;
        if (token) *token = *committed;
        return r;
      }
      if (committed.status().code() != StatusCode::kAborted) return committed.status();
      ++conflicts_;
      last = committed.status();
      BackOff(attempt);
    }
    return Status(StatusCode::kAborted, "gave up after " + std::to_string(attempt) +
                                            " conflicting attempts: " + last.message());
  }

  // After a conflict: a random pause growing with the attempts (up to 50 ms), so that operations
  // that keep colliding (one hot directory) spread out instead of retrying in step.
  static void BackOff(int attempt);
  std::atomic<uint64_t> commits_{0}, conflicts_{0};
};

}  // namespace ff

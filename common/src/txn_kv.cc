#include "common/txn_kv.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "common/etcd.h"
#include "common/thread_annotations.h"

namespace ff {

void TxnKv::BackOff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int64_t cap_us = std::min<int64_t>(50000, int64_t{500} << std::min(attempt, 7));
  std::uniform_int_distribution<int64_t> pause(0, cap_us);
  std::this_thread::sleep_for(std::chrono::microseconds(pause(rng)));
}

Result<std::optional<std::string>> KvTxn::Get(const std::string& key) {
  if (auto it = writes_.find(key); it != writes_.end()) return it->second;
  if (auto it = read_.find(key); it != read_.end()) return it->second;
  FF_ASSIGN_OR_RETURN(auto value, ReadCommitted(key));
  read_.emplace(key, value);
  return value;
}

Result<bool> KvTxn::AssumeAbsent(const std::string& key) {
  if (attempt_ == 0 && !writes_.count(key) && !read_.count(key) && AssumeAbsentUnread(key)) {
    read_.emplace(key, std::nullopt);
    return true;
  }
  FF_ASSIGN_OR_RETURN(auto value, Get(key));
  return !value.has_value();
}

Result<bool> KvTxn::AssumeNoneUnder(const std::string& prefix) {
  const bool own_writes = std::any_of(writes_.begin(), writes_.end(), [&](const auto& w) {
    return w.first.compare(0, prefix.size(), prefix) == 0;
  });
  if (attempt_ == 0 && !own_writes && AssumeNoneUnderUnread(prefix)) return true;
  FF_ASSIGN_OR_RETURN(auto rows, Scan(prefix, "", 1));
  return rows.empty();
}

Result<std::vector<std::optional<std::string>>> KvTxn::ReadCommittedMany(
    const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) {
    FF_ASSIGN_OR_RETURN(auto value, ReadCommitted(key));
    out.push_back(std::move(value));
  }
  return out;
}

Result<std::vector<std::optional<std::string>>> KvTxn::GetMany(
    const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> out(keys.size());
  std::vector<std::string> unread;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (auto it = writes_.find(keys[i]); it != writes_.end()) {
      out[i] = it->second;
    } else if (auto seen = read_.find(keys[i]); seen != read_.end()) {
      out[i] = seen->second;
    } else if (std::find(unread.begin(), unread.end(), keys[i]) == unread.end()) {
      unread.push_back(keys[i]);
    }
  }
  if (unread.empty()) return out;
  FF_ASSIGN_OR_RETURN(auto read, ReadCommittedMany(unread));
  for (std::size_t j = 0; j < read.size(); ++j)
    read_.emplace(unread[j], std::move(read[j]));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (writes_.count(keys[i]) == 0) out[i] = read_.at(keys[i]);
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> KvTxn::Scan(const std::string& prefix,
                                                                     const std::string& after,
                                                                     std::size_t limit) {
  // This transaction's writes in the range; each may hide one committed key, so as many more
  // committed keys are read as there are writes that could.
  auto in_range = [&](const std::string& key) {
    return key.compare(0, prefix.size(), prefix) == 0 && (after.empty() || key > after);
  };
  const std::string start = std::max(prefix, after);
  std::size_t slack = 0;
  for (auto it = writes_.lower_bound(start);
       it != writes_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    if (in_range(it->first)) ++slack;
  }
  const std::size_t want = limit > SIZE_MAX - slack ? SIZE_MAX : limit + slack;
  FF_ASSIGN_OR_RETURN(auto committed, ScanCommitted(prefix, after, want));
  if (slack == 0) return committed;
  std::map<std::string, std::string> merged(std::make_move_iterator(committed.begin()),
                                            std::make_move_iterator(committed.end()));
  const bool complete = committed.size() < want;
  const std::string last = committed.empty() ? "" : std::prev(merged.end())->first;
  for (auto it = writes_.lower_bound(start);
       it != writes_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    if (!in_range(it->first)) continue;
    // A key written past the last committed one read is only known to belong when the committed
    // range was read to its end.
    if (!complete && it->first > last) continue;
    if (it->second) {
      merged[it->first] = *it->second;
    } else {
      merged.erase(it->first);
    }
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& kv : merged) {
    if (out.size() >= limit) break;
    out.emplace_back(kv.first, std::move(kv.second));
  }
  return out;
}

namespace {

// ---- The serial engine -------------------------------------------------------------------

class SerialTxnKv;

class SerialTxn : public KvTxn {
 public:
  SerialTxn(ProtoDb& db, Mutex& mu) : db_(db), lock_(mu) {}
  Result<uint64_t> Commit() override {
    if (writes_.empty()) return uint64_t{0};
    std::vector<ProtoDb::RawWrite> kvs(writes_.begin(), writes_.end());
    return db_.WriteRawLogged(kvs);
  }

 protected:
  Result<std::optional<std::string>> ReadCommitted(const std::string& key) override {
    return db_.GetRaw(key);
  }
  Result<std::vector<std::pair<std::string, std::string>>> ScanCommitted(
      const std::string& prefix, const std::string& after, std::size_t limit) override {
    return db_.ScanKeys(prefix, after, limit);
  }

 private:
  ProtoDb& db_;
  // One transaction at a time, held until destroyed (a span the analysis cannot follow: the
  // engine's mu_ guards no member, it serializes transactions on the database).
  std::unique_lock<Mutex> lock_;
};

// A read-only transaction over a ProtoDb view (BeginSnapshot): no lock, nothing to commit.
class ViewTxn : public KvTxn {
 public:
  explicit ViewTxn(std::unique_ptr<ProtoDb::View> view) : view_(std::move(view)) {}
  Result<uint64_t> Commit() override {
    if (writes_.empty()) return uint64_t{0};
    return FailedPrecondition(
        "a snapshot is read-only: its writes go in a transaction of their own");
  }

 protected:
  Result<std::optional<std::string>> ReadCommitted(const std::string& key) override {
    return view_->GetRaw(key);
  }
  Result<std::vector<std::pair<std::string, std::string>>> ScanCommitted(
      const std::string& prefix, const std::string& after, std::size_t limit) override {
    return view_->ScanKeys(prefix, after, limit);
  }

 private:
  std::unique_ptr<ProtoDb::View> view_;
};

class SerialTxnKv : public TxnKv {
 public:
  explicit SerialTxnKv(std::unique_ptr<ProtoDb> db) : db_(std::move(db)) {}
  const char* engine() const override { return db_->engine(); }
  bool serial() const override { return true; }
  std::unique_ptr<KvTxn> Begin(bool) override { return std::make_unique<SerialTxn>(*db_, mu_); }
  std::unique_ptr<KvTxn> BeginSnapshot() override {
    auto view = db_->Snapshot();
    if (!view) return Begin(false);  // a store without snapshots: under the lock
    return std::make_unique<ViewTxn>(std::move(view));
  }
  Status AwaitDurable(uint64_t token) override { return db_->AwaitDurable(token); }
  Status SyncAll() override { return db_->SyncAll(); }
  uint64_t UnsyncedWrites() const override { return db_->UnsyncedWrites(); }
  Result<uint64_t> CountKeys(const std::string& prefix) override {
    uint64_t n = 0;
    std::string after;
    for (;;) {
      FF_ASSIGN_OR_RETURN(auto rows, db_->ScanKeys(prefix, after, 1000));
      n += rows.size();
      if (rows.size() < 1000) return n;
      after = rows.back().first;
    }
  }
  uint64_t LogSyncs() const override { return db_->GroupSyncs(); }

 private:
  std::unique_ptr<ProtoDb> db_;
  Mutex mu_;
};

// ---- The optimistic engine (etcd) -----------------------------------------------------------

// Commits on their way to etcd, grouped (see the header): one etcd transaction carries the
// comparisons and writes of several commits whose keys do not meet.
class GroupCommitter {
 public:
  struct Commit {
    etcdserverpb::TxnRequest txn;
    std::vector<std::string> reads, writes;                   // keys (with the prefix)
    std::vector<std::pair<std::string, std::string>> ranges;  // [from, to) scanned
    Result<uint64_t> result = uint64_t{0};
    bool done = false;  // guarded by the committer's mu_
  };

  explicit GroupCommitter(etcd::Client& client) : client_(client) {}
  uint64_t grouped() const { return grouped_; }

  // Commits `c` (alone or with others); kAborted when a comparison failed or the outcome is
  // unknown.
  Result<uint64_t> Run(Commit& c) FF_EXCLUDES(mu_) {
    UniqueLock lock(&mu_);
    queue_.push_back(&c);
    while (!c.done) {
      if (in_flight_ < kMaxInFlight && !queue_.empty()) {
        std::vector<Commit*> group = TakeGroup();
        ++in_flight_;
        lock.unlock();
        Send(group);  // each commit's result, read by its owner once done
        lock.lock();
        --in_flight_;
        for (Commit* g : group)
          g->done = true;
        cv_.notify_all();
      } else {
        cv_.wait(lock, [&] {
          mu_.AssertHeld();
          return c.done || (in_flight_ < kMaxInFlight && !queue_.empty());
        });
      }
    }
    return c.result;
  }

 private:
  // Calls on their way at once (more would leave fewer commits to group).
  static constexpr int kMaxInFlight = 1;
  static constexpr int kMaxOps = 900;  // comparisons or writes in one group (--max-txn-ops 1024)

  static bool Meets(const Commit& a, const Commit& b) {
    auto touches = [](const Commit& c, const std::string& key) {
      if (std::find(c.reads.begin(), c.reads.end(), key) != c.reads.end()) return true;
      if (std::find(c.writes.begin(), c.writes.end(), key) != c.writes.end()) return true;
      return std::any_of(c.ranges.begin(), c.ranges.end(),
                         [&](const auto& r) { return key >= r.first && key < r.second; });
    };
    for (const std::string& key : a.writes) {
      if (touches(b, key)) return true;
    }
    for (const std::string& key : b.writes) {
      if (touches(a, key)) return true;
    }
    return false;
  }

  // The oldest commit and those after it that meet none already taken.
  std::vector<Commit*> TakeGroup() FF_REQUIRES(mu_) {
    std::vector<Commit*> group;
    int compares = 0, ops = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      Commit* c = *it;
      const bool fits =
          group.empty() ||
          (compares + c->txn.compare_size() <= kMaxOps && ops + c->txn.success_size() <= kMaxOps &&
           std::none_of(group.begin(), group.end(), [&](Commit* g) { return Meets(*g, *c); }));
      if (!fits) {
        ++it;
        continue;
      }
      compares += c->txn.compare_size();
      ops += c->txn.success_size();
      group.push_back(c);
      it = queue_.erase(it);
    }
    return group;
  }

  void Send(const std::vector<Commit*>& group) {
    if (group.size() == 1) {
      group[0]->result = Once(group[0]->txn, nullptr);
      return;
    }
    etcdserverpb::TxnRequest merged;
    for (const Commit* c : group) {
      for (const auto& cmp : c->txn.compare())
        *merged.add_compare() = cmp;
      for (const auto& op : c->txn.success())
        *merged.add_success() = op;
    }
    grouped_ += group.size();
    bool conflict = false;
    Result<uint64_t> r = Once(merged, &conflict);
    // A comparison of one of them failed, or etcd refused one (a lease gone): each is tried
    // alone for its own answer. An unknown outcome (kAborted) is every one's.
    const bool alone = conflict || (!r.ok() && r.status().code() != StatusCode::kAborted);
    for (Commit* c : group)
      c->result = alone ? Once(c->txn, nullptr) : r;
  }

  // One etcd transaction; `*conflict` set when its comparisons failed.
  Result<uint64_t> Once(const etcdserverpb::TxnRequest& txn, bool* conflict) {
    Result<etcdserverpb::TxnResponse> r = client_.Txn(txn);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kUnavailable ||
          r.status().code() == StatusCode::kDeadlineExceeded) {
        // Maybe applied, maybe not: running the operation again is safe (see the header).
        return Status(StatusCode::kAborted, r.status().message());
      }
      if (r.status().code() == StatusCode::kNotFound) {  // a put's lease is gone
        return FailedPrecondition(r.status().message());
      }
      return r.status();
    }
    if (!r->succeeded()) {
      if (conflict) *conflict = true;
      return Status(StatusCode::kAborted,
                    "a key this transaction read changed before it committed");
    }
    return static_cast<uint64_t>(r->header().revision());
  }

  etcd::Client& client_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Commit*> queue_ FF_GUARDED_BY(mu_);
  int in_flight_ FF_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> grouped_{0};
};

class EtcdTxn : public KvTxn {
 public:
  EtcdTxn(etcd::Client& client, GroupCommitter& committer, const std::string& prefix,
          bool for_update)
      : client_(client), committer_(committer), prefix_(prefix), for_update_(for_update) {}

  Result<uint64_t> Commit() override {
    if (writes_.empty()) return uint64_t{0};
    GroupCommitter::Commit c;
    for (const auto& [key, mod] : reads_) {
      *c.txn.add_compare() = etcd::CompareMod(prefix_ + key, etcdserverpb::Compare::EQUAL, mod);
      c.reads.push_back(prefix_ + key);
    }
    for (const std::string& from : empty_) {
      auto cmp = etcd::CompareVersion(from, etcdserverpb::Compare::EQUAL, 0);
      cmp.set_range_end(etcd::PrefixEnd(from));
      *c.txn.add_compare() = std::move(cmp);
      c.ranges.emplace_back(from, etcd::PrefixEnd(from));
    }
    for (const auto& [from, to] : ranges_) {
      auto cmp = etcd::CompareMod(from, etcdserverpb::Compare::LESS, revision_ + 1);
      cmp.set_range_end(to);
      *c.txn.add_compare() = std::move(cmp);
      c.ranges.emplace_back(from, to);
    }
    for (const auto& [key, value] : writes_) {
      if (value) {
        auto lease = leases_.find(key);
        etcd::AddPut(&c.txn, prefix_ + key, *value, lease == leases_.end() ? 0 : lease->second);
      } else {
        etcd::AddDelete(&c.txn, prefix_ + key);
      }
      c.writes.push_back(prefix_ + key);
    }
    return committer_.Run(c);
  }

 protected:
  bool AssumeAbsentUnread(const std::string& key) override {
    reads_.emplace(key, 0);  // Commit compares: still absent (mod revision 0)
    return true;
  }
  bool AssumeNoneUnderUnread(const std::string& prefix) override {
    empty_.push_back(prefix_ + prefix);  // Commit compares: every key's version 0 (none)
    return true;
  }

  Result<std::optional<std::string>> ReadCommitted(const std::string& key) override {
    // The first read is linearizable and fixes the snapshot; the others read that revision from
    // the same member's copy (serializable: no round trip to the Raft leader).
    Result<etcd::RangeResult> r = client_.Range(prefix_ + key, "", 1, revision_, false,
                                                /*serializable=*/revision_ != 0 || for_update_);
    FF_RETURN_IF_ERROR(Compacted(r));
    if (revision_ == 0) revision_ = r->revision;
    if (r->kvs.empty()) {
      reads_.emplace(key, 0);
      return std::optional<std::string>();
    }
    reads_.emplace(key, r->kvs[0].mod_revision);
    return std::optional<std::string>(std::move(r->kvs[0].value));
  }

  // One read-only etcd transaction for any number of keys: the transaction's first read is
  // linearizable (etcd answers a read-only transaction with any non-serializable range only after
  // it caught up with the Raft leader) and fixes the snapshot at its revision; later ones are
  // serializable ranges at that revision from the member's own copy.
  Result<std::vector<std::optional<std::string>>> ReadCommittedMany(
      const std::vector<std::string>& keys) override {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    constexpr std::size_t kBatch = 512;  // within etcd's --max-txn-ops
    for (std::size_t next = 0; next < keys.size();) {
      const std::size_t n = std::min(kBatch, keys.size() - next);
      etcdserverpb::TxnRequest txn;
      for (std::size_t i = next; i < next + n; ++i) {
        auto* range = txn.add_success()->mutable_request_range();
        range->set_key(prefix_ + keys[i]);
        range->set_revision(revision_);
        range->set_serializable(revision_ != 0 || for_update_);
      }
      Result<etcdserverpb::TxnResponse> r = client_.Txn(txn);
      FF_RETURN_IF_ERROR(Compacted(r));
      if (r->responses_size() != static_cast<int>(n)) {
        return Internal("etcd answered " + std::to_string(r->responses_size()) + " reads of " +
                        std::to_string(n));
      }
      if (revision_ == 0) revision_ = r->header().revision();
      for (std::size_t i = 0; i < n; ++i) {
        const auto& range = r->responses(static_cast<int>(i)).response_range();
        if (range.kvs_size() == 0) {
          reads_.emplace(keys[next + i], 0);
          out.emplace_back();
        } else {
          reads_.emplace(keys[next + i], range.kvs(0).mod_revision());
          out.emplace_back(range.kvs(0).value());
        }
      }
      next += n;
    }
    return out;
  }

  Result<std::vector<std::pair<std::string, std::string>>> ScanCommitted(
      const std::string& prefix, const std::string& after, std::size_t limit) override {
    std::vector<std::pair<std::string, std::string>> out;
    if (limit == 0) return out;
    const std::string end = etcd::PrefixEnd(prefix_ + prefix);
    std::string from = prefix_ + (after.empty() || after < prefix ? prefix : after + '\0');
    const std::string first = from;
    for (;;) {
      const int64_t page = static_cast<int64_t>(std::min<std::size_t>(limit - out.size(), 1000));
      Result<etcd::RangeResult> r = client_.Range(from, end, page, revision_, false,
                                                  /*serializable=*/revision_ != 0 || for_update_);
      FF_RETURN_IF_ERROR(Compacted(r));
      if (revision_ == 0) revision_ = r->revision;
      for (etcd::Kv& kv : r->kvs)
        out.emplace_back(kv.key.substr(prefix_.size()), std::move(kv.value));
      if (!r->more || out.size() >= limit) {
        // What was seen: up to the range's end, or to the last key returned when cut short.
        ranges_.emplace_back(first, r->more && !out.empty()
                                        ? prefix_ + out.back().first + std::string(1, '\0')
                                        : end);
        return out;
      }
      from = r->kvs.back().key + std::string(1, '\0');
    }
  }

 private:
  // A read at a revision etcd has compacted away, or one a member has not reached yet (after the
  // client moved to another member): the transaction runs again from a new one.
  template <typename T>
  static Status Compacted(const Result<T>& r) {
    if (r.ok()) return Status::Ok();
    if (r.status().code() == StatusCode::kOutOfRange) {
      return Status(StatusCode::kAborted, r.status().message());
    }
    return r.status();
  }

  etcd::Client& client_;
  GroupCommitter& committer_;
  const std::string& prefix_;
  const bool for_update_;                 // every read from the member's copy (see the header)
  int64_t revision_ = 0;                  // the snapshot every read is at (that of the first)
  std::map<std::string, int64_t> reads_;  // key -> mod revision seen (0: absent)
  std::vector<std::pair<std::string, std::string>> ranges_;  // [from, to) scanned (with prefix)
  std::vector<std::string> empty_;  // prefixes (with ours) assumed to have no key, unread
};

class EtcdTxnKv : public TxnKv {
 public:
  EtcdTxnKv(etcd::Client* client, std::string prefix)
      : client_(client), committer_(*client), prefix_(std::move(prefix)) {}
  const char* engine() const override { return "etcd"; }
  bool serial() const override { return false; }
  std::unique_ptr<KvTxn> Begin(bool for_update) override {
    return std::make_unique<EtcdTxn>(*client_, committer_, prefix_, for_update);
  }
  // A reading transaction already reads one revision and holds nothing back.
  std::unique_ptr<KvTxn> BeginSnapshot() override { return Begin(false); }
  Status AwaitDurable(uint64_t) override { return Status::Ok(); }  // on a majority's disks
  uint64_t GroupedCommits() const override { return committer_.grouped(); }
  Result<uint64_t> CountKeys(const std::string& prefix) override {
    FF_ASSIGN_OR_RETURN(etcd::RangeResult r,
                        client_->Range(prefix_ + prefix, etcd::PrefixEnd(prefix_ + prefix), 0, 0,
                                       /*count_only=*/true));
    return static_cast<uint64_t>(r.count);
  }

 private:
  etcd::Client* const client_;
  GroupCommitter committer_;
  const std::string prefix_;
};

}  // namespace

std::unique_ptr<TxnKv> TxnKv::OpenSerial(std::unique_ptr<ProtoDb> db) {
  return std::make_unique<SerialTxnKv>(std::move(db));
}

Result<std::unique_ptr<TxnKv>> TxnKv::OpenEtcd(etcd::Client* client, std::string prefix) {
  if (client == nullptr) return InvalidArgument("the etcd engine needs a client");
  if (prefix.empty()) return InvalidArgument("the etcd engine needs a key prefix");
  return std::unique_ptr<TxnKv>(new EtcdTxnKv(client, std::move(prefix)));
}

}  // namespace ff

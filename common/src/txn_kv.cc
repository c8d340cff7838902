#include "common/txn_kv.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "common/etcd.h"

namespace ff {

void TxnKv::BackOff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int64_t cap_us = std::min<int64_t>(50000, int64_t{500} << std::min(attempt, 7));
  std::uniform_int_distribution<int64_t> pause(0, cap_us);
  std::this_thread::sleep_for(std::chrono::microseconds(pause(rng)));
}

Result<std::optional<std::string>> KvTxn::Get(const std::string& key) {
  if (auto it = writes_.find(key); it != writes_.end()) return it->second;
  return ReadCommitted(key);
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
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (auto it = writes_.find(keys[i]); it != writes_.end()) {
      out[i] = it->second;
    } else {
      unread.push_back(keys[i]);
      where.push_back(i);
    }
  }
  if (unread.empty()) return out;
  FF_ASSIGN_OR_RETURN(auto read, ReadCommittedMany(unread));
  for (std::size_t j = 0; j < read.size(); ++j)
    out[where[j]] = std::move(read[j]);
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
  SerialTxn(ProtoDb& db, std::mutex& mu) : db_(db), lock_(mu) {}
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
  std::unique_lock<std::mutex> lock_;  // one transaction at a time, held until destroyed
};

class SerialTxnKv : public TxnKv {
 public:
  explicit SerialTxnKv(std::unique_ptr<ProtoDb> db) : db_(std::move(db)) {}
  const char* engine() const override { return db_->engine(); }
  bool serial() const override { return true; }
  std::unique_ptr<KvTxn> Begin() override { return std::make_unique<SerialTxn>(*db_, mu_); }
  Status AwaitDurable(uint64_t token) override { return db_->AwaitDurable(token); }
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
  std::mutex mu_;
};

// ---- The optimistic engine (etcd) -----------------------------------------------------------

class EtcdTxn : public KvTxn {
 public:
  EtcdTxn(etcd::Client& client, const std::string& prefix) : client_(client), prefix_(prefix) {}

  Result<uint64_t> Commit() override {
    if (writes_.empty()) return uint64_t{0};
    etcdserverpb::TxnRequest txn;
    for (const auto& [key, mod] : reads_) {
      *txn.add_compare() = etcd::CompareMod(prefix_ + key, etcdserverpb::Compare::EQUAL, mod);
    }
    for (const auto& [from, to] : ranges_) {
      auto c = etcd::CompareMod(from, etcdserverpb::Compare::LESS, revision_ + 1);
      c.set_range_end(to);
      *txn.add_compare() = std::move(c);
    }
    for (const auto& [key, value] : writes_) {
      if (value) {
        etcd::AddPut(&txn, prefix_ + key, *value);
      } else {
        etcd::AddDelete(&txn, prefix_ + key);
      }
    }
    Result<etcdserverpb::TxnResponse> r = client_.Txn(txn);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kUnavailable ||
          r.status().code() == StatusCode::kDeadlineExceeded) {
        // Maybe applied, maybe not: running the operation again is safe (see the header).
        return Status(StatusCode::kAborted, r.status().message());
      }
      return r.status();
    }
    if (!r->succeeded()) {
      return Status(StatusCode::kAborted,
                    "a key this transaction read changed before it committed");
    }
    return static_cast<uint64_t>(r->header().revision());
  }

 protected:
  Result<std::optional<std::string>> ReadCommitted(const std::string& key) override {
    // The first read is linearizable and fixes the snapshot; the others read that revision from
    // the same member's copy (serializable: no round trip to the Raft leader).
    Result<etcd::RangeResult> r =
        client_.Range(prefix_ + key, "", 1, revision_, false, /*serializable=*/revision_ != 0);
    FF_RETURN_IF_ERROR(Compacted(r));
    if (revision_ == 0) revision_ = r->revision;
    if (r->kvs.empty()) {
      reads_.emplace(key, 0);
      return std::optional<std::string>();
    }
    reads_.emplace(key, r->kvs[0].mod_revision);
    return std::optional<std::string>(std::move(r->kvs[0].value));
  }

  // One read-only etcd transaction of serializable ranges at the snapshot's revision (after the
  // first read fixed it): one round trip for any number of keys.
  Result<std::vector<std::optional<std::string>>> ReadCommittedMany(
      const std::vector<std::string>& keys) override {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    std::size_t next = 0;
    if (revision_ == 0 && !keys.empty()) {  // the first read fixes the snapshot
      FF_ASSIGN_OR_RETURN(auto first, ReadCommitted(keys[0]));
      out.push_back(std::move(first));
      next = 1;
    }
    constexpr std::size_t kBatch = 512;  // within etcd's --max-txn-ops
    while (next < keys.size()) {
      const std::size_t n = std::min(kBatch, keys.size() - next);
      etcdserverpb::TxnRequest txn;
      for (std::size_t i = next; i < next + n; ++i) {
        auto* range = txn.add_success()->mutable_request_range();
        range->set_key(prefix_ + keys[i]);
        range->set_revision(revision_);
        range->set_serializable(true);
      }
      Result<etcdserverpb::TxnResponse> r = client_.Txn(txn);
      FF_RETURN_IF_ERROR(Compacted(r));
      if (r->responses_size() != static_cast<int>(n)) {
        return Internal("etcd answered " + std::to_string(r->responses_size()) + " reads of " +
                        std::to_string(n));
      }
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
      Result<etcd::RangeResult> r =
          client_.Range(from, end, page, revision_, false, /*serializable=*/revision_ != 0);
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
  const std::string& prefix_;
  int64_t revision_ = 0;                  // the snapshot every read is at (that of the first)
  std::map<std::string, int64_t> reads_;  // key -> mod revision seen (0: absent)
  std::vector<std::pair<std::string, std::string>> ranges_;  // [from, to) scanned (with prefix)
};

class EtcdTxnKv : public TxnKv {
 public:
  EtcdTxnKv(etcd::Client* client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}
  const char* engine() const override { return "etcd"; }
  bool serial() const override { return false; }
  std::unique_ptr<KvTxn> Begin() override { return std::make_unique<EtcdTxn>(*client_, prefix_); }
  Status AwaitDurable(uint64_t) override { return Status::Ok(); }  // on a majority's disks
  Result<uint64_t> CountKeys(const std::string& prefix) override {
    FF_ASSIGN_OR_RETURN(etcd::RangeResult r,
                        client_->Range(prefix_ + prefix, etcd::PrefixEnd(prefix_ + prefix), 0, 0,
                                       /*count_only=*/true));
    return static_cast<uint64_t>(r.count);
  }

 private:
  etcd::Client* const client_;
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

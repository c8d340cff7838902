// A client of etcd's v3 API over gRPC (common/proto/etcd.proto), for the control plane's highly
// available state and leader election (leader_election.h, proto_db.h's etcd engine, fs3-meta's
// etcd engine). Talks to a list of members: a call goes to the member that answered last and
// moves on to the next when that one is unreachable or has no leader.
//
// Retries. A call that finds a member unreachable, without a quorum or too slow goes to the next
// member, until the call's deadline. That is plain for reads (Range, Status). A write (Put,
// DeleteRange, Txn, the lease calls) may then reach etcd twice, which every use here is built
// for: Put, DeleteRange and LeaseRevoke leave the same state when repeated; a Txn's comparisons
// are judged again, so a repeated compare-and-set answers "not succeeded" (its first attempt
// changed what it compared) and its caller reads back what happened: the leader election checks
// whose lease holds the key, a fenced write by a leader compares only its own key and applies
// again, the optimistic transactions of txn_kv.h run their operation again. A write that fails
// after an attempt may have reached a member says "outcome unknown" in its message.
//
// Errors: kUnavailable (no member reachable, no quorum), kDeadlineExceeded (the call's deadline),
// kResourceExhausted (etcd's database is over its quota, or a request over its size limit),
// kOutOfRange (a read at a compacted revision), kInvalidArgument (etcd refused the request, e.g.
// more operations in one transaction than --max-txn-ops). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/proto/etcd.grpc.pb.h"
#include "common/proto/etcd.pb.h"
#include "common/result.h"
#include "common/thread_annotations.h"

namespace ff::etcd {

struct Options {
  std::vector<std::string> endpoints;               // "host:port" of the members' client URLs
  std::chrono::milliseconds call_timeout{3000};     // one call, all its attempts
  std::chrono::milliseconds attempt_timeout{1500};  // one attempt on one member
};

// Parses "host:port,host:port" (or "http://host:port", as etcdctl takes them).
Result<std::vector<std::string>> ParseEndpoints(const std::string& list);

// The end of the range of every key starting with `prefix` (etcd's "prefix + 1").
std::string PrefixEnd(const std::string& prefix);

struct Kv {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct RangeResult {
  std::vector<Kv> kvs;
  bool more = false;     // more keys in the range than `limit`
  int64_t count = 0;     // keys in the range
  int64_t revision = 0;  // the store's revision the read saw
};

// What a member says of itself (Maintenance.Status).
struct MemberStatus {
  std::string endpoint, version;
  uint64_t member_id = 0, leader = 0, raft_term = 0;
  int64_t db_size = 0;
  std::vector<std::string> errors;
};

class Client {
 public:
  // Makes the channels; connects on the first call (a member down now is not an error).
  static Result<std::unique_ptr<Client>> Make(const Options& options);
  // A daemon's client from its config's `etcd_endpoints` (each checked as ParseEndpoints does).
  static Result<std::unique_ptr<Client>> Connect(const std::vector<std::string>& endpoints);

  const Options& options() const { return options_; }

  // One key; nullopt when absent. `revision` 0 reads the newest state (linearizable).
  Result<std::optional<Kv>> Get(const std::string& key, int64_t revision = 0,
                                int64_t* read_revision = nullptr);
  // Keys in [key, range_end) in key order, at most `limit` (0: all). `serializable`: answered
  // by the member from its own copy without asking the Raft leader (a round trip less): exact
  // for a `revision` the caller read linearizably before from the same member; a member behind
  // that revision answers kOutOfRange ("future revision").
  Result<RangeResult> Range(const std::string& key, const std::string& range_end, int64_t limit = 0,
                            int64_t revision = 0, bool count_only = false,
                            bool serializable = false);
  Result<RangeResult> RangePrefix(const std::string& prefix, int64_t limit = 0) {
    return Range(prefix, PrefixEnd(prefix), limit);
  }
  // The revision the write made.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  // How many keys went; `range_end` empty deletes `key` alone.
  Result<int64_t> Delete(const std::string& key, const std::string& range_end = "");
  Result<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);

  // A lease of `ttl_s` seconds; its id.
  Result<int64_t> GrantLease(int64_t ttl_s);
  Status RevokeLease(int64_t id);
  // Renews a lease once: its TTL from now in seconds (kNotFound: it has expired or was revoked).
  Result<int64_t> KeepAlive(int64_t id);

  // Waits up to `timeout` for changes to keys in [key, range_end) at or after `start_revision`:
  // the events seen (empty when none came in time). kOutOfRange when `start_revision` has been
  // compacted away (read the state afresh).
  Result<std::vector<etcdserverpb::Event>> WaitForChanges(const std::string& key,
                                                          const std::string& range_end,
                                                          int64_t start_revision,
                                                          std::chrono::milliseconds timeout);

  // Each member's own account (unreachable ones carry the error in `errors`).
  std::vector<MemberStatus> Members();

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Maintenance::Stub> maintenance;
  };
  using Attempt = std::function<grpc::Status(Member& m, grpc::ClientContext* ctx)>;

  explicit Client(Options options) : options_(std::move(options)) {}
  // Runs `attempt` on the members in turn (from the preferred one) until it succeeds, fails for
  // good, or the call's deadline passes. `write`: retried only where it cannot have applied.
  Status Call(const char* what, bool write, const Attempt& attempt);

  const Options options_;
  std::vector<Member> members_;
  Mutex mu_;
  std::size_t preferred_ FF_GUARDED_BY(mu_) = 0;
};

// A compare for a Txn: `target` of `key` `result` `value` (e.g. CompareMod(k, EQUAL, rev)).
etcdserverpb::Compare CompareMod(const std::string& key, etcdserverpb::Compare::CompareResult r,
                                 int64_t mod_revision);
etcdserverpb::Compare CompareCreate(const std::string& key, etcdserverpb::Compare::CompareResult r,
                                    int64_t create_revision);
etcdserverpb::Compare CompareVersion(const std::string& key, etcdserverpb::Compare::CompareResult r,
                                     int64_t version);
void AddPut(etcdserverpb::TxnRequest* txn, const std::string& key, const std::string& value,
            int64_t lease = 0);
void AddDelete(etcdserverpb::TxnRequest* txn, const std::string& key,
               const std::string& range_end = "");
void AddGet(etcdserverpb::TxnRequest* txn, const std::string& key, bool on_success);

Kv FromProto(const etcdserverpb::KeyValue& kv);

}  // namespace ff::etcd

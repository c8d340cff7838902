// One leader among a daemon's replicas, elected through etcd (fs3-mgmtd, hai-server, fs3-meta's
// garbage collector).
//
// Each replica campaigns for one key (`<prefix>/leader`) with a transaction that creates it under
// the replica's own lease if nobody holds it; the value is the replica's address, so followers
// and clients learn where the leader is. The leader renews its lease every third of its TTL.
//
// Losing leadership, and learning it first. A lease expires on the etcd side no earlier than TTL
// after etcd received the last renewal, which it received after we sent it: so "sent + TTL" on
// our own clock is an instant before which nobody else can be elected. IsLeader() is true only
// before that instant (less a margin for clock rate), so a leader that cannot renew (etcd
// unreachable, a partition from the majority, a stalled process) stops acting as leader before
// another replica can take over. The key deleted by hand, a revoked lease or a renewal answered
// "expired" end leadership at once.
//
// Leading again. A leader that stopped because it could not renew keeps its lease and key and
// keeps renewing: when a renewal goes through and the key still has the create revision it was
// elected with, the lease outlived the outage (etcd renews every lease in full when it elects a
// new Raft leader), nobody can have led in between, and it leads again under the same fence. An
// etcd blip (a member rejoining, a Raft election) thus does not move the leadership.
//
// Fencing. Every write a leader makes to etcd carries Fence(): a comparison that its key still
// exists with the create revision it was elected with. A deposed leader that wakes up late (a
// process stopped for seconds, a slow network) has its writes refused (kFailedPrecondition), as
// etcd's own documentation prescribes for leases used as locks. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/etcd.h"
#include "common/thread_annotations.h"

namespace ff {

struct ElectionOptions {
  std::string key;    // the leader key, e.g. "/fireflyer/fs3/mgmtd/leader"
  std::string value;  // this replica's address, as clients should dial it
  int64_t ttl_s = 3;  // the lease's TTL: failover takes about this long after a leader dies
  // Taken off the lease's end for a clock that runs slower than etcd's.
  std::chrono::milliseconds margin{150};
  // How often a follower looks again when it saw no change (it also watches the key).
  std::chrono::milliseconds poll{500};
};

class LeaderElection {
 public:
  // Called on the election's thread when this replica becomes leader (with its fence) and when it
  // stops being one; neither may block for long.
  using Callback = std::function<void(bool leader)>;

  LeaderElection(etcd::Client* client, ElectionOptions options, Callback on_change = nullptr);
  // A replicated daemon's election (fs3-mgmtd, hai-server): the key `<prefix>leader`, this
  // replica's address as its value; not started (for a callback that reads the election).
  static std::unique_ptr<LeaderElection> ForReplica(etcd::Client* client, const std::string& prefix,
                                                    const std::string& self, int64_t ttl_s,
                                                    Callback on_change);
  // ForReplica, started.
  static std::unique_ptr<LeaderElection> StartReplica(etcd::Client* client,
                                                      const std::string& prefix,
                                                      const std::string& self, int64_t ttl_s,
                                                      Callback on_change);
  ~LeaderElection();  // Resign()s

  // Campaigns on a thread of its own until Resign().
  void Start();
  // Stops campaigning; a leader deletes its key (revokes its lease) so a successor is elected at
  // once instead of after the TTL.
  void Resign();

  // True while this replica is leader and its lease surely has not run out.
  bool IsLeader() const;
  // The current leader's value as last seen ("" when none is known).
  std::string Leader() const;
  // The comparison that fences a leader's writes (see above): add it to every write's Txn.
  // Only meaningful while IsLeader(); a deposed leader's fence fails.
  etcdserverpb::Compare Fence() const;
  // The create revision of the leader key this replica leads under (its fence), 0 when it does
  // not lead. The same value after leading again says nobody led in between.
  int64_t FenceRevision() const;
  // Times this replica became leader (metrics, tests); leading again is not a new term.
  uint64_t Terms() const { return terms_; }
  const ElectionOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  // One leadership: renews until it cannot, then returns.
  void Lead(int64_t lease, Clock::time_point valid_until);
  void SetLeader(bool leader, Clock::time_point valid_until, int64_t fence_revision);
  bool Stopping();

  etcd::Client* const client_;
  const ElectionOptions options_;
  const Callback on_change_;
  std::thread thread_;
  std::atomic<uint64_t> terms_{0};

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ FF_GUARDED_BY(mu_) = false;
  bool leader_ FF_GUARDED_BY(mu_) = false;
  Clock::time_point valid_until_ FF_GUARDED_BY(mu_);
  int64_t fence_revision_ FF_GUARDED_BY(mu_) = 0;
  int64_t lease_ FF_GUARDED_BY(mu_) = 0;
  std::string leader_value_ FF_GUARDED_BY(mu_);
};

}  // namespace ff

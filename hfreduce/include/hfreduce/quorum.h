// Per-step quorum of a fault-tolerant job's replica groups (after torchft's lighthouse).
//
// A job is R replica groups that train the same model on different data and average their
// gradients every step. Before each step every group asks for the quorum: which groups take part
// in this step. The answer comes when every group of the previous quorum has asked again (the
// common case: nobody lost, a per-step barrier), when all `replicas` groups have asked, or, once
// `min_replicas` have, when `join_timeout` has passed since the first of them asked (a group that
// died or hangs is left out), or when each previous member that has not asked has been silent
// (no heartbeat) for `heartbeat_timeout` (for three heartbeat intervals, 0.3 x the timeout, in a
// round that an asker wants re-formed because its collectives failed: the member that broke them
// is likely dead). A group that asks later (restarted, replaced, or back
// from a hang) joins the next quorum. Each decided quorum with a different membership, or one that
// a member asks to re-form (its collectives failed), gets a new id; its members re-form their
// communicator under the store prefix it names, and any member whose step is behind the others'
// takes the state of one that is not (the quorum says which).
//
// ReplicaQuorum is the decision, thread-safe, one call per group and step; StoreServer serves it
// (the Quorum RPC) beside the rendezvous store, in hfreduce-store and in hai-server, and
// StoreClient::Quorum asks it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/thread_annotations.h"

namespace ff::hfreduce {

inline constexpr const char* kQuorumTooSmall = "QUORUM_TOO_SMALL";

struct QuorumRequest {
  std::string job;         // the job's name or id: quorums of different jobs are independent
  std::string replica_id;  // the group's name, unique in the job ("0", "1", ...)
  int64_t step = 0;        // optimizer steps the group has committed
  int min_replicas = 1;    // below this many groups no quorum is decided (the caller times out)
  int replicas = 1;        // groups the job expects: with all of them present, decided at once
  bool reform = false;     // the group's communicator broke: the next quorum gets a new id
  std::chrono::milliseconds join_timeout{std::chrono::seconds(5)};
  // When positive: a member of the previous quorum neither heard from (Heartbeat, or asking)
  // for this long is not waited for (a killed or frozen process), so a loss costs this, not the
  // join timeout.
  std::chrono::milliseconds heartbeat_timeout{0};
};

struct QuorumMember {
  std::string replica_id;
  int64_t step = 0;
};

struct Quorum {
  int64_t id = 0;                     // changes whenever the members must re-form
  std::vector<QuorumMember> members;  // sorted by replica_id: a member's index is its rank
  int replica_rank = 0;               // the asker's index in members
  int64_t max_step = 0;               // the most steps any member has committed
  int recover_from = 0;               // the lowest rank with max_step: the source of state
  std::string store_prefix;           // where this quorum's members rendezvous (unique per id)
  // Every server of the quorum service as the one that decided it knows them (empty if it was
  // not told: StoreServer::SetStores).
  std::vector<std::string> stores;

  int replica_world() const { return static_cast<int>(members.size()); }
  // Whether some member is behind (it takes recover_from's state before the step).
  bool healing() const;
};

// A change of a job's membership: what hai show lists for a fault-tolerant job (hai-server applies
// it to the job's run as a typed event; Describe gives the line people read).
struct QuorumEvent {
  enum class Kind : uint8_t {
    kFormed,  // the first quorum: `groups` formed it at `step`
    kJoined,  // `groups` (one) joined at `step`, taking `source`'s state when it was behind
    kLeft,    // `groups` left at `step`
  };
  uint64_t seq = 0;     // increasing per job, from 1
  int64_t time_ms = 0;  // wall clock
  Kind kind = Kind::kFormed;
  std::vector<std::string> groups;
  int64_t step = 0;
  std::string source;  // kJoined: the group whose state it took ("" when it was not behind)
};
// "group 1.1 joined the quorum at step 57, taking group 0's state".
std::string Describe(const QuorumEvent& event);

class ReplicaQuorum {
 public:
  // `epoch` goes into every store prefix, so that quorums decided by a restarted server never
  // reuse a prefix of an earlier one.
  explicit ReplicaQuorum(std::string epoch);
  ~ReplicaQuorum();

  // Joins the job's next quorum and blocks until it is decided (see above). kDeadlineExceeded
  // with reason kQuorumTooSmall (details "asked" and "needed") when it is not by `deadline`
  // (fewer than min_replicas groups); kInvalidArgument for a bad request.
  Result<Quorum> Join(const QuorumRequest& request, std::chrono::steady_clock::time_point deadline);
  // The group is alive (a thread of its process calls this every fraction of heartbeat_timeout).
  Status Heartbeat(const std::string& job, const std::string& replica_id);
  // Forgets every job's rounds and members and takes a new epoch (every later store prefix
  // differs from those before): for a server that serves again after another did meanwhile
  // (hai-server's leader). Waiters are woken and fail (kAborted); events are kept.
  void NewEpoch(std::string epoch);
  // The job's last membership changes (up to 64) with seq > `after`, oldest first.
  std::vector<QuorumEvent> Events(const std::string& job, uint64_t after);
  // The groups that asked for the job's next quorum and wait for it to be decided, by name.
  std::vector<std::string> Waiting(const std::string& job);
  // Where the jobs are known (hai-server: its job records), what a group asks is checked against
  // them before it joins: `check` may correct the request (R and M from the record, not the
  // client) or refuse it (an unknown job, a group that is not live). None (hfreduce-store):
  // requests are taken as they come. Thread-safe; set once, before serving.
  using Check = std::function<Status(QuorumRequest& request)>;
  void SetCheck(Check check);

 private:
  using Clock = std::chrono::steady_clock;
  struct Round {
    std::map<std::string, int64_t> joined;  // replica_id -> step
    Clock::time_point first;
    bool reform = false;
    int min_replicas = 1, replicas = 1;
    std::chrono::milliseconds join_timeout{0};
    std::chrono::milliseconds heartbeat_timeout{0};
  };
  struct Decision {
    int64_t id = 0;
    std::vector<QuorumMember> members;
  };
  struct Job {
    uint64_t round = 0;  // rounds decided
    Round current;
    std::set<std::string> previous;  // members of the last quorum
    int64_t quorum_id = 0;
    // The last rounds' decisions by round number (a waiter woken late still finds its own).
    std::map<uint64_t, Decision> decided;
    std::map<std::string, Clock::time_point> last_seen;  // by heartbeat or by asking
    std::vector<QuorumEvent> events;                     // the last membership changes
    uint64_t event_seq = 0;
  };
  static void Record(Job& job, QuorumEvent::Kind kind, std::vector<std::string> groups,
                     int64_t step, std::string source);
  // Decides the job's current round when its rule says so; true when it did.
  bool MaybeDecide(Job& job, Clock::time_point now);

  Check check_;  // set before serving; read without mu_
  Mutex mu_;
  std::string epoch_ FF_GUARDED_BY(mu_);
  CondVar decided_;
  std::map<std::string, Job> jobs_ FF_GUARDED_BY(mu_);
};

}  // namespace ff::hfreduce

#include "common/leader_election.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ff {

LeaderElection::LeaderElection(etcd::Client* client, ElectionOptions options, Callback on_change)
    : client_(client), options_(std::move(options)), on_change_(std::move(on_change)) {}

std::unique_ptr<LeaderElection> LeaderElection::ForReplica(etcd::Client* client,
                                                           const std::string& prefix,
                                                           const std::string& self, int64_t ttl_s,
                                                           Callback on_change) {
  return std::make_unique<LeaderElection>(
      client, ElectionOptions{.key = prefix + "leader", .value = self, .ttl_s = ttl_s},
      std::move(on_change));
}

std::unique_ptr<LeaderElection> LeaderElection::StartReplica(etcd::Client* client,
                                                             const std::string& prefix,
                                                             const std::string& self, int64_t ttl_s,
                                                             Callback on_change) {
  auto e = ForReplica(client, prefix, self, ttl_s, std::move(on_change));
  e->Start();
  return e;
}

LeaderElection::~LeaderElection() {
  Resign();
}

void LeaderElection::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LeaderElection::Resign() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool LeaderElection::Stopping() {
  MutexLock lock(&mu_);
  return stop_;
}

bool LeaderElection::IsLeader() const {
  MutexLock lock(&mu_);
  return leader_ && Clock::now() + options_.margin < valid_until_;
}

std::string LeaderElection::Leader() const {
  MutexLock lock(&mu_);
  return leader_value_;
}

etcdserverpb::Compare LeaderElection::Fence() const {
  MutexLock lock(&mu_);
  // A replica that never led fences with revision -1, which no key has.
  return etcd::CompareCreate(options_.key, etcdserverpb::Compare::EQUAL,
                             leader_ ? fence_revision_ : -1);
}

int64_t LeaderElection::FenceRevision() const {
  MutexLock lock(&mu_);
  return leader_ ? fence_revision_ : 0;
}

void LeaderElection::SetLeader(bool leader, Clock::time_point valid_until, int64_t fence_revision) {
  MutexLock lock(&mu_);
  leader_ = leader;
  valid_until_ = valid_until;
  if (leader) {
    fence_revision_ = fence_revision;
    leader_value_ = options_.value;
  } else if (leader_value_ == options_.value) {
    leader_value_.clear();
  }
}

void LeaderElection::Run() {
  const auto ttl = std::chrono::seconds(options_.ttl_s);
  while (!Stopping()) {
    auto sent = Clock::now();
    Result<int64_t> granted = client_->GrantLease(options_.ttl_s);
    if (!granted.ok()) {
      spdlog::warn("election {}: no lease: {}", options_.key, granted.status().ToString());
      UniqueLock lock(&mu_);
      cv_.wait_for(lock, options_.poll, [&] {
        mu_.AssertHeld();
        return stop_;
      });
      continue;
    }
    const int64_t lease = *granted;
    auto valid_until = sent + ttl;
    {
      MutexLock lock(&mu_);
      lease_ = lease;
    }
    bool lease_alive = true;
    while (lease_alive && !Stopping()) {
      // Take the key if nobody holds it; otherwise read who does.
      etcdserverpb::TxnRequest txn;
      *txn.add_compare() = etcd::CompareCreate(options_.key, etcdserverpb::Compare::EQUAL, 0);
      etcd::AddPut(&txn, options_.key, options_.value, lease);
      etcd::AddGet(&txn, options_.key, /*on_success=*/false);
      Result<etcdserverpb::TxnResponse> r = client_->Txn(txn);
      int64_t fence = 0;
      int64_t seen_revision = 0;
      if (r.ok() && r->succeeded()) {
        fence = r->header().revision();
      } else {
        // Lost the race, or the outcome is unknown: the key says who holds it (maybe us).
        Result<std::optional<etcd::Kv>> held = client_->Get(options_.key, 0, &seen_revision);
        if (held.ok() && *held && (*held)->lease == lease) {
          fence = (*held)->create_revision;
        } else if (held.ok()) {
          MutexLock lock(&mu_);
          leader_value_ = *held ? (*held)->value : "";
        } else {
          spdlog::warn("election {}: {}", options_.key, held.status().ToString());
        }
      }
      if (fence > 0) {
        Lead(lease, valid_until);
        lease_alive = false;  // a leadership ends with its lease revoked or expired
        break;
      }
      // A follower: keep the lease fresh (to lead at once when the key frees) and wait for the
      // key to change, or for the poll interval.
      sent = Clock::now();
      Result<int64_t> kept = client_->KeepAlive(lease);
      if (kept.ok()) {
        valid_until = sent + std::chrono::seconds(*kept);
      } else if (kept.status().code() == StatusCode::kNotFound) {
        lease_alive = false;
        break;
      }
      if (seen_revision > 0) {
        (void)client_->WaitForChanges(options_.key, "", seen_revision + 1, options_.poll);
      } else {
        UniqueLock lock(&mu_);
        cv_.wait_for(lock, options_.poll, [&] {
          mu_.AssertHeld();
          return stop_;
        });
      }
    }
    if (lease_alive) (void)client_->RevokeLease(lease);  // stopping as a follower
  }
}

void LeaderElection::Lead(int64_t lease, Clock::time_point valid_until) {
  // The fence is the key's create revision, which the txn that made it wrote: read it back.
  int64_t fence = 0;
  {
    Result<std::optional<etcd::Kv>> held = client_->Get(options_.key);
    if (held.ok() && *held && (*held)->lease == lease) fence = (*held)->create_revision;
  }
  if (fence == 0) {
    (void)client_->RevokeLease(lease);
    return;
  }
  // The lease may have little time left (a follower's renewals fail while etcd elects a new Raft
  // leader): renewed before leading, so that a leadership starts with a full lease.
  const auto renewed = Clock::now();
  Result<int64_t> renewal = client_->KeepAlive(lease);
  if (!renewal.ok()) {
    spdlog::warn("election {}: won, but could not renew the lease: {}", options_.key,
                 renewal.status().ToString());
    (void)client_->RevokeLease(lease);
    return;
  }
  valid_until = renewed + std::chrono::seconds(*renewal);
  SetLeader(true, valid_until, fence);
  ++terms_;
  spdlog::info("election {}: {} is leader (fence revision {})", options_.key, options_.value,
               fence);
  if (on_change_) on_change_(true);

  const auto renew_every = std::chrono::milliseconds(options_.ttl_s * 1000 / 3);
  // Whether this replica acts as leader. It stops when its lease may have run out (a renewal
  // failed past valid_until), but keeps the lease and its key: etcd may not have expired them (a
  // Raft election renews every lease; a stall shorter than the TTL on etcd's side), and when a
  // renewal goes through again and the key still has our create revision, nobody else can have
  // led in between, so it leads again under the same fence. Revoking at once would hand the
  // leadership to whichever replica campaigns first after any etcd blip.
  bool acting = true;
  std::string why = "resigned";
  for (;;) {
    {
      UniqueLock lock(&mu_);
      if (cv_.wait_for(lock,
                       acting ? renew_every : std::min<Clock::duration>(renew_every, options_.poll),
                       [&] {
                         mu_.AssertHeld();
                         return stop_;
                       })) {
        break;
      }
    }
    const auto sent = Clock::now();
    Result<int64_t> kept = client_->KeepAlive(lease);
    if (kept.status().code() == StatusCode::kNotFound) {
      why = "its lease expired";
      break;
    }
    if (!kept.ok()) {
      if (acting && Clock::now() + options_.margin >= valid_until) {
        acting = false;
        SetLeader(false, Clock::time_point(), 0);
        spdlog::warn(
            "election {}: {} stops leading: it could not renew its lease in time ({}); it keeps "
            "trying, and leads again if the lease outlived the outage",
            options_.key, options_.value, kept.status().ToString());
        if (on_change_) on_change_(false);
      }
      continue;
    }
    valid_until = sent + std::chrono::seconds(*kept);
    // Somebody may have deleted the key (an operator, a revoke): then another can be elected.
    Result<std::optional<etcd::Kv>> held = client_->Get(options_.key);
    if (held.ok() && (!*held || (*held)->create_revision != fence)) {
      why = "its key was deleted";
      break;
    }
    if (acting) {
      MutexLock lock(&mu_);
      valid_until_ = valid_until;
    } else if (held.ok()) {  // the key is still ours: nobody led in between
      acting = true;
      SetLeader(true, valid_until, fence);
      spdlog::info("election {}: {} leads again: its lease outlived the outage (fence revision {})",
                   options_.key, options_.value, fence);
      if (on_change_) on_change_(true);
    }
  }
  if (acting) {
    SetLeader(false, Clock::time_point(), 0);
    spdlog::warn("election {}: {} is no longer leader: {}", options_.key, options_.value, why);
    if (on_change_) on_change_(false);
  } else {
    spdlog::warn("election {}: {} gives up its lost leadership: {}", options_.key, options_.value,
                 why);
  }
  (void)client_->RevokeLease(lease);
}

}  // namespace ff

#include "hfreduce/quorum.h"

#include <algorithm>

namespace ff::hfreduce {
namespace {

constexpr std::size_t kRoundsKept = 64;
constexpr std::size_t kEventsKept = 64;

std::string Names(const std::vector<std::string>& ids) {
  std::string out;
  for (const std::string& id : ids)
    out += (out.empty() ? "" : ", ") + id;
  return out;
}

}  // namespace

std::string Describe(const QuorumEvent& e) {
  const std::string who = "group" + std::string(e.groups.size() > 1 ? "s " : " ") + Names(e.groups);
  const std::string at = " the quorum at step " + std::to_string(e.step);
  switch (e.kind) {
    case QuorumEvent::Kind::kFormed:
      return who + " formed" + at;
    case QuorumEvent::Kind::kJoined:
      return who + " joined" + at +
             (e.source.empty() ? "" : ", taking group " + e.source + "'s state");
    case QuorumEvent::Kind::kLeft:
      return who + " left" + at;
  }
  return who;
}

bool Quorum::healing() const {
  return std::any_of(members.begin(), members.end(),
                     [&](const QuorumMember& m) { return m.step < max_step; });
}

ReplicaQuorum::ReplicaQuorum(std::string epoch) : epoch_(std::move(epoch)) {}
ReplicaQuorum::~ReplicaQuorum() = default;

bool ReplicaQuorum::MaybeDecide(Job& job, Clock::time_point now) {
  Round& r = job.current;
  const int n = static_cast<int>(r.joined.size());
  if (n == 0 || n < r.min_replicas) return false;
  bool all_previous = !job.previous.empty();
  // When an asker's collectives failed (reform), a member is likely dead: one that missed three
  // heartbeats (sent every tenth of the timeout) is not waited for. A live one starved that long
  // only loses this step and heals at the next.
  const auto silent_after = r.reform ? r.heartbeat_timeout * 3 / 10 : r.heartbeat_timeout;
  for (const std::string& id : job.previous) {
    auto seen = job.last_seen.find(id);
    const bool silent = r.heartbeat_timeout.count() > 0 &&
                        (seen == job.last_seen.end() || now - seen->second > silent_after);
    all_previous = all_previous && (r.joined.contains(id) || silent);
  }
  const bool everyone = n >= r.replicas;
  const bool waited = now >= r.first + r.join_timeout;
  if (!all_previous && !everyone && !waited) return false;

  std::set<std::string> members;
  Decision decision;
  for (const auto& [id, step] : r.joined) {  // a map: sorted by replica_id
    members.insert(id);
    decision.members.push_back({id, step});
  }
  if (members != job.previous) {
    // Who came and who went, for people (hai show): the step the quorum is at, and where a
    // newcomer behind it takes its state from (recover_from: the first member at max_step).
    int64_t max_step = 0;
    std::string source;
    for (const QuorumMember& m : decision.members) {  // the first at the most steps
      if (source.empty() || m.step > max_step) {
        source = m.replica_id;
        max_step = m.step;
      }
    }
    std::vector<std::string> left;
    for (const std::string& id : job.previous) {
      if (!members.contains(id)) left.push_back(id);
    }
    if (!left.empty()) Record(job, QuorumEvent::Kind::kLeft, left, max_step, "");
    std::vector<std::string> first;
    for (const QuorumMember& m : decision.members) {
      if (job.previous.contains(m.replica_id)) continue;
      if (job.previous.empty()) {
        first.push_back(m.replica_id);
      } else {
        Record(job, QuorumEvent::Kind::kJoined, {m.replica_id}, max_step,
               m.step < max_step ? source : "");
      }
    }
    if (!first.empty()) Record(job, QuorumEvent::Kind::kFormed, first, max_step, "");
  }
  if (members != job.previous || r.reform) ++job.quorum_id;
  decision.id = job.quorum_id;
  job.previous = std::move(members);
  job.decided[job.round] = std::move(decision);
  while (job.decided.size() > kRoundsKept)
    job.decided.erase(job.decided.begin());
  ++job.round;
  job.current = Round{};
  return true;
}

void ReplicaQuorum::Record(Job& job, QuorumEvent::Kind kind, std::vector<std::string> groups,
                           int64_t step, std::string source) {
  QuorumEvent e;
  e.seq = ++job.event_seq;
  e.time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  e.kind = kind;
  e.groups = std::move(groups);
  e.step = step;
  e.source = std::move(source);
  job.events.push_back(std::move(e));
  if (job.events.size() > kEventsKept) job.events.erase(job.events.begin());
}

void ReplicaQuorum::NewEpoch(std::string epoch) {
  MutexLock lock(&mu_);
  epoch_ = std::move(epoch);
  for (auto& [name, job] : jobs_) {
    ++job.round;  // a waiter's round is over, and undecided: it fails and asks again
    job.current = Round{};
    job.previous.clear();
    job.decided.clear();
    job.last_seen.clear();
  }
  decided_.notify_all();
}

std::vector<QuorumEvent> ReplicaQuorum::Events(const std::string& job, uint64_t after) {
  MutexLock lock(&mu_);
  std::vector<QuorumEvent> out;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return out;
  for (const QuorumEvent& e : it->second.events) {
    if (e.seq > after) out.push_back(e);
  }
  return out;
}

std::vector<std::string> ReplicaQuorum::Waiting(const std::string& job) {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return out;
  for (const auto& [replica, step] : it->second.current.joined)
    out.push_back(replica);
  return out;
}

Status ReplicaQuorum::Heartbeat(const std::string& job, const std::string& replica_id) {
  if (job.empty() || replica_id.empty()) {
    return InvalidArgument("quorum: job and replica_id must be set");
  }
  MutexLock lock(&mu_);
  jobs_[job].last_seen[replica_id] = Clock::now();
  return Status::Ok();
}

void ReplicaQuorum::SetCheck(Check check) {
  check_ = std::move(check);
}

Result<Quorum> ReplicaQuorum::Join(const QuorumRequest& asked, Clock::time_point deadline) {
  QuorumRequest request = asked;
  if (check_) FF_RETURN_IF_ERROR(check_(request));
  if (request.job.empty() || request.replica_id.empty()) {
    return InvalidArgument("quorum: job and replica_id must be set");
  }
  if (request.job.find('/') != std::string::npos ||
      request.replica_id.find('/') != std::string::npos) {
    return InvalidArgument("quorum: job and replica_id must not contain '/'");
  }
  if (request.min_replicas < 1 || request.replicas < request.min_replicas) {
    return InvalidArgument("quorum: need 1 <= min_replicas <= replicas, got " +
                           std::to_string(request.min_replicas) + " and " +
                           std::to_string(request.replicas));
  }
  if (request.step < 0) return InvalidArgument("quorum: step must not be negative");
  if (request.join_timeout.count() < 0) {
    return InvalidArgument("quorum: join_timeout must not be negative");
  }
  UniqueLock lock(&mu_);
  Job& job = jobs_[request.job];
  Round& r = job.current;
  if (r.joined.empty()) r.first = Clock::now();
  r.joined[request.replica_id] = request.step;
  // The latest asker's view of the job (every group runs the same job, so they agree).
  r.min_replicas = request.min_replicas;
  r.replicas = request.replicas;
  r.join_timeout = request.join_timeout;
  r.heartbeat_timeout = request.heartbeat_timeout;
  r.reform = r.reform || request.reform;
  job.last_seen[request.replica_id] = Clock::now();
  const uint64_t mine = job.round;
  while (job.round == mine) {
    const auto now = Clock::now();
    if (MaybeDecide(job, now)) {
      decided_.notify_all();
      break;
    }
    if (now >= deadline) {
      job.current.joined.erase(request.replica_id);  // not a member of a quorum it left
      const std::string came = std::to_string(job.current.joined.size() + 1);
      const std::string needed = std::to_string(request.min_replicas);
      return DeadlineExceeded("quorum: " + came + " of at least " + needed +
                              " replica groups of job '" + request.job + "' asked in time")
          .WithReason(kQuorumTooSmall, {{"asked", came}, {"needed", needed}});
    }
    auto wake = deadline;
    if (!job.current.joined.empty()) wake = std::min(wake, job.current.first + r.join_timeout);
    // A silent member is noticed within a tenth of the heartbeat timeout.
    if (r.heartbeat_timeout.count() > 0) wake = std::min(wake, now + r.heartbeat_timeout / 10);
    decided_.wait_until(lock, std::max(wake, now + std::chrono::milliseconds(1)));
  }
  auto decision = job.decided.find(mine);
  if (decision == job.decided.end()) {
    return Status(StatusCode::kAborted,
                  "quorum: the round this group joined was forgotten (it woke too late)");
  }
  Quorum q;
  q.id = decision->second.id;
  q.members = decision->second.members;
  for (std::size_t i = 0; i < q.members.size(); ++i) {
    if (q.members[i].replica_id == request.replica_id) q.replica_rank = static_cast<int>(i);
    if (q.members[i].step > q.max_step) {
      q.max_step = q.members[i].step;
      q.recover_from = static_cast<int>(i);
    }
  }
  q.store_prefix = "ft." + request.job + "." + epoch_ + ".q" + std::to_string(q.id);
  return q;
}

}  // namespace ff::hfreduce

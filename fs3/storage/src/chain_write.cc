// The chain write's rules, apart from I/O and RPC (unit-tested on their own).
#include "storage_service.h"

namespace ff::fs3 {

std::optional<RecentWrites::Applied> RecentWrites::Find(uint64_t request_id) const {
  if (request_id == 0) return std::nullopt;
  auto it = by_id_.find(request_id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second.applied;
}

void RecentWrites::Add(uint64_t request_id, Applied applied, Clock::time_point now) {
  if (request_id == 0) return;
  by_id_[request_id] = Entry{applied, now};
  order_.emplace_back(now, request_id);
  // An id added again (a replica's retried forward) has a newer entry: only the queue position
  // that matches the entry's time removes it.
  auto drop_front = [&] {
    auto [at, id] = order_.front();
    order_.pop_front();
    auto it = by_id_.find(id);
    if (it != by_id_.end() && it->second.at == at) {
      if (now - at < retention_) ++evicted_early_;
      by_id_.erase(it);
    }
  };
  while (!order_.empty() && now - order_.front().first >= retention_)
    drop_front();
  while (by_id_.size() > max_entries_)
    drop_front();
  // Ids added again leave stale queue positions behind: the queue is bounded too.
  while (order_.size() > 2 * max_entries_ + 1)
    drop_front();
}

Status MayContinueWrite(PublicState state, bool head, bool forwarded, uint64_t target) {
  if (!Writable(state)) {
    return Unavailable("target " + std::to_string(target) + " left its chain mid-write");
  }
  if (!forwarded && !head) {
    // A head that lost its place (it paused, was dropped, and came back as the syncing tail)
    // would otherwise commit alone and acknowledge a write no serving replica holds (found by
    // fs3/model/chain.pml). The client retries at the new head.
    return Unavailable("target " + std::to_string(target) +
                       " is no longer the head of its chain; retry at the new head");
  }
  return Status::Ok();
}

bool SuccessorHoldsCommitted(const fs3rpc::ChunkMetaRecord& ours,
                             const fs3rpc::ChunkMetaRecord* theirs) {
  return theirs != nullptr && theirs->committed_version() == ours.committed_version() &&
         theirs->crc32c() == ours.crc32c() && theirs->pending_version() == 0;
}

}  // namespace ff::fs3

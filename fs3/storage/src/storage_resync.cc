// fs3-storage: resync of a successor that rejoined its chain: every committed chunk it lacks or
// holds differently goes to it whole, every chunk it holds that we no longer have is removed,
// then SyncDone lets fs3-mgmtd make it serving.
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "storage_internal.h"

namespace ff::fs3 {

// ---- resync ------------------------------------------------------------------------------------

void StorageService::SyncLoop() {
  while (!stopping_) {
    {
      UniqueLock lock(&mu_);
      routing_changed_.wait_for(lock, std::chrono::milliseconds(200));
    }
    if (stopping_ || CheckServing().ok() == false) continue;
    for (const auto& [id, store] : stores_) {
      auto pos = Locate(id, 0);
      if (!pos.ok() || pos->state != PublicState::kServing || pos->successor.empty()) continue;
      // Is the successor syncing?
      bool syncing = false;
      {
        MutexLock lock(&mu_);
        for (const auto& c : routing_.chains()) {
          for (const auto& t : c.targets()) {
            if (t.target() == pos->successor_target) {
              syncing = ParsePublicState(t.state()) == PublicState::kSyncing;
            }
          }
        }
        if (synced_.contains({pos->chain, pos->chain_version, pos->successor_target})) continue;
      }
      if (!syncing) continue;
      Status st = SyncSuccessor(id, *pos);
      if (st.ok()) {
        MutexLock lock(&mu_);
        synced_.insert({pos->chain, pos->chain_version, pos->successor_target});
      } else {
        spdlog::warn("resync of target {} from {}: {}", pos->successor_target, id, st.message());
      }
    }
  }
}

Status StorageService::SyncSuccessor(uint64_t target, const Position& pos) {
  ChunkStore& store = *stores_.at(target);
  // Writes that decided their successor from older routing (no successor, or another one) end
  // first: each is then in the List below, and every later write forwards to the successor.
  FF_RETURN_IF_ERROR(WaitForOlderWrites(
      target, pos.chain_version, std::chrono::milliseconds(options_.forward_timeout_ms + 10000)));
  fs3rpc::Storage::Stub* peer = Peer(pos.successor);
  fs3rpc::DumpMetaRequest dump_req;
  dump_req.set_target(pos.successor_target);
  fs3rpc::DumpMetaResponse dump;
  FF_RETURN_IF_ERROR(
      CallRpc("fs3-storage DumpMeta", CallOptions::Idempotent(),
              [&](grpc::ClientContext* c) { return peer->DumpMeta(c, dump_req, &dump); }));
  std::map<std::string, fs3rpc::ChunkMetaRecord> theirs;
  for (const auto& m : dump.chunks())
    theirs[ChunkStore::Key(m.id())] = m;
  FF_ASSIGN_OR_RETURN(auto ours, store.List());
  std::size_t sent = 0, removed = 0;
  auto send = [&](fs3rpc::WriteRequest& w) {
    w.set_request_id(RandomId());
    w.set_chain(pos.chain);
    w.set_chain_version(pos.chain_version);
    w.set_target(pos.successor_target);
    w.set_forwarded(true);
    fs3rpc::WriteResponse r;
    Status st;
    for (int attempt = 0; attempt < 3; ++attempt) {
      st = transport_->Write(pos.successor, w, &r, std::chrono::seconds(10));
      if (st.ok() || st.code() != StatusCode::kUnavailable) break;
    }
    return st;
  };
  // Our committed content of a chunk, whole (the chunk's lock held).
  auto send_whole = [&](const fs3rpc::ChunkMetaRecord& meta) -> Status {
    FF_ASSIGN_OR_RETURN(std::string whole, store.Read(meta.id(), 0, meta.length()));
    fs3rpc::WriteRequest w;
    *w.mutable_chunk() = meta.id();
    w.set_data(std::move(whole));
    w.set_update_version(meta.committed_version());
    w.set_full_replace(true);
    FF_RETURN_IF_ERROR(send(w));
    ++sent;
    return Status::Ok();
  };
  for (const auto& listed : ours) {
    // Under the chunk's lock: a write to it waits, and its state is read afresh.
    std::lock_guard chunk_lock(ChunkLock(target, listed.id()));
    auto meta = store.Meta(listed.id());
    if (!meta.ok() || meta->committed_version() == 0) continue;
    const std::string key = ChunkStore::Key(listed.id());
    auto their = theirs.find(key);
    const bool current =
        SuccessorHoldsCommitted(*meta, their == theirs.end() ? nullptr : &their->second);
    if (their != theirs.end()) theirs.erase(their);
    if (!current) FF_RETURN_IF_ERROR(send_whole(*meta));
  }
  for (const auto& [key, m] : theirs) {  // chunks we did not have when we listed ours
    std::lock_guard chunk_lock(ChunkLock(target, m.id()));
    auto meta = store.Meta(m.id());
    if (!meta.ok() && meta.status().code() != StatusCode::kNotFound) return meta.status();
    if (meta.ok() && meta->committed_version() != 0) {
      // Written since the List: the write went to the successor too, but its copy there may
      // have started from one we never compared. Send ours rather than remove theirs.
      FF_RETURN_IF_ERROR(send_whole(*meta));
      continue;
    }
    fs3rpc::WriteRequest w;
    *w.mutable_chunk() = m.id();
    w.set_remove(true);
    FF_RETURN_IF_ERROR(send(w));
    ++removed;
  }
  {
    // A chain that moved on during the resync (the successor left it, say) may have taken
    // writes the successor was not sent: no SyncDone from this version; the next round decides.
    MutexLock lock(&mu_);
    for (const fs3rpc::ChainInfo& c : routing_.chains()) {
      if (c.id() == pos.chain && c.version() != pos.chain_version) {
        return Stale(pos.chain, c.version(), pos.chain_version);
      }
    }
  }
  fs3rpc::SyncDoneRequest done;
  done.set_target(pos.successor_target);
  done.set_chain_version(pos.chain_version);
  fs3rpc::SyncDoneResponse ok;
  FF_RETURN_IF_ERROR(CallRpc("fs3-storage SyncDone", CallOptions::Idempotent(),
                             [&](grpc::ClientContext* c) { return peer->SyncDone(c, done, &ok); }));
  spdlog::info("resynced target {} from {}: {} chunks sent, {} removed", pos.successor_target,
               target, sent, removed);
  return Status::Ok();
}

}  // namespace ff::fs3

// fs3-storage: a write along the chain (CRAQ): the head serialises it per chunk and numbers the
// version, each replica stores it pending and forwards it, the tail commits first and each
// replica commits as the answer comes back; a retried request id is answered, not applied again.
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "storage_internal.h"

namespace ff::fs3 {

// ---- writes ------------------------------------------------------------------------------------

grpc::Status StorageService::Write(grpc::ServerContext*, const fs3rpc::WriteRequest* req,
                                   fs3rpc::WriteResponse* resp) {
  return TimedWrite(*req, resp);
}

grpc::Status StorageService::WriteStream(grpc::ServerContext* ctx,
                                         grpc::ServerReader<fs3rpc::WritePiece>* reader,
                                         fs3rpc::WriteResponse* resp) {
  fs3rpc::WritePiece piece;
  if (!reader->Read(&piece) || !piece.has_header()) {
    return ToGrpcStatus(InvalidArgument("a write stream starts with the request"));
  }
  fs3rpc::WriteRequest req = piece.header();
  uint64_t limit;
  {
    MutexLock lock(&mu_);
    limit = routing_.chunk_size();
  }
  // Streams carry large writes: room for a whole chunk at once, not regrown piece by piece.
  req.mutable_data()->reserve(limit);
  while (reader->Read(&piece)) {
    if (req.data().size() + piece.data().size() > limit) {
      return ToGrpcStatus(InvalidArgument("the streamed data is larger than the chunk size " +
                                          std::to_string(limit)));
    }
    req.mutable_data()->append(piece.data());
  }
  // Read() ends the same way when the sender finished and when it vanished mid-stream: only a
  // stream that brought every byte its header announced is applied.
  if (ctx->IsCancelled() || req.data().size() != req.stream_length()) {
    return ToGrpcStatus(Status(StatusCode::kAborted,
                               "the write stream ended after " + std::to_string(req.data().size()) +
                                   " of " + std::to_string(req.stream_length()) +
                                   " bytes; nothing applied"));
  }
  req.clear_stream_length();
  return TimedWrite(req, resp);
}

grpc::Status StorageService::TimedWrite(const fs3rpc::WriteRequest& request,
                                        fs3rpc::WriteResponse* resp) {
  const fs3rpc::WriteRequest* req = &request;
  const auto start = Clock::now();
  grpc::Status st = ServeRpc("Write", [&] { return DoWrite(*req, resp); });
  if (metrics_) {
    metrics_
        ->Histogram("fs3_storage_write_seconds", "Write latency, through the rest of the chain",
                    Metrics::LatencyBuckets(), {{"role", req->forwarded() ? "replica" : "head"}})
        .Observe(std::chrono::duration<double>(Clock::now() - start).count());
    if (!st.ok())
      metrics_->Counter("fs3_storage_write_errors_total", "Writes refused or failed").Increment();
  }
  return st;
}

Status StorageService::CheckWritePosition(const fs3rpc::WriteRequest& req,
                                          const Position& pos) const {
  if (req.chain() != pos.chain) {
    return InvalidArgument("target " + std::to_string(req.target()) + " is in chain " +
                           std::to_string(pos.chain) + ", not " + std::to_string(req.chain()));
  }
  if (req.chain_version() != pos.chain_version) {
    return Stale(pos.chain, pos.chain_version, req.chain_version());
  }
  if (!Writable(pos.state)) {
    return FailedPrecondition("target " + std::to_string(req.target()) + " is " +
                              std::string(Name(pos.state)) + " and takes no writes");
  }
  if (!req.forwarded() && !pos.head) {
    return Status(StatusCode::kAborted, "target " + std::to_string(req.target()) +
                                            " is not the head of chain " +
                                            std::to_string(pos.chain));
  }
  return Status::Ok();
}

Status StorageService::BeginWrite(uint64_t target, uint64_t chain_version) {
  MutexLock lock(&mu_);
  for (const fs3rpc::ChainInfo& c : routing_.chains()) {
    for (const fs3rpc::ChainTargetInfo& t : c.targets()) {
      if (t.target() != target) continue;
      if (c.version() != chain_version) return Stale(c.id(), c.version(), chain_version);
      ++writing_[{target, chain_version}];
      return Status::Ok();
    }
  }
  return FailedPrecondition("target " + std::to_string(target) + " is in no chain");
}

void StorageService::EndWrite(uint64_t target, uint64_t chain_version) {
  MutexLock lock(&mu_);
  auto it = writing_.find({target, chain_version});
  if (it != writing_.end() && --it->second == 0) writing_.erase(it);
  write_ended_.notify_all();
}

Status StorageService::WaitForOlderWrites(uint64_t target, uint64_t chain_version,
                                          std::chrono::milliseconds timeout) {
  UniqueLock lock(&mu_);
  const bool drained = write_ended_.wait_for(lock, timeout, [&] {
    mu_.AssertHeld();
    if (stopping_) return true;
    auto it = writing_.lower_bound({target, 0});
    return it == writing_.end() || it->first.first != target || it->first.second >= chain_version;
  });
  if (!drained || stopping_) {
    return Unavailable("writes to target " + std::to_string(target) +
                       " under an older chain version are still in progress");
  }
  return Status::Ok();
}

Status StorageService::DoWrite(const fs3rpc::WriteRequest& req, fs3rpc::WriteResponse* resp) {
  FF_RETURN_IF_ERROR(CheckServing());
  auto store_it = stores_.find(req.target());
  if (store_it == stores_.end()) {
    return NotFound("no target " + std::to_string(req.target()) + " on " + options_.node);
  }
  ChunkStore& store = *store_it->second;
  uint64_t chunk_size;
  {
    MutexLock lock(&mu_);
    if (!routing_.initialized()) return FailedPrecondition("the fs3 cluster is not initialised");
    chunk_size = routing_.chunk_size();
  }
  if (!req.has_chunk()) return InvalidArgument("the request names no chunk");
  if (req.truncate() && (req.remove() || !req.data().empty() || req.full_replace())) {
    return InvalidArgument("a truncate carries no data (its new length is the offset)");
  }
  if (!req.remove() && uint64_t{req.offset()} + req.data().size() > chunk_size) {
    return InvalidArgument("offset " + std::to_string(req.offset()) + " + length " +
                           std::to_string(req.data().size()) + " is beyond the chunk size " +
                           std::to_string(chunk_size));
  }
  if (req.full_replace() && req.offset() != 0) {
    return InvalidArgument("a full-chunk replace starts at offset 0");
  }
  // Refused early where the routing already says so; decided again under the chunk's lock.
  FF_ASSIGN_OR_RETURN(Position pos, Locate(req.target(), req.chain_version()));
  FF_RETURN_IF_ERROR(CheckWritePosition(req, pos));
  std::lock_guard chunk_lock(ChunkLock(req.target(), req.chunk()));
  {
    // Under the chunk's lock: a retry that waited here behind its own first attempt finds it.
    MutexLock lock(&mu_);
    if (auto applied = done_.Find(req.request_id())) {
      resp->set_version(applied->version);  // a retry of a write already applied
      resp->set_length(applied->length);
      return Status::Ok();
    }
  }
  // The routing may have moved while this write waited for the chunk: its successor is decided
  // now, and the write is registered under that chain version (a resync waits for it).
  FF_ASSIGN_OR_RETURN(pos, Locate(req.target(), req.chain_version()));
  FF_RETURN_IF_ERROR(CheckWritePosition(req, pos));
  FF_RETURN_IF_ERROR(BeginWrite(req.target(), pos.chain_version));
  uint64_t registered = pos.chain_version;
  struct Registration {
    StorageService* self;
    uint64_t target;
    uint64_t* version;
    ~Registration() { self->EndWrite(target, *version); }
  } registration{this, req.target(), &registered};
  uint64_t version = req.update_version();
  if (!req.forwarded()) {
    auto meta = store.Meta(req.chunk());
    if (!meta.ok() && meta.status().code() != StatusCode::kNotFound) return meta.status();
    version = (meta.ok() ? meta->committed_version() : 0) + 1;
  }
  uint32_t length = 0;
  if (req.truncate() && !req.full_replace()) {
    FF_ASSIGN_OR_RETURN(
        auto pending, store.PrepareTruncate(req.chunk(), version, req.offset(), pos.chain_version));
    length = pending.pending_length();
  } else if (!req.remove()) {
    FF_ASSIGN_OR_RETURN(auto pending, store.Prepare(req.chunk(), version, req.offset(), req.data(),
                                                    req.full_replace(), pos.chain_version));
    length = pending.pending_length();
  }
  // Down the chain; the tail commits first, each replica as the answer comes back.
  fs3rpc::WriteRequest fwd = req;
  fwd.set_forwarded(true);
  fwd.set_update_version(version);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.forward_timeout_ms);
  while (!pos.successor.empty()) {
    fwd.set_target(pos.successor_target);
    fwd.set_chain_version(pos.chain_version);
    fs3rpc::WriteResponse down;
    Status st = transport_->Write(pos.successor, fwd, &down, std::chrono::seconds(10));
    if (st.ok()) break;
    if (st.code() == StatusCode::kStaleVersion && !fwd.full_replace() && !req.remove()) {
      // The successor lacks the base version: send the whole chunk.
      spdlog::info(
          "chain {} chunk {}:{}: target {} lacks the base of version {} ({}); sending "
          "the whole chunk",
          pos.chain, req.chunk().inode(), req.chunk().index(), pos.successor_target, version,
          st.message());
      FF_ASSIGN_OR_RETURN(std::string whole, store.Read(req.chunk(), 0, length, /*pending=*/true));
      fwd.set_full_replace(true);
      fwd.set_truncate(false);
      fwd.set_offset(0);
      fwd.set_data(std::move(whole));
      continue;
    }
    if (st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kIoError ||
        st.code() == StatusCode::kInvalidArgument) {
      // The successor cannot store it (full disk, I/O error): a retry would fail the same way.
      // The write fails now, with the replica's reason; nothing was committed anywhere.
      return Status(st.code(), "chain " + std::to_string(pos.chain) + ": target " +
                                   std::to_string(pos.successor_target) + ": " + st.message());
    }
    if (Clock::now() > deadline || stopping_) {
      return Unavailable("chain " + std::to_string(pos.chain) + ": successor " + pos.successor +
                         " unreachable: " + st.message());
    }
    // Wait for the cluster to react (the successor may be gone), then go on with the new chain.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)RefreshRouting(false, 0);
    FF_ASSIGN_OR_RETURN(pos, Locate(req.target(), 0));
    FF_RETURN_IF_ERROR(MayContinueWrite(pos.state, pos.head, req.forwarded(), req.target()));
    if (pos.chain_version != registered) {  // go on registered under the routing it now uses
      FF_RETURN_IF_ERROR(BeginWrite(req.target(), pos.chain_version));
      EndWrite(req.target(), registered);
      registered = pos.chain_version;
    }
  }
  if (req.remove()) {
    FF_RETURN_IF_ERROR(store.Remove(req.chunk()));
  } else {
    FF_RETURN_IF_ERROR(store.Commit(req.chunk(), version));
  }
  {
    MutexLock lock(&mu_);
    const uint64_t early = done_.evicted_early();
    done_.Add(req.request_id(), {version, length}, Clock::now());
    if (done_.evicted_early() > early && early == 0) {
      spdlog::warn(
          "fs3-storage: more than {} writes within {} s: request ids are forgotten early, so a "
          "client retrying an older one applies it again (raise storage.dedup_max_entries)",
          options_.dedup_max_entries, options_.dedup_retention_s);
    }
  }
  if (metrics_) {
    metrics_->Counter("fs3_storage_write_bytes_total", "Bytes written (this replica)")
        .Increment(static_cast<double>(req.data().size()));
    metrics_->Counter("fs3_storage_write_ops_total", "Writes applied (this replica)").Increment();
  }
  resp->set_version(version);
  resp->set_length(length);
  return Status::Ok();
}

}  // namespace ff::fs3

#include "storage_service.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "common/rpc_client.h"
#include "common/rpc_status.h"
#include "storage_internal.h"

namespace ff::fs3 {

void StorageTargetOptions::Bind(ConfigSection& s) {
  s.Required("id", id);
  s.Check(id > 0, "id", "must be positive");
  s.Required("path", path);
}

void StorageOptions::Bind(ConfigSection& s) {
  s.Required("node", node);
  s.Required("mgmtd", mgmtd);
  s.Optional("advertise", advertise);
  s.Sections("targets", targets);
  s.Check(!targets.empty(), "targets", "list at least one target ([[storage.targets]] id, path)");
  s.Optional("forward_timeout_ms", forward_timeout_ms);
  s.Check(forward_timeout_ms > 0, "forward_timeout_ms", "must be positive");
  s.Optional("dedup_retention_s", dedup_retention_s);
  s.Check(dedup_retention_s > 0, "dedup_retention_s", "must be positive");
  s.Optional("dedup_max_entries", dedup_max_entries);
  s.Check(dedup_max_entries >= 1, "dedup_max_entries", "must be at least 1");
  s.Optional("fault_read_delay_file", fault_read_delay_file);
}

Result<std::unique_ptr<StorageService>> StorageService::Create(
    const StorageOptions& options, Metrics* metrics, std::shared_ptr<ChunkTransport> transport) {
  std::unique_ptr<StorageService> s(new StorageService(options, metrics, std::move(transport)));
  for (const StorageTargetOptions& t : options.targets) {
    if (s->stores_.contains(t.id)) {
      return InvalidArgument("target " + std::to_string(t.id) + " is listed twice");
    }
    FF_ASSIGN_OR_RETURN(s->stores_[t.id], ChunkStore::Open(t.path));
    MutexLock lock(&s->mu_);
    s->local_[t.id] = LocalState::kOnline;  // until the cluster says it is current
  }
  return s;
}

StorageService::StorageService(const StorageOptions& options, Metrics* metrics,
                               std::shared_ptr<ChunkTransport> transport)
    : options_(options),
      metrics_(metrics),
      mgmtd_(std::make_unique<MgmtdReplicas>(options.mgmtd)),
      transport_(transport ? std::move(transport) : std::make_shared<GrpcTransport>()),
      done_(std::chrono::seconds(options.dedup_retention_s),
            static_cast<std::size_t>(options.dedup_max_entries)) {}

StorageService::~StorageService() {
  Stop();
}

void StorageService::Start(const std::string& address) {
  address_ = options_.advertise.empty() ? address : options_.advertise;
  routing_thread_ = std::thread([this] { RoutingLoop(); });
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  sync_ = std::thread([this] { SyncLoop(); });
}

void StorageService::Stop() {
  stopping_ = true;
  routing_changed_.notify_all();
  {
    MutexLock lock(&mu_);  // a resync waiting for writes to drain wakes up and leaves
    write_ended_.notify_all();
  }
  for (std::thread* t : {&heartbeat_, &routing_thread_, &sync_}) {
    if (t->joinable()) t->join();
  }
}

// ---- membership --------------------------------------------------------------------------------

Status StorageService::RefreshRouting(bool wait, uint64_t known) {
  using std::chrono::milliseconds;
  FF_ASSIGN_OR_RETURN(
      fs3rpc::RoutingInfo info,
      FetchRouting(*mgmtd_, RoutingFetch{.known_version = known,
                                         .wait = milliseconds(wait ? 2000 : 0),
                                         .deadline = milliseconds(wait ? 3000 : 2000)}));
  MutexLock lock(&mu_);
  fetched_ = true;
  if (info.version() < routing_.version()) return Status::Ok();
  routing_ = std::move(info);
  // Where each target's service answers, derived once per routing version (requests use it).
  target_address_ = TargetAddresses(routing_);
  for (const fs3rpc::ChainInfo& c : routing_.chains()) {
    for (const fs3rpc::ChainTargetInfo& t : c.targets()) {
      auto it = local_.find(t.target());
      if (it == local_.end() || !registered_) continue;
      auto state = ParsePublicState(t.state()).value_or(PublicState::kOffline);
      const LocalState next = LocalAfterRouting(it->second, state);
      if (it->second == LocalState::kUpToDate && next != LocalState::kUpToDate) {
        // The cluster gave up on it (our lease lapsed): it must be resynced before serving.
        spdlog::warn("target {} was marked {}; it will resync", t.target(), t.state());
      }
      it->second = next;
    }
  }
  if (metrics_) {
    for (const fs3rpc::ChainInfo& c : routing_.chains()) {
      for (const fs3rpc::ChainTargetInfo& t : c.targets()) {
        if (!stores_.contains(t.target())) continue;
        for (auto ps : {PublicState::kServing, PublicState::kSyncing, PublicState::kWaiting,
                        PublicState::kLastSrv, PublicState::kOffline}) {
          metrics_
              ->Gauge("fs3_storage_target_state", "1 for the public state a target is in",
                      {{"target", std::to_string(t.target())}, {"state", std::string(Name(ps))}})
              .Set(t.state() == Name(ps) ? 1 : 0);
        }
      }
    }
  }
  routing_changed_.notify_all();
  return Status::Ok();
}

void StorageService::RoutingLoop() {
  while (!stopping_) {
    uint64_t known;
    {
      MutexLock lock(&mu_);
      known = routing_.version();
    }
    if (!RefreshRouting(/*wait=*/known > 0, known).ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

void StorageService::HeartbeatLoop() {
  // After a restart, wait until the cluster has marked our targets offline (or never put them in
  // a chain), so that each goes through recovery instead of serving what it may have missed.
  while (!stopping_) {
    {
      MutexLock lock(&mu_);
      bool ready = fetched_;
      for (const fs3rpc::ChainInfo& c : routing_.chains()) {
        for (const fs3rpc::ChainTargetInfo& t : c.targets()) {
          if (!stores_.contains(t.target())) continue;
          const auto state = ParsePublicState(t.state());
          if (state != PublicState::kOffline && state != PublicState::kLastSrv) ready = false;
        }
      }
      if (ready) break;
    }
    UniqueLock lock(&mu_);
    routing_changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (!stopping_)
    spdlog::info("{}: registering {} targets with fs3-mgmtd", options_.node, stores_.size());
  while (!stopping_) {
    fs3rpc::HeartbeatRequest req;
    req.set_node(options_.node);
    req.set_address(address_);
    int64_t lease;
    {
      MutexLock lock(&mu_);
      for (const auto& [id, store] : stores_) {
        fs3rpc::ReportedTarget* t = req.add_targets();
        t->set_id(id);
        t->set_path(store->dir());
        t->set_local_state(std::string(Name(local_.at(id))));
      }
      lease = lease_ms_;
    }
    fs3rpc::HeartbeatResponse resp;
    // The lease runs from when the request left, not from when the answer came: an answer that
    // arrives late (this process was frozen, or the network slow) must not extend it past what
    // fs3-mgmtd granted (found by fs3/model/chain.pml).
    const auto sent = Clock::now();
    CallOptions o;
    o.deadline = std::chrono::milliseconds(std::max<int64_t>(200, lease / 4));
    o.max_attempts = 1;
    Status st = CallRpc("fs3-mgmtd Heartbeat", o, [&](grpc::ClientContext* c) {
      return mgmtd_->Attempt([&](fs3rpc::Mgmtd::Stub& s) { return s.Heartbeat(c, req, &resp); });
    });
    {
      MutexLock lock(&mu_);
      if (st.ok()) {
        renewed_ = std::max(renewed_, sent);
        lease_ms_ = resp.lease_ms();
        registered_ = true;
        lease_.Renewed(resp.routing_version());
      }
    }
    if (!st.ok()) spdlog::warn("{}", st.message());
    WatchSpace();
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::clamp<int64_t>(lease / 5, 20, 1000)));
  }
}

void StorageService::WatchSpace() {
  const auto now = Clock::now();
  if (now - space_watched_ < std::chrono::seconds(1)) return;
  space_watched_ = now;
  uint64_t chunk_size;
  {
    MutexLock lock(&mu_);
    chunk_size = routing_.chunk_size();
  }
  if (chunk_size == 0) chunk_size = uint64_t{4} << 20;
  for (const auto& [id, store] : stores_) {
    auto space = store->DiskSpace();
    if (!space.ok()) {
      spdlog::warn("target {}: {}", id, space.status().message());
      continue;
    }
    // Full: not even one chunk's write fits; nearly full: less than a twentieth of the disk left.
    const int level = space->available < chunk_size             ? 2
                      : space->available < space->capacity / 20 ? 1
                                                                : 0;
    const std::string target = std::to_string(id);
    if (metrics_) {
      metrics_
          ->Gauge("fs3_storage_target_capacity_bytes", "Size of the target's disk",
                  {{"target", target}})
          .Set(static_cast<double>(space->capacity));
      metrics_
          ->Gauge("fs3_storage_target_free_bytes",
                  "What writes may still take on the target's disk (its free space less the "
                  "reserve)",
                  {{"target", target}})
          .Set(static_cast<double>(space->available));
      metrics_
          ->Gauge("fs3_storage_target_reserve_bytes",
                  "Free space the target keeps for removals and its database", {{"target", target}})
          .Set(static_cast<double>(space->reserve));
      metrics_
          ->Gauge("fs3_storage_target_full",
                  "1 when less than one chunk is left for writes on the target's disk",
                  {{"target", target}})
          .Set(level == 2 ? 1 : 0);
    }
    int& was = space_level_[id];
    if (level == was) continue;
    const char* what[] = {"has room again", "is nearly full",
                          "is full: writes of a chunk are refused"};
    const std::string line =
        fmt::format("target {} ({}) {}: {} KiB left for writes of {} MiB", id, store->dir(),
                    what[level], space->available >> 10, space->capacity >> 20);
    if (level > was) {
      spdlog::warn("{}{}", line, level == 2 ? "; deleting files makes room" : "");
    } else {
      spdlog::info("{}", line);
    }
    was = level;
  }
}

Status StorageService::CheckServing() const {
  if (stopping_) return Unavailable("fs3-storage is stopping");
  MutexLock lock(&mu_);
  if (!registered_) return Unavailable("fs3-storage " + options_.node + " has not joined yet");
  if (Clock::now() - renewed_ > std::chrono::milliseconds(lease_ms_ / 2)) {
    return Unavailable("fs3-storage " + options_.node +
                       " could not renew its lease: it serves nothing until it can");
  }
  if (!lease_.RoutingCurrent(routing_.version())) {
    // Renewed after a pause: the cluster may have moved on while we did not hear from it. Serve
    // only with routing at least as new as what the renewal reported (found by the model).
    return Unavailable("fs3-storage " + options_.node + " has routing v" +
                       std::to_string(routing_.version()) + ", older than v" +
                       std::to_string(lease_.required_routing()) +
                       " its lease was renewed at: it serves nothing until it has caught up");
  }
  return Status::Ok();
}

Result<StorageService::Position> StorageService::Locate(uint64_t target, uint64_t hint) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      MutexLock lock(&mu_);
      for (const fs3rpc::ChainInfo& c : routing_.chains()) {
        Chain chain;
        chain.id = c.id();
        chain.version = c.version();
        int me = -1;
        for (int i = 0; i < c.targets_size(); ++i) {
          chain.targets.push_back(
              {c.targets(i).target(),
               ParsePublicState(c.targets(i).state()).value_or(PublicState::kOffline)});
          if (c.targets(i).target() == target) me = i;
        }
        if (me < 0) continue;
        if (hint > c.version() && attempt == 0) break;  // our routing is behind: refresh
        Position p;
        p.chain = c.id();
        p.chain_version = c.version();
        p.state = chain.targets[me].state;
        p.head = chain.Head() == me;
        for (int j = me + 1; j < static_cast<int>(chain.targets.size()); ++j) {
          if (Writable(chain.targets[j].state)) {
            p.successor_target = chain.targets[j].target;
            p.successor = AddressOf(p.successor_target);
            break;
          }
        }
        if (int tail = chain.Tail(); tail >= 0) {
          p.tail_target = chain.targets[tail].target;
          p.tail = AddressOf(p.tail_target);
        }
        return p;
      }
    }
    if (attempt == 0) (void)RefreshRouting(false, 0);
  }
  return FailedPrecondition("target " + std::to_string(target) + " is in no chain");
}

std::string StorageService::AddressOf(uint64_t target) const {
  return fs3::AddressOf(target_address_, target);
}

std::mutex& StorageService::ChunkLock(uint64_t target, const fs3rpc::ChunkId& id) {
  uint64_t h = target * 0x9e3779b97f4a7c15ull ^ id.inode() * 0xbf58476d1ce4e5b9ull ^ id.index();
  return chunk_locks_[h % chunk_locks_.size()];
}

fs3rpc::Storage::Stub* StorageService::Peer(const std::string& address) {
  return peers_.Get(address);
}

// ---- reads -------------------------------------------------------------------------------------

std::chrono::milliseconds StorageService::FaultReadDelay() {
  MutexLock lock(&fault_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - fault_checked_ >= std::chrono::milliseconds(100)) {
    fault_checked_ = now;
    std::ifstream in(options_.fault_read_delay_file);
    int64_t ms = 0;
    fault_delay_ =
        std::chrono::milliseconds(in && (in >> ms) && ms > 0 ? std::min<int64_t>(ms, 60000) : 0);
  }
  return fault_delay_;
}

grpc::Status StorageService::Read(grpc::ServerContext* ctx, const fs3rpc::ReadRequest* req,
                                  fs3rpc::ReadResponse* resp) {
  const auto start = Clock::now();
  if (!options_.fault_read_delay_file.empty()) std::this_thread::sleep_for(FaultReadDelay());
  grpc::Status st = DoRead(ctx, req, resp);
  if (metrics_) {
    metrics_->Histogram("fs3_storage_read_seconds", "Read latency", Metrics::LatencyBuckets())
        .Observe(std::chrono::duration<double>(Clock::now() - start).count());
    if (!st.ok())
      metrics_->Counter("fs3_storage_read_errors_total", "Reads refused or failed").Increment();
  }
  return st;
}

grpc::Status StorageService::ReadStream(grpc::ServerContext* ctx, const fs3rpc::ReadRequest* req,
                                        grpc::ServerWriter<fs3rpc::ReadResponse>* writer) {
  fs3rpc::ReadResponse whole;
  grpc::Status st = Read(ctx, req, &whole);
  if (!st.ok()) return st;
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  std::size_t off = 0;
  do {
    fs3rpc::ReadResponse piece;
    if (off == 0) {
      piece.set_version(whole.version());
      piece.set_chunk_length(whole.chunk_length());
    }
    piece.set_data(whole.data().substr(off, kPiece));
    if (!writer->Write(piece)) break;
    off += kPiece;
  } while (off < whole.data().size());
  return grpc::Status::OK;
}

grpc::Status StorageService::DoRead(grpc::ServerContext*, const fs3rpc::ReadRequest* req,
                                    fs3rpc::ReadResponse* resp) {
  return ServeRpc("Read", [&]() -> Status {
    FF_RETURN_IF_ERROR(CheckServing());
    auto it = stores_.find(req->target());
    if (it == stores_.end()) {
      return NotFound("no target " + std::to_string(req->target()) + " on " + options_.node);
    }
    uint64_t chunk_size;
    {
      MutexLock lock(&mu_);
      chunk_size = routing_.chunk_size();
    }
    if (uint64_t{req->offset()} + req->length() > chunk_size) {
      return InvalidArgument("offset " + std::to_string(req->offset()) + " + length " +
                             std::to_string(req->length()) + " is beyond the chunk size " +
                             std::to_string(chunk_size));
    }
    FF_ASSIGN_OR_RETURN(Position pos, Locate(req->target(), 0));
    if (!Readable(pos.state)) {
      return FailedPrecondition("target " + std::to_string(req->target()) + " is " +
                                std::string(Name(pos.state)) + " and serves no reads");
    }
    // Reads take no lock: a write may commit (or begin) meanwhile. One version is read, the one
    // the record read first names, against its checksums; a read that fails because a commit
    // moved that version (its file renamed, the record changed) is made again.
    constexpr int kAttempts = 8;
    for (int attempt = 0;; ++attempt) {
      auto meta = it->second->Meta(req->chunk());
      if (!meta.ok()) {
        if (meta.status().code() != StatusCode::kNotFound) return meta.status();
        return Status::Ok();  // a hole: nothing written there
      }
      bool pending = false;
      if (meta->pending_version() != 0 && pos.tail_target != req->target() && !pos.tail.empty()) {
        // CRAQ's apportioned query: which version has the tail committed?
        fs3rpc::QueryVersionRequest q;
        q.set_target(pos.tail_target);
        *q.mutable_chunk() = req->chunk();
        fs3rpc::QueryVersionResponse v;
        fs3rpc::Storage::Stub* tail = Peer(pos.tail);
        FF_RETURN_IF_ERROR(
            CallRpc("fs3-storage QueryVersion", CallOptions::Idempotent(),
                    [&](grpc::ClientContext* c) { return tail->QueryVersion(c, q, &v); }));
        if (v.committed_version() == meta->pending_version()) {
          pending = true;
        } else if (v.committed_version() != meta->committed_version()) {
          return Unavailable("chunk is being rewritten; retry");
        }
      }
      Result<std::string> data = it->second->ReadAs(*meta, req->offset(), req->length(), pending);
      if (!data.ok()) {
        auto now = it->second->Meta(req->chunk());
        const bool moved = !now.ok() || now->committed_version() != meta->committed_version() ||
                           now->pending_version() != meta->pending_version();
        if (attempt + 1 == kAttempts) {
          // Still failing with the record unchanged: a real error (a corrupt block, a lost file).
          return moved ? Unavailable("chunk is being rewritten; retry") : data.status();
        }
        // A commit renames the file before it records the version: a moment where the record
        // still names a pending file that is gone. Then again, a little later.
        if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
        continue;
      }
      resp->set_version(pending ? meta->pending_version() : meta->committed_version());
      resp->set_chunk_length(pending ? meta->pending_length() : meta->length());
      if (metrics_) {
        metrics_->Counter("fs3_storage_read_bytes_total", "Bytes read")
            .Increment(static_cast<double>(data->size()));
      }
      resp->set_data(std::move(*data));
      return Status::Ok();
    }
  });
}

grpc::Status StorageService::QueryVersion(grpc::ServerContext*,
                                          const fs3rpc::QueryVersionRequest* req,
                                          fs3rpc::QueryVersionResponse* resp) {
  return ServeRpc("QueryVersion", [&]() -> Status {
    auto it = stores_.find(req->target());
    if (it == stores_.end()) return NotFound("no target " + std::to_string(req->target()));
    auto meta = it->second->Meta(req->chunk());
    if (meta.ok()) resp->set_committed_version(meta->committed_version());
    return meta.ok() || meta.status().code() == StatusCode::kNotFound ? Status::Ok()
                                                                      : meta.status();
  });
}

grpc::Status StorageService::DumpMeta(grpc::ServerContext*, const fs3rpc::DumpMetaRequest* req,
                                      fs3rpc::DumpMetaResponse* resp) {
  return ServeRpc("DumpMeta", [&]() -> Status {
    auto it = stores_.find(req->target());
    if (it == stores_.end()) return NotFound("no target " + std::to_string(req->target()));
    FF_ASSIGN_OR_RETURN(auto chunks, it->second->List());
    for (auto& c : chunks)
      *resp->add_chunks() = std::move(c);
    return Status::Ok();
  });
}

grpc::Status StorageService::SyncDone(grpc::ServerContext*, const fs3rpc::SyncDoneRequest* req,
                                      fs3rpc::SyncDoneResponse*) {
  return ServeRpc("SyncDone", [&]() -> Status {
    if (!stores_.contains(req->target())) {  // the same targets as local_, fixed at Create
      return NotFound("no target " + std::to_string(req->target()));
    }
    // Only the resync of the chain version this target is syncing in makes it up to date: one
    // that began under an older version may have missed writes made since (the chain moved).
    FF_ASSIGN_OR_RETURN(Position pos, Locate(req->target(), req->chain_version()));
    if (pos.chain_version != req->chain_version()) {
      return Stale(pos.chain, pos.chain_version, req->chain_version());
    }
    if (pos.state != PublicState::kSyncing) {
      return FailedPrecondition("target " + std::to_string(req->target()) + " is " +
                                std::string(Name(pos.state)) + ", not syncing");
    }
    MutexLock lock(&mu_);
    local_[req->target()] = LocalState::kUpToDate;
    spdlog::info("target {} is up to date", req->target());
    return Status::Ok();
  });
}

grpc::Status StorageService::Extent(grpc::ServerContext*, const fs3rpc::ExtentRequest* req,
                                    fs3rpc::ExtentResponse* resp) {
  return ServeRpc("Extent", [&]() -> Status {
    auto it = stores_.find(req->target());
    if (it == stores_.end()) return NotFound("no target " + std::to_string(req->target()));
    FF_ASSIGN_OR_RETURN(auto extent, it->second->Extent(req->inode()));
    if (extent.last) *resp->mutable_last() = std::move(*extent.last);
    resp->set_stored_bytes(extent.stored_bytes);
    return Status::Ok();
  });
}

grpc::Status StorageService::SpaceInfo(grpc::ServerContext*, const fs3rpc::SpaceInfoRequest* req,
                                       fs3rpc::SpaceInfoResponse* resp) {
  return ServeRpc("SpaceInfo", [&]() -> Status {
    auto it = stores_.find(req->target());
    if (it == stores_.end()) return NotFound("no target " + std::to_string(req->target()));
    FF_ASSIGN_OR_RETURN(ChunkStore::Space space, it->second->DiskSpace());
    resp->set_capacity_bytes(space.capacity);
    resp->set_free_bytes(space.available);
    resp->set_reserve_bytes(space.reserve);
    const ChunkStore::Usage usage = it->second->usage();
    resp->set_chunks(usage.chunks);
    resp->set_used_bytes(usage.bytes);
    return Status::Ok();
  });
}

}  // namespace ff::fs3

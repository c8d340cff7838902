#include "storage_service.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <random>

#include "common/rpc_client.h"
#include "common/rpc_status.h"

namespace ff::fs3 {
namespace {

using Clock = std::chrono::steady_clock;

Status Stale(uint32_t chain, uint64_t have, uint64_t got) {
  return Status(StatusCode::kAborted, "stale chain version: chain " + std::to_string(chain) +
                                          " is at v" + std::to_string(have) +
                                          ", the request has v" + std::to_string(got));
}

uint64_t RandomId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

}  // namespace

void StorageTargetOptions::Bind(ConfigSection& s) {
  s.Required("id", id);
  s.Check(id > 0, "id", "must be positive");
  s.Required("path", path);
}

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
}

Result<std::unique_ptr<StorageService>> StorageService::Create(
    const StorageOptions& options, Metrics* metrics, std::shared_ptr<ChunkTransport> transport) {
  std::unique_ptr<StorageService> s(new StorageService(options, metrics, std::move(transport)));
  for (const StorageTargetOptions& t : options.targets) {
    if (s->stores_.contains(t.id)) {
      return InvalidArgument("target " + std::to_string(t.id) + " is listed twice");
    }
    FF_ASSIGN_OR_RETURN(s->stores_[t.id], ChunkStore::Open(t.path));
    s->local_[t.id] = LocalState::kOnline;  // until the cluster says it is current
  }
  return s;
}

StorageService::StorageService(const StorageOptions& options, Metrics* metrics,
                               std::shared_ptr<ChunkTransport> transport)
    : options_(options),
      metrics_(metrics),
      mgmtd_(fs3rpc::Mgmtd::NewStub(MakeChannel(options.mgmtd))),
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
  std::lock_guard lock(mu_);
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
      std::lock_guard lock(mu_);
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
      std::lock_guard lock(mu_);
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
    std::unique_lock lock(mu_);
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
      std::lock_guard lock(mu_);
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
    Status st = CallRpc("fs3-mgmtd Heartbeat", o,
                        [&](grpc::ClientContext* c) { return mgmtd_->Heartbeat(c, req, &resp); });
    {
      std::lock_guard lock(mu_);
      if (st.ok()) {
        renewed_ = std::max(renewed_, sent);
        lease_ms_ = resp.lease_ms();
        registered_ = true;
        lease_.Renewed(resp.routing_version());
      }
    }
    if (!st.ok()) spdlog::warn("{}", st.message());
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::clamp<int64_t>(lease / 5, 20, 1000)));
  }
}

Status StorageService::CheckServing() const {
  if (stopping_) return Unavailable("fs3-storage is stopping");
  std::lock_guard lock(mu_);
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
      std::lock_guard lock(mu_);
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

// ---- writes ------------------------------------------------------------------------------------

grpc::Status StorageService::Write(grpc::ServerContext*, const fs3rpc::WriteRequest* req,
                                   fs3rpc::WriteResponse* resp) {
  return TimedWrite(*req, resp);
}

grpc::Status StorageService::WriteStream(grpc::ServerContext*,
                                         grpc::ServerReader<fs3rpc::WritePiece>* reader,
                                         fs3rpc::WriteResponse* resp) {
  fs3rpc::WritePiece piece;
  if (!reader->Read(&piece) || !piece.has_header()) {
    return ToGrpcStatus(InvalidArgument("a write stream starts with the request"));
  }
  fs3rpc::WriteRequest req = piece.header();
  uint64_t limit;
  {
    std::lock_guard lock(mu_);
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

Status StorageService::DoWrite(const fs3rpc::WriteRequest& req, fs3rpc::WriteResponse* resp) {
  FF_RETURN_IF_ERROR(CheckServing());
  auto store_it = stores_.find(req.target());
  if (store_it == stores_.end()) {
    return NotFound("no target " + std::to_string(req.target()) + " on " + options_.node);
  }
  ChunkStore& store = *store_it->second;
  uint64_t chunk_size;
  {
    std::lock_guard lock(mu_);
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
  FF_ASSIGN_OR_RETURN(Position pos, Locate(req.target(), req.chain_version()));
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
  {
    std::lock_guard lock(mu_);
    if (auto applied = done_.Find(req.request_id())) {
      resp->set_version(applied->version);  // a retry of a write already applied
      resp->set_length(applied->length);
      return Status::Ok();
    }
  }
  std::lock_guard chunk_lock(ChunkLock(req.target(), req.chunk()));
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
  }
  if (req.remove()) {
    FF_RETURN_IF_ERROR(store.Remove(req.chunk()));
  } else {
    FF_RETURN_IF_ERROR(store.Commit(req.chunk(), version));
  }
  {
    std::lock_guard lock(mu_);
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

// ---- reads -------------------------------------------------------------------------------------

grpc::Status StorageService::Read(grpc::ServerContext* ctx, const fs3rpc::ReadRequest* req,
                                  fs3rpc::ReadResponse* resp) {
  const auto start = Clock::now();
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
      std::lock_guard lock(mu_);
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
    FF_ASSIGN_OR_RETURN(std::string data,
                        it->second->Read(req->chunk(), req->offset(), req->length(), pending));
    resp->set_version(pending ? meta->pending_version() : meta->committed_version());
    resp->set_chunk_length(pending ? meta->pending_length() : meta->length());
    if (metrics_) {
      metrics_->Counter("fs3_storage_read_bytes_total", "Bytes read")
          .Increment(static_cast<double>(data.size()));
    }
    resp->set_data(std::move(data));
    return Status::Ok();
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
    std::lock_guard lock(mu_);
    auto it = local_.find(req->target());
    if (it == local_.end()) return NotFound("no target " + std::to_string(req->target()));
    it->second = LocalState::kUpToDate;
    spdlog::info("target {} is up to date", req->target());
    return Status::Ok();
  });
}

grpc::Status StorageService::LastChunk(grpc::ServerContext*, const fs3rpc::LastChunkRequest* req,
                                       fs3rpc::ChunkMetaRecord* resp) {
  return ServeRpc("LastChunk", [&]() -> Status {
    auto it = stores_.find(req->target());
    if (it == stores_.end()) return NotFound("no target " + std::to_string(req->target()));
    FF_ASSIGN_OR_RETURN(auto last, it->second->LastChunk(req->inode()));
    if (last) *resp = std::move(*last);  // none: an empty record (no id)
    return Status::Ok();
  });
}

grpc::Status StorageService::SpaceInfo(grpc::ServerContext*, const fs3rpc::SpaceInfoRequest* req,
                                       fs3rpc::SpaceInfoResponse* resp) {
  return ServeRpc("SpaceInfo", [&]() -> Status {
    auto it = stores_.find(req->target());
    if (it == stores_.end()) return NotFound("no target " + std::to_string(req->target()));
    struct statvfs vfs {};
    if (statvfs(it->second->dir().c_str(), &vfs) != 0) {
      return Status::FromErrno(errno, "statvfs " + it->second->dir());
    }
    resp->set_capacity_bytes(uint64_t{vfs.f_blocks} * vfs.f_frsize);
    resp->set_free_bytes(uint64_t{vfs.f_bavail} * vfs.f_frsize);
    const ChunkStore::Usage usage = it->second->usage();
    resp->set_chunks(usage.chunks);
    resp->set_used_bytes(usage.bytes);
    return Status::Ok();
  });
}

// ---- resync ------------------------------------------------------------------------------------

void StorageService::SyncLoop() {
  while (!stopping_) {
    {
      std::unique_lock lock(mu_);
      routing_changed_.wait_for(lock, std::chrono::milliseconds(200));
    }
    if (stopping_ || CheckServing().ok() == false) continue;
    for (const auto& [id, store] : stores_) {
      auto pos = Locate(id, 0);
      if (!pos.ok() || pos->state != PublicState::kServing || pos->successor.empty()) continue;
      // Is the successor syncing?
      bool syncing = false;
      {
        std::lock_guard lock(mu_);
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
        std::lock_guard lock(mu_);
        synced_.insert({pos->chain, pos->chain_version, pos->successor_target});
      } else {
        spdlog::warn("resync of target {} from {}: {}", pos->successor_target, id, st.message());
      }
    }
  }
}

Status StorageService::SyncSuccessor(uint64_t target, const Position& pos) {
  ChunkStore& store = *stores_.at(target);
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
    fs3rpc::WriteResponse r;
    Status st;
    for (int attempt = 0; attempt < 3; ++attempt) {
      st = transport_->Write(pos.successor, w, &r, std::chrono::seconds(10));
      if (st.ok() || st.code() != StatusCode::kUnavailable) break;
    }
    return st;
  };
  for (const auto& listed : ours) {
    std::lock_guard chunk_lock(ChunkLock(target, listed.id()));
    auto meta = store.Meta(listed.id());
    if (!meta.ok() || meta->committed_version() == 0) continue;
    const std::string key = ChunkStore::Key(listed.id());
    auto their = theirs.find(key);
    const bool current =
        their != theirs.end() && their->second.committed_version() == meta->committed_version() &&
        their->second.crc32c() == meta->crc32c() && their->second.pending_version() == 0;
    if (their != theirs.end()) theirs.erase(their);
    if (current) continue;
    FF_ASSIGN_OR_RETURN(std::string whole, store.Read(listed.id(), 0, meta->length()));
    fs3rpc::WriteRequest w;
    w.set_request_id(RandomId());
    w.set_chain(pos.chain);
    w.set_chain_version(pos.chain_version);
    w.set_target(pos.successor_target);
    *w.mutable_chunk() = listed.id();
    w.set_data(std::move(whole));
    w.set_update_version(meta->committed_version());
    w.set_full_replace(true);
    w.set_forwarded(true);
    FF_RETURN_IF_ERROR(send(w));
    ++sent;
  }
  for (const auto& [key, m] : theirs) {  // chunks we no longer have
    fs3rpc::WriteRequest w;
    w.set_request_id(RandomId());
    w.set_chain(pos.chain);
    w.set_chain_version(pos.chain_version);
    w.set_target(pos.successor_target);
    *w.mutable_chunk() = m.id();
    w.set_remove(true);
    w.set_forwarded(true);
    FF_RETURN_IF_ERROR(send(w));
    ++removed;
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

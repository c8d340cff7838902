#include "meta_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "common/net.h"
#include "common/rpc_status.h"
#include "common/tls.h"
#include "fs3/meta_frames.h"

namespace ff::fs3 {
namespace {

constexpr uint64_t kRequestMemorySeconds = 3600;  // how long applied request ids are kept
constexpr std::chrono::seconds kPruneEvery(60);   // how often old ones are looked for

Chains ChainsOf(const fs3rpc::Layout& layout) {
  return {layout.chains().data(), static_cast<std::size_t>(layout.chains_size())};
}

Caller CallerOf(const fs3rpc::Credentials& c) {
  return Caller{c.uid(), c.gid(), {c.groups().begin(), c.groups().end()}};
}

}  // namespace

void MetaOptions::Bind(ConfigSection& s) {
  s.Optional("engine", engine);
  s.Check(engine == "rocksdb" || engine == "etcd", "engine", "must be \"rocksdb\" or \"etcd\"");
  s.Optional("data_dir", data_dir);
  s.Check(engine != "rocksdb" || !data_dir.empty() || s.mode() != ConfigSection::Mode::kRead,
          "data_dir", "is required with engine = \"rocksdb\"");
  s.Optional("etcd_endpoints", etcd_endpoints);
  s.Check(engine != "etcd" || !etcd_endpoints.empty() || s.mode() != ConfigSection::Mode::kRead,
          "etcd_endpoints", "is required with engine = \"etcd\"");
  s.Optional("etcd_prefix", etcd_prefix);
  s.Check(!etcd_prefix.empty(), "etcd_prefix", "must not be empty");
  s.Optional("name", name);
  s.Optional("chunk_size", chunk_size);
  s.Check(chunk_size >= 4096 && (chunk_size & (chunk_size - 1)) == 0, "chunk_size",
          "must be a power of two of at least 4096");
  s.Optional("stripe", stripe);
  s.Check(stripe >= 1, "stripe", "must be at least 1");
  s.Optional("mgmtd", mgmtd);
  s.Optional("gc_interval_ms", gc_interval_ms);
  s.Optional("client_lease_s", client_lease_s);
  s.Check(client_lease_s >= 2 && client_lease_s <= 3600, "client_lease_s",
          "must be 2 to 3600 seconds");
  s.Check(gc_interval_ms >= 10, "gc_interval_ms", "must be at least 10");
  s.Optional("late_write_s", late_write_s);
  s.Check(late_write_s >= 1 && late_write_s <= 3600, "late_write_s", "must be 1 to 3600 seconds");
  s.Optional("sync_interval_ms", sync_interval_ms);
  s.Check(sync_interval_ms <= 60000, "sync_interval_ms",
          "must be 0 (every answer waits for the disk) to 60000");
  s.Optional("frames_listen", frames_listen);
  if (s.mode() == ConfigSection::Mode::kRead && !frames_listen.empty() && frames_listen != "off") {
    std::string host;
    int port = 0;
    Status st = SplitHostPort(frames_listen, &host, &port);
    s.Check(st.ok(), "frames_listen", st.message() + "; or \"\" or \"off\"");
  }
}

Result<std::unique_ptr<MetaService>> MetaService::Create(const MetaOptions& options,
                                                         Metrics* metrics) {
  fs3rpc::Layout layout;
  layout.set_chunk_size(options.chunk_size);
  layout.set_stripe(options.stripe);
  if (options.engine == "etcd") {
    FF_ASSIGN_OR_RETURN(auto client, etcd::Client::Connect(options.etcd_endpoints));
    FF_ASSIGN_OR_RETURN(auto store, MetaStore::OpenEtcd(client.get(), options.etcd_prefix, layout));
    store->set_client_lease_s(options.client_lease_s);
    spdlog::info("namespace in etcd under {} ({})", options.etcd_prefix,
                 fmt::join(options.etcd_endpoints, ","));
    return std::unique_ptr<MetaService>(
        new MetaService(options, std::move(client), std::move(store), metrics));
  }
  FF_ASSIGN_OR_RETURN(auto store, MetaStore::Open(options.data_dir + "/meta", layout));
  store->set_client_lease_s(options.client_lease_s);
  return std::unique_ptr<MetaService>(new MetaService(options, nullptr, std::move(store), metrics));
}

Result<StorageClient*> MetaService::Storage() {
  if (options_.mgmtd.empty()) return FailedPrecondition("fs3-meta has no mgmtd configured");
  MutexLock lock(&storage_mu_);
  if (!storage_) {
    ClientOptions o;
    o.mgmtd = options_.mgmtd;
    o.retry_timeout = std::chrono::seconds(20);
    FF_ASSIGN_OR_RETURN(storage_, StorageClient::Create(o));
  }
  return storage_.get();
}

Result<fs3rpc::Inode> MetaService::Settle(uint64_t ino, uint64_t at_least) {
  uint64_t length = at_least;
  std::optional<uint64_t> stored_bytes;
  if (!options_.mgmtd.empty()) {
    FF_ASSIGN_OR_RETURN(fs3rpc::Inode inode, store_->GetAttr(ino));
    if (inode.type() == fs3rpc::INODE_FILE) {
      FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
      FF_ASSIGN_OR_RETURN(StorageClient::Extent stored, storage->StoredExtent(ino));
      length = std::max(length, stored.length);
      stored_bytes = stored.stored_bytes;
    }
  }
  return store_->SettleLength(ino, length, /*written=*/true, stored_bytes);
}

namespace {
uint64_t UnixSeconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

Status MetaService::Recheck(uint64_t ino) {
  return store_->MarkRecheck(ino, UnixSeconds() + options_.late_write_s);
}

Result<std::size_t> MetaService::SettleMarked() {
  // Most marks belong to sessions still open: a sweep goes through up to 16 pages of them and
  // the next goes on from there.
  std::vector<MetaStore::SettleMark> due;
  for (int page = 0; page < 16; ++page) {
    std::string next;
    FF_ASSIGN_OR_RETURN(auto some, store_->DueSettles(settle_cursor_, 512, &next));
    settle_cursor_ = next;
    for (auto& m : some)
      due.push_back(std::move(m));
    if (next.empty()) break;
  }
  const uint64_t now_s = UnixSeconds();
  for (const MetaStore::SettleMark& mark : due) {
    auto inode = store_->GetAttr(mark.ino);
    if (!inode.ok() && inode.status().code() != StatusCode::kNotFound) return inode.status();
    if (inode.ok() && inode->type() == fs3rpc::INODE_FILE && !options_.mgmtd.empty()) {
      FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
      FF_ASSIGN_OR_RETURN(StorageClient::Extent extent, storage->StoredExtent(mark.ino));
      const uint64_t stored = extent.length;
      FF_ASSIGN_OR_RETURN(
          fs3rpc::Inode settled,
          store_->SettleLength(mark.ino, stored,
                               /*written=*/stored > inode->size(), extent.stored_bytes));
      if (settled.size() > inode->size()) {
        spdlog::info("inode {}: length settled from storage to {} (was {}) after {}", mark.ino,
                     settled.size(), inode->size(),
                     mark.session.client != 0 ? "client " + std::to_string(mark.session.client) +
                                                    "'s session ended without its close"
                                              : std::string("a failed write"));
      }
    }
    // A session that ended without its close may have left writes in flight in the chains.
    const bool recheck =
        inode.ok() && inode->type() == fs3rpc::INODE_FILE && mark.session.client != 0;
    FF_RETURN_IF_ERROR(store_->SettleDone(mark, recheck ? now_s + options_.late_write_s : 0));
  }
  return due.size();
}

void MetaService::Start(const std::string& rpc_address) {
  std::string listen = options_.frames_listen;
  if (listen.empty() && ProcessTlsEnabled()) {
    // Frames are plain TCP with no authentication: where the cluster runs TLS, metadata calls go
    // over gRPC unless the config asks for frames.
    spdlog::info(
        "no frame transport: the cluster runs TLS and frames are plain (frames_listen "
        "serves them anyway)");
    listen = "off";
  }
  if (listen.empty() && !rpc_address.empty()) {
    std::string host;
    int port = 0;
    if (SplitHostPort(rpc_address, &host, &port).ok()) listen = JoinHostPort(host, 0);
  }
  if (!listen.empty() && listen != "off") {
    std::map<uint16_t, FrameServer::Handler> handlers;
#define FS3_META_FRAME_HANDLER(id, name, Req, Resp)             \
  handlers[id] = FrameServer::Typed<fs3rpc::Req, fs3rpc::Resp>( \
      [this](const fs3rpc::Req& r, fs3rpc::Resp* out) { return name(nullptr, &r, out); });
    FS3_META_FRAME_METHODS(FS3_META_FRAME_HANDLER)
#undef FS3_META_FRAME_HANDLER
    auto server = FrameServer::Start(listen, std::move(handlers));
    if (server.ok()) {
      frames_ = std::move(*server);
      spdlog::info("frame transport listening on {}", frames_->address());
    } else {  // clients use gRPC
      spdlog::error("no frame transport: {}", server.status().message());
    }
  }
  if (etcd_) {  // one collector among the servers of the namespace
    if (options_.name.empty()) options_.name = rpc_address;
    gc_election_ = std::make_unique<LeaderElection>(
        etcd_.get(),
        ElectionOptions{.key = options_.etcd_prefix + "gc-leader", .value = options_.name});
    gc_election_->Start();
  }
  if (options_.sync_interval_ms > 0 && options_.engine == "rocksdb") {
    syncer_ = std::thread([this] {
      bool failed = false;
      UniqueLock lock(&gc_mu_);
      while (!stopping_) {
        gc_cv_.wait_for(lock, std::chrono::milliseconds(options_.sync_interval_ms));
        if (stopping_) break;
        lock.unlock();
        // A failed sync is sticky (every later change is refused: fs3-meta must restart and
        // recover from the log), so it is logged once.
        Status st = store_->SyncAll();
        if (!st.ok() && !failed) {
          spdlog::critical("syncing the namespace's log: {}; changes are refused from now on",
                           st.ToString());
        }
        failed = !st.ok();
        if (metrics_) ReportLog();
        lock.lock();
      }
    });
  }
  gc_ = std::thread([this] {
    // A failure that lasts (a full or unreachable target) is logged when it starts, when its
    // reason changes and once a minute, not every round; its end is logged too.
    std::string failing;
    auto said = std::chrono::steady_clock::time_point{};
    UniqueLock lock(&gc_mu_);
    while (!stopping_) {
      gc_cv_.wait_for(lock, std::chrono::milliseconds(options_.gc_interval_ms));
      if (stopping_) break;
      lock.unlock();
      auto n = CollectGarbage();
      const auto now = std::chrono::steady_clock::now();
      if (!n.ok()) {
        const std::string why = n.status().message();
        if (why != failing || now - said > std::chrono::minutes(1)) {
          spdlog::warn("garbage collection: {} (tried again every {} ms)", why,
                       options_.gc_interval_ms);
          said = now;
        }
        failing = why;
      } else if (!failing.empty()) {
        spdlog::info("garbage collection works again ({} files' data deleted)", *n);
        failing.clear();
      }
      lock.lock();
    }
  });
}

void MetaService::Stop() {
  {
    MutexLock lock(&gc_mu_);
    stopping_ = true;
  }
  gc_cv_.notify_all();
  if (gc_.joinable()) gc_.join();
  if (syncer_.joinable()) syncer_.join();
  if (gc_election_) gc_election_->Resign();
  if (frames_) frames_->Shutdown();
  (void)store_->SyncAll();  // what was answered is on disk when fs3-meta stops
}

bool MetaService::CollectsGarbage() const {
  return !gc_election_ || gc_election_->IsLeader();
}

Result<std::size_t> MetaService::CollectGarbage() {
  if (!CollectsGarbage()) return std::size_t{0};
  // The request ids and the sessions are each a scan of all their keys: now and then, not each
  // round (request ids are kept an hour; a lease lasts client_lease_s).
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_prune_) {
    FF_RETURN_IF_ERROR(store_->PruneRequests(kRequestMemorySeconds).status());
    next_prune_ = now + kPruneEvery;
  }
  if (now >= next_sweep_) {
    FF_ASSIGN_OR_RETURN(std::size_t ended, store_->EndExpiredSessions());
    if (ended > 0) spdlog::info("ended {} sessions or files of clients whose lease expired", ended);
    // Storage may be down: the next sweep settles what this one could not.
    if (Status st = SettleMarked().status(); !st.ok()) {
      spdlog::warn("settling the lengths of files whose writers went: {}", st.ToString());
    }
    next_sweep_ = now + std::chrono::milliseconds(options_.client_lease_s * 1000 / 4);
  }
  FF_ASSIGN_OR_RETURN(auto garbage, store_->Garbage());
  if (garbage.empty() || options_.mgmtd.empty()) return std::size_t{0};
  FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
  // A removal may still be only in the log (sync_interval_ms): the chunks go once it is on disk,
  // so that a crash of the machine cannot bring back a file whose data is gone.
  FF_RETURN_IF_ERROR(store_->SyncAll());
  std::size_t done = 0;
  for (uint64_t ino : garbage) {
    FF_ASSIGN_OR_RETURN(fs3rpc::Layout layout, store_->GarbageLayout(ino));
    FF_RETURN_IF_ERROR(storage->RemoveData(ino, ChainsOf(layout)));
    FF_RETURN_IF_ERROR(store_->Forget(ino));
    ++done;
    if (metrics_) {
      metrics_->Counter("fs3_meta_gc_files_total", "Removed files whose chunks were deleted")
          .Increment();
    }
  }
  return done;
}

MetaService::MetaService(const MetaOptions& options, std::unique_ptr<etcd::Client> etcd,
                         std::unique_ptr<MetaStore> store, Metrics* metrics)
    : options_(options), etcd_(std::move(etcd)), store_(std::move(store)), metrics_(metrics) {
  if (!metrics_) return;
  conflicts_ = &metrics_->Counter("fs3_meta_txn_conflicts_total",
                                  "Operations run again after a conflict (etcd engine)");
  grouped_ = &metrics_->Counter("fs3_meta_txn_grouped_total",
                                "Operations whose commit shared one etcd request with others");
  logged_batches_ = &metrics_->Counter("fs3_meta_logged_batches_total",
                                       "Metadata changes written to the log (one per operation)");
  log_syncs_ =
      &metrics_->Counter("fs3_meta_log_syncs_total",
                         "Syncs of the log; concurrent operations share one (group commit)");
  unsynced_ = &metrics_->Gauge(
      "fs3_meta_log_unsynced_writes",
      "Key writes answered and logged but not yet on disk (a crash of the machine would lose them; "
      "sync_interval_ms bounds how long they stay)");
}

void MetaService::ReportLog() {
  // Counters only move forward, whichever thread reports last.
  auto advance = [](std::atomic<uint64_t>& reported, uint64_t now, prometheus::Counter& c) {
    uint64_t before = reported.load();
    while (now > before && !reported.compare_exchange_weak(before, now)) {
    }
    if (now > before) c.Increment(static_cast<double>(now - before));
  };
  advance(reported_batches_, store_->LoggedBatches(), *logged_batches_);
  advance(reported_syncs_, store_->LogSyncs(), *log_syncs_);
  advance(reported_conflicts_, store_->Conflicts(), *conflicts_);
  advance(reported_grouped_, store_->GroupedCommits(), *grouped_);
  unsynced_->Set(static_cast<double>(store_->UnsyncedWrites()));
}

grpc::Status MetaService::Serve(const char* op, const std::function<Status()>& body, bool durable) {
  const auto start = std::chrono::steady_clock::now();
  // The answer waits until what the operation did or saw is on disk where it must
  // (sync_interval_ms); concurrent operations share one sync (group commit).
  grpc::Status st = ServeRpc(op, [&]() -> Status {
    Status done = body();
    if (durable) {
      FF_RETURN_IF_ERROR(store_->SyncAll());
    } else if (options_.sync_interval_ms == 0) {
      FF_RETURN_IF_ERROR(store_->AwaitDurable());
    }
    return done;
  });
  if (metrics_) {
    ReportLog();
    metrics_
        ->Histogram("fs3_meta_op_seconds", "Metadata operation latency", Metrics::LatencyBuckets(),
                    {{"op", op}})
        .Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    // Failures of the service itself (not a caller's ENOENT or EACCES): storage, RocksDB, bugs.
    const grpc::StatusCode c = st.error_code();
    if (c == grpc::StatusCode::INTERNAL || c == grpc::StatusCode::DATA_LOSS ||
        c == grpc::StatusCode::UNAVAILABLE || c == grpc::StatusCode::UNKNOWN) {
      metrics_
          ->Counter("fs3_meta_op_errors_total",
                    "Operations that failed in the service (internal, data loss, unavailable)",
                    {{"op", op}})
          .Increment();
    }
  }
  return st;
}

grpc::Status MetaService::Lookup(grpc::ServerContext*, const fs3rpc::NameRequest* r,
                                 fs3rpc::Inode* out) {
  return Serve("lookup", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(*out, store_->Lookup(CallerOf(r->cred()), r->parent(), r->name()));
    return Status::Ok();
  });
}

grpc::Status MetaService::GetAttr(grpc::ServerContext*, const fs3rpc::InoRequest* r,
                                  fs3rpc::Inode* out) {
  return Serve("getattr", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(*out, store_->GetAttr(r->ino()));
    return Status::Ok();
  });
}

grpc::Status MetaService::Make(grpc::ServerContext*, const fs3rpc::MakeRequest* r,
                               fs3rpc::Inode* out) {
  return Serve("make", [&]() -> Status {
    const Caller c = CallerOf(r->cred());
    MetaStore::Dirs changed;
    switch (r->type()) {
      case fs3rpc::INODE_DIR: {
        FF_ASSIGN_OR_RETURN(
            *out, store_->Mkdir(c, r->parent(), r->name(), r->mode(), r->request_id(), &changed));
        AddDirs(out->mutable_dirs(), changed, {r->parent()});
        return Status::Ok();
      }
      case fs3rpc::INODE_SYMLINK: {
        FF_ASSIGN_OR_RETURN(*out, store_->Symlink(c, r->parent(), r->name(), r->symlink_target(),
                                                  r->request_id(), &changed));
        AddDirs(out->mutable_dirs(), changed, {r->parent()});
        return Status::Ok();
      }
      default: {
        if (!fs3rpc::InodeType_IsValid(r->type())) return InvalidArgument("unknown inode type");
        std::vector<uint32_t> chains;  // a file's chunks go to chains picked from the table
        if (r->type() == fs3rpc::INODE_FILE && !options_.mgmtd.empty()) {
          FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
          chains = storage->ChainIds();
        }
        FF_ASSIGN_OR_RETURN(*out, store_->Create(c, r->parent(), r->name(), r->mode(),
                                                 r->request_id(), r->type(), r->rdev(), r->open(),
                                                 chains, {r->client(), r->handle()}, &changed));
        AddDirs(out->mutable_dirs(), changed, {r->parent()});
        return Status::Ok();
      }
    }
  });
}

grpc::Status MetaService::Link(grpc::ServerContext*, const fs3rpc::LinkRequest* r,
                               fs3rpc::Inode* out) {
  return Serve("link", [&] {
    MetaStore::Dirs changed;
    FF_ASSIGN_OR_RETURN(*out, store_->Link(CallerOf(r->cred()), r->ino(), r->parent(), r->name(),
                                           r->request_id(), &changed));
    AddDirs(out->mutable_dirs(), changed, {r->parent()});
    return Status::Ok();
  });
}

grpc::Status MetaService::Readlink(grpc::ServerContext*, const fs3rpc::InoRequest* r,
                                   fs3rpc::XattrReply* out) {
  return Serve("readlink", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(*out->mutable_value(), store_->Readlink(r->ino()));
    return Status::Ok();
  });
}

grpc::Status MetaService::Unlink(grpc::ServerContext*, const fs3rpc::NameRequest* r,
                                 fs3rpc::DirsReply* out) {
  return Serve("unlink", [&] {
    MetaStore::Dirs changed;
    FF_RETURN_IF_ERROR(
        store_->Unlink(CallerOf(r->cred()), r->parent(), r->name(), r->request_id(), &changed));
    AddDirs(out->mutable_dirs(), changed, {r->parent()});
    return Status::Ok();
  });
}

grpc::Status MetaService::Rmdir(grpc::ServerContext*, const fs3rpc::NameRequest* r,
                                fs3rpc::DirsReply* out) {
  return Serve("rmdir", [&] {
    MetaStore::Dirs changed;
    FF_RETURN_IF_ERROR(
        store_->Rmdir(CallerOf(r->cred()), r->parent(), r->name(), r->request_id(), &changed));
    AddDirs(out->mutable_dirs(), changed, {r->parent()});
    return Status::Ok();
  });
}

grpc::Status MetaService::Rename(grpc::ServerContext*, const fs3rpc::RenameRequest* r,
                                 fs3rpc::DirsReply* out) {
  return Serve("rename", [&] {
    MetaStore::Dirs changed;
    FF_RETURN_IF_ERROR(store_->Rename(CallerOf(r->cred()), r->src_parent(), r->src_name(),
                                      r->dst_parent(), r->dst_name(), r->flags(), r->request_id(),
                                      &changed));
    AddDirs(out->mutable_dirs(), changed, {r->src_parent(), r->dst_parent()});
    return Status::Ok();
  });
}

void MetaService::AddDirs(google::protobuf::RepeatedPtrField<fs3rpc::Inode>* dirs,
                          const MetaStore::Dirs& changed, std::initializer_list<uint64_t> inos) {
  std::vector<uint64_t> done;
  for (uint64_t ino : inos) {
    if (std::find(done.begin(), done.end(), ino) != done.end()) continue;
    done.push_back(ino);
    auto written = std::find_if(changed.begin(), changed.end(),
                                [&](const fs3rpc::Inode& d) { return d.ino() == ino; });
    if (written != changed.end()) {  // as the operation left it: no read
      *dirs->Add() = *written;
      continue;
    }
    auto dir = store_->GetAttr(ino);
    if (dir.ok()) *dirs->Add() = std::move(*dir);
  }
}

grpc::Status MetaService::Readdir(grpc::ServerContext*, const fs3rpc::ReaddirRequest* r,
                                  fs3rpc::ReaddirReply* out) {
  return Serve("readdir", [&]() -> Status {
    const std::size_t limit = r->limit() == 0 ? 1024 : std::min<uint32_t>(r->limit(), 65536);
    const Caller caller = CallerOf(r->cred());
    FF_ASSIGN_OR_RETURN(auto entries, store_->Readdir(caller, r->ino(), r->cursor(), limit));
    bool plus = false;
    if (r->plus()) {
      FF_ASSIGN_OR_RETURN(fs3rpc::Inode dir, store_->GetAttr(r->ino()));
      plus = Permitted(caller, dir, 1);  // what a lookup of each entry would ask
    }
    std::vector<std::optional<fs3rpc::Inode>> inodes;
    if (plus) {  // every entry's attributes in one transaction (one round trip on etcd)
      std::vector<uint64_t> inos;
      inos.reserve(entries.size());
      for (const DirEntry& e : entries)
        inos.push_back(e.ino);
      FF_ASSIGN_OR_RETURN(inodes, store_->GetAttrs(inos));
    }
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const DirEntry& e = entries[i];
      auto* d = out->add_entries();
      d->set_name(e.name);
      d->set_ino(e.ino);
      d->set_type(e.type);
      if (plus && inodes[i]) *d->mutable_inode() = std::move(*inodes[i]);  // gone since: none
    }
    return Status::Ok();
  });
}

grpc::Status MetaService::SetAttr(grpc::ServerContext*, const fs3rpc::SetAttrRequest* r,
                                  fs3rpc::Inode* out) {
  return Serve(
      "setattr",
      [&]() -> Status {
        fs3::SetAttr a;
        if (r->has_mode()) a.mode = r->mode();
        a.through_writable_handle = r->through_writable_handle();
        if (r->has_uid()) a.uid = r->uid();
        if (r->has_gid()) a.gid = r->gid();
        if (r->has_size()) {
          a.size = r->size();
          // Shrinking: the chunks past the new end go first (so no old data shows through a later
          // extension), then the length.
          FF_ASSIGN_OR_RETURN(fs3rpc::Inode before, store_->GetAttr(r->ino()));
          if (before.type() == fs3rpc::INODE_FILE && !options_.mgmtd.empty() &&
              r->size() < std::max<uint64_t>(before.size(), 1) &&
              (a.through_writable_handle || Permitted(CallerOf(r->cred()), before, 2))) {
            FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
            FF_ASSIGN_OR_RETURN(uint64_t stored, storage->StoredLength(r->ino()));
            FF_RETURN_IF_ERROR(storage->TruncateData(
                r->ino(), r->size(), std::max(stored, before.size()), ChainsOf(before.layout())));
          }
        }
        if (r->has_atime_ns()) a.atime_ns = r->atime_ns();
        if (r->has_mtime_ns()) a.mtime_ns = r->mtime_ns();
        a.atime_now = r->atime_now();
        a.mtime_now = r->mtime_now();
        FF_ASSIGN_OR_RETURN(*out, store_->SetAttributes(CallerOf(r->cred()), r->ino(), a));
        return Status::Ok();
      },
      /*durable=*/r->has_size());
}

grpc::Status MetaService::SetXattr(grpc::ServerContext*, const fs3rpc::XattrRequest* r,
                                   fs3rpc::Empty*) {
  return Serve("setxattr", [&] {
    return store_->SetXattr(CallerOf(r->cred()), r->ino(), r->name(), r->value(), r->flags());
  });
}

grpc::Status MetaService::GetXattr(grpc::ServerContext*, const fs3rpc::XattrRequest* r,
                                   fs3rpc::XattrReply* out) {
  return Serve("getxattr", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(*out->mutable_value(),
                        store_->GetXattr(CallerOf(r->cred()), r->ino(), r->name()));
    return Status::Ok();
  });
}

grpc::Status MetaService::ListXattrs(grpc::ServerContext*, const fs3rpc::InoRequest* r,
                                     fs3rpc::XattrReply* out) {
  return Serve("listxattr", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(auto names, store_->ListXattrs(CallerOf(r->cred()), r->ino()));
    for (std::string& n : names)
      out->add_names(std::move(n));
    return Status::Ok();
  });
}

grpc::Status MetaService::RemoveXattr(grpc::ServerContext*, const fs3rpc::XattrRequest* r,
                                      fs3rpc::Empty*) {
  return Serve("removexattr",
               [&] { return store_->RemoveXattr(CallerOf(r->cred()), r->ino(), r->name()); });
}

grpc::Status MetaService::Endpoints(grpc::ServerContext*, const fs3rpc::Empty*,
                                    fs3rpc::EndpointsReply* out) {
  return ServeRpc("Endpoints", [&] {
    if (frames_) out->set_frames_port(static_cast<uint32_t>(frames_->port()));
    return Status::Ok();
  });
}

grpc::Status MetaService::Open(grpc::ServerContext*, const fs3rpc::InoRequest* r,
                               fs3rpc::Inode* out) {
  return Serve("open", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(*out, store_->OpenSession(r->ino(), {r->client(), r->handle()}));
    return Status::Ok();
  });
}

grpc::Status MetaService::Close(grpc::ServerContext*, const fs3rpc::CloseRequest* r,
                                fs3rpc::Empty*) {
  return Serve("close", [&] {
    std::optional<uint64_t> size;
    if (r->has_size()) size = r->size();
    if (r->wrote()) FF_RETURN_IF_ERROR(Settle(r->ino(), r->size()).status());
    if (r->wrote() && r->recheck()) FF_RETURN_IF_ERROR(Recheck(r->ino()));
    return store_->CloseSession(r->ino(), size, {r->client(), r->handle()});
  });
}

grpc::Status MetaService::CloseMany(grpc::ServerContext* context, const fs3rpc::CloseBatch* r,
                                    fs3rpc::Empty*) {
  return Serve("closemany", [&] {
    const int n = r->closes_size();
    std::vector<Status> done(n);
    std::atomic<int> next{0};
    auto work = [&] {
      for (int i = next++; i < n; i = next++) {
        fs3rpc::Empty e;
        done[i] = FromGrpcStatus(Close(context, &r->closes(i), &e));  // each counted as a close
      }
    };
    if (etcd_ && n > 1) {
      // On etcd each close is a transaction: run side by side, they reach etcd together, as one
      // (group commit), instead of one Raft entry each.
      std::vector<std::thread> threads;
      for (int t = 0; t < std::min(n, kCloseWorkers); ++t)
        threads.emplace_back(work);
      for (auto& t : threads)
        t.join();
    } else {
      work();
    }
    for (Status& st : done) {
      if (!st.ok()) return st;
    }
    return Status::Ok();
  });
}

grpc::Status MetaService::KeepClient(grpc::ServerContext*, const fs3rpc::ClientRequest* r,
                                     fs3rpc::ClientReply* out) {
  return Serve("keepclient", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(uint32_t lease_s, store_->KeepClient(r->client(), r->first()));
    out->set_lease_s(lease_s);
    return Status::Ok();
  });
}

grpc::Status MetaService::Sync(grpc::ServerContext*, const fs3rpc::CloseRequest* r,
                               fs3rpc::Inode* out) {
  return Serve(
      "sync",
      [&]() -> Status {
        if (r->wrote()) {
          FF_ASSIGN_OR_RETURN(*out, Settle(r->ino(), r->size()));
          if (r->recheck()) FF_RETURN_IF_ERROR(Recheck(r->ino()));
        } else {
          FF_ASSIGN_OR_RETURN(*out, store_->SettleLength(r->ino(), r->size()));
        }
        return Status::Ok();
      },
      /*durable=*/true);
}

grpc::Status MetaService::Statfs(grpc::ServerContext*, const fs3rpc::Empty*,
                                 fs3rpc::StatfsReply* out) {
  return Serve("statfs", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(uint64_t inodes, store_->InodeCount());
    out->set_inodes(inodes);
    FF_ASSIGN_OR_RETURN(fs3rpc::Inode root, store_->GetAttr(kRootIno));
    out->set_chunk_size(root.layout().chunk_size());
    if (!options_.mgmtd.empty()) {
      FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
      FF_ASSIGN_OR_RETURN(auto space, storage->SpaceInfo());
      out->set_capacity_bytes(space.capacity_bytes);
      out->set_free_bytes(space.free_bytes);
      out->set_used_bytes(space.used_bytes);
      out->set_chunk_size(storage->chunk_size());
    }
    return Status::Ok();
  });
}

grpc::Status MetaService::SetLayout(grpc::ServerContext*, const fs3rpc::SetLayoutRequest* r,
                                    fs3rpc::Inode* out) {
  return Serve("setlayout", [&]() -> Status {
    FF_ASSIGN_OR_RETURN(*out, store_->SetStripe(CallerOf(r->cred()), r->ino(), r->stripe()));
    return Status::Ok();
  });
}

Status MetaService::RunFsck(const fs3rpc::FsckRequest& r, fs3rpc::FsckReply* out,
                            const std::function<void(const fs3rpc::FsckReply&)>& progress) {
  // Progress about once a second, so that the caller sees the check move however long it runs.
  auto last = std::chrono::steady_clock::now();
  uint64_t found_before = 0;  // the namespace's problems, while the data's are counted
  MetaStore::FsckObserver observe;
  if (progress) {
    observe = [&](const MetaStore::FsckProgress& p) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::seconds(1)) return;
      last = now;
      fs3rpc::FsckReply message;
      message.set_phase(p.phase);
      message.set_phase_done(p.done);
      message.set_found(found_before + p.found);
      progress(message);
    };
  }
  FF_ASSIGN_OR_RETURN(MetaStore::FsckReport report, store_->Fsck(r.repair(), observe));
  if (!options_.mgmtd.empty()) {  // the namespace against the chunks on storage
    found_before = report.problems.size();
    FF_ASSIGN_OR_RETURN(StorageClient * storage, Storage());
    FF_ASSIGN_OR_RETURN(auto stored, storage->StoredLengths());
    FF_ASSIGN_OR_RETURN(MetaStore::FsckReport data, store_->CheckData(stored, r.repair(), observe));
    report.problems.insert(report.problems.end(), data.problems.begin(), data.problems.end());
    report.repaired += data.repaired;
    report.left += data.left;
  }
  out->Clear();
  for (std::string& p : report.problems)
    out->add_problems(std::move(p));
  out->set_repaired(report.repaired);
  out->set_left(report.left);
  out->set_done(true);
  return Status::Ok();
}

grpc::Status MetaService::Fsck(grpc::ServerContext*, const fs3rpc::FsckRequest* r,
                               grpc::ServerWriter<fs3rpc::FsckReply>* out) {
  return Serve("fsck", [&]() -> Status {
    fs3rpc::FsckReply end;
    // A caller that left: the check goes on to its end all the same (its repairs re-check).
    FF_RETURN_IF_ERROR(RunFsck(*r, &end, [&](const fs3rpc::FsckReply& p) { out->Write(p); }));
    if (!out->Write(end)) return Status(StatusCode::kCancelled, "the caller went away");
    return Status::Ok();
  });
}

}  // namespace ff::fs3

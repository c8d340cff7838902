#include "fs3/client.h"

#include <spdlog/spdlog.h>

#include <random>
#include <thread>

#include "common/rpc_client.h"
#include "fs3/chain.h"

namespace ff::fs3 {
namespace {

using Clock = std::chrono::steady_clock;

// Errors after which another attempt (with fresh routing) may succeed.
bool Retryable(const Status& st) {
  switch (st.code()) {
    case StatusCode::kAborted:      // stale chain version, not the head
    case StatusCode::kUnavailable:  // service down, fenced, chunk changing
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kFailedPrecondition:  // target not serving / not writable any more
    case StatusCode::kStaleVersion:        // a replica's chunk changed under the write
    case StatusCode::kNotFound:            // target moved
    case StatusCode::kDataLoss:            // a corrupt replica: try another
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<std::unique_ptr<StorageClient>> StorageClient::Create(const ClientOptions& options) {
  std::unique_ptr<StorageClient> c(new StorageClient(options));
  FF_RETURN_IF_ERROR(c->RefreshRouting());
  {
    MutexLock lock(&c->mu_);
    if (!c->routing_.initialized()) {
      return FailedPrecondition("the fs3 cluster is not initialised");
    }
  }
  return c;
}

StorageClient::StorageClient(const ClientOptions& options)
    : options_(options),
      mgmtd_(std::make_unique<MgmtdReplicas>(options.mgmtd)),
      transport_(options.transport ? options.transport : std::make_shared<GrpcTransport>()),
      next_request_(std::random_device{}() * uint64_t{0x100000000}) {}

uint64_t StorageClient::peak_inflight_read_bytes() const {
  MutexLock lock(&credit_mu_);
  return peak_;
}

uint64_t StorageClient::chunk_size() const {
  MutexLock lock(&mu_);
  return routing_.chunk_size();
}

Status StorageClient::RefreshRouting() {
  FF_ASSIGN_OR_RETURN(fs3rpc::RoutingInfo info,
                      FetchRouting(*mgmtd_, RoutingFetch{.deadline = options_.rpc_timeout,
                                                         .attempts = CallOptions{}.max_attempts}));
  MutexLock lock(&mu_);
  if (info.version() >= routing_.version()) routing_ = std::move(info);
  return Status::Ok();
}

Status StorageClient::Write(uint64_t inode, uint64_t offset, std::string_view data, Chains chains) {
  const uint64_t size = chunk_size();
  while (!data.empty()) {
    const auto index = static_cast<uint32_t>(offset / size);
    const auto in_chunk = static_cast<uint32_t>(offset % size);
    const std::size_t n = std::min<uint64_t>(data.size(), size - in_chunk);
    FF_RETURN_IF_ERROR(WriteChunk(inode, index, in_chunk, data.substr(0, n), chains));
    data.remove_prefix(n);
    offset += n;
  }
  return Status::Ok();
}

Status StorageClient::WriteBuffer(uint64_t inode, uint64_t offset, std::string data,
                                  Chains chains) {
  const uint64_t size = chunk_size();
  if (data.empty() || offset % size + data.size() > size) return Write(inode, offset, data, chains);
  fs3rpc::WriteRequest req;
  req.mutable_chunk()->set_inode(inode);
  req.mutable_chunk()->set_index(static_cast<uint32_t>(offset / size));
  req.set_offset(static_cast<uint32_t>(offset % size));
  req.set_data(std::move(data));
  return SendToHead(req, chains);
}

Status StorageClient::WriteChunk(uint64_t inode, uint32_t index, uint32_t offset,
                                 std::string_view data, Chains chains) {
  fs3rpc::WriteRequest req;
  req.mutable_chunk()->set_inode(inode);
  req.mutable_chunk()->set_index(index);
  req.set_offset(offset);
  req.set_data(std::string(data));
  return SendToHead(req, chains);
}

Status StorageClient::TruncateChunk(uint64_t inode, uint32_t index, uint32_t length,
                                    Chains chains) {
  if (length > chunk_size()) {
    return InvalidArgument("a chunk holds at most " + std::to_string(chunk_size()) + " bytes");
  }
  fs3rpc::WriteRequest req;
  req.mutable_chunk()->set_inode(inode);
  req.mutable_chunk()->set_index(index);
  req.set_offset(length);
  req.set_truncate(true);
  return SendToHead(req, chains);
}

Status StorageClient::RemoveChunk(uint64_t inode, uint32_t index, Chains chains) {
  fs3rpc::WriteRequest req;
  req.mutable_chunk()->set_inode(inode);
  req.mutable_chunk()->set_index(index);
  req.set_remove(true);
  return SendToHead(req, chains);
}

Result<int> StorageClient::ChainPositionLocked(uint64_t inode, uint32_t index,
                                               Chains chains) const {
  if (routing_.chains_size() == 0) return FailedPrecondition("the routing table has no chains");
  if (chains.empty()) return static_cast<int>((inode + index) % routing_.chains_size());
  const uint32_t want = chains[index % chains.size()];
  for (int i = 0; i < routing_.chains_size(); ++i) {
    if (routing_.chains(i).id() == want) return i;
  }
  return Unavailable("chain " + std::to_string(want) + " of inode " + std::to_string(inode) +
                     " is not in the routing table");
}

std::vector<uint32_t> StorageClient::ChainIds() const {
  MutexLock lock(&mu_);
  std::vector<uint32_t> ids;
  for (const auto& c : routing_.chains())
    ids.push_back(c.id());
  return ids;
}

Status StorageClient::SendToHead(fs3rpc::WriteRequest& req, Chains chains) {
  req.set_request_id(next_request_++);
  const uint64_t inode = req.chunk().inode();
  const uint32_t index = req.chunk().index();
  const auto deadline = Clock::now() + options_.retry_timeout;
  Status last = Unavailable("no attempt");
  for (int attempt = 0;; ++attempt) {
    std::string address;
    {
      MutexLock lock(&mu_);
      FF_ASSIGN_OR_RETURN(int position, ChainPositionLocked(inode, index, chains));
      const auto& chain = routing_.chains(position);
      req.set_chain(chain.id());
      req.set_chain_version(chain.version());
      req.clear_target();
      for (const auto& t : chain.targets()) {
        const auto state = ParsePublicState(t.state());
        if (state == PublicState::kServing || state == PublicState::kSyncing) {
          req.set_target(t.target());
          break;
        }
      }
      address = TargetAddress(routing_, req.target());
    }
    if (req.target() != 0 && !address.empty()) {
      fs3rpc::WriteResponse resp;
      // The chain may be recovering behind the head: allow for its forward timeout.
      last =
          transport_->Write(address, req, &resp, options_.rpc_timeout + std::chrono::seconds(30));
      if (last.ok()) return Status::Ok();
      if (!Retryable(last)) return last;
    } else {
      last = Unavailable("chain has no writable target");
    }
    if (Clock::now() > deadline) {
      return Unavailable("write of chunk " + std::to_string(index) + " of inode " +
                         std::to_string(inode) + " failed: " + last.message());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 20 * (attempt + 1))));
    (void)RefreshRouting();
  }
}

Result<std::string> StorageClient::Read(uint64_t inode, uint64_t offset, uint32_t length,
                                        Chains chains) {
  const uint64_t size = chunk_size();
  std::string out;
  while (length > 0) {
    const auto index = static_cast<uint32_t>(offset / size);
    const auto in_chunk = static_cast<uint32_t>(offset % size);
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(length, size - in_chunk));
    FF_ASSIGN_OR_RETURN(std::string part, ReadChunk(inode, index, in_chunk, n, chains));
    part.resize(n, '\0');
    out += part;
    offset += n;
    length -= n;
  }
  return out;
}

namespace {

struct ReadCounters {
  std::atomic<uint64_t> reads{0}, bytes{0}, ns{0};
};

struct ReadRegistry {
  Mutex mu;
  std::map<uint64_t, std::unique_ptr<ReadCounters>> targets FF_GUARDED_BY(mu);
};

ReadRegistry& Reads() {
  static ReadRegistry* r = new ReadRegistry;  // never destroyed: reader threads may outlive statics
  return *r;
}

void CountRead(uint64_t target, uint64_t bytes, std::chrono::steady_clock::duration took) {
  ReadCounters* c;
  {
    ReadRegistry& r = Reads();
    MutexLock lock(&r.mu);
    std::unique_ptr<ReadCounters>& slot = r.targets[target];
    if (!slot) slot = std::make_unique<ReadCounters>();
    c = slot.get();
  }
  c->reads.fetch_add(1, std::memory_order_relaxed);
  c->bytes.fetch_add(bytes, std::memory_order_relaxed);
  c->ns.fetch_add(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()),
      std::memory_order_relaxed);
}

}  // namespace

std::vector<TargetReads> ProcessTargetReads() {
  ReadRegistry& r = Reads();
  MutexLock lock(&r.mu);
  std::vector<TargetReads> out;
  for (const auto& [target, c] : r.targets) {
    out.push_back({target, c->reads.load(std::memory_order_relaxed),
                   c->bytes.load(std::memory_order_relaxed),
                   static_cast<double>(c->ns.load(std::memory_order_relaxed)) * 1e-9});
  }
  return out;
}

Result<std::string> StorageClient::ReadChunk(uint64_t inode, uint32_t index, uint32_t offset,
                                             uint32_t length, Chains chains) {
  fs3rpc::ReadRequest req;
  req.mutable_chunk()->set_inode(inode);
  req.mutable_chunk()->set_index(index);
  req.set_offset(offset);
  req.set_length(length);
  // Request-to-send: wait until the reply fits under the client's in-flight budget.
  const uint64_t grant = std::min<uint64_t>(
      std::max<uint32_t>(length, 1), std::max<uint64_t>(1, options_.max_inflight_read_bytes));
  {
    UniqueLock lock(&credit_mu_);
    credit_cv_.wait(lock, [&] {
      credit_mu_.AssertHeld();
      return inflight_ + grant <= options_.max_inflight_read_bytes || inflight_ == 0;
    });
    inflight_ += grant;
    peak_ = std::max(peak_, inflight_);
  }
  struct Release {
    StorageClient* c;
    uint64_t n;
    ~Release() {
      {
        MutexLock lock(&c->credit_mu_);
        c->inflight_ -= n;
      }
      c->credit_cv_.notify_all();
    }
  } release{this, grant};
  const auto deadline = Clock::now() + options_.retry_timeout;
  Status last = Unavailable("no serving replica");
  for (int attempt = 0;; ++attempt) {
    std::vector<std::pair<uint64_t, std::string>> replicas;
    {
      MutexLock lock(&mu_);
      FF_ASSIGN_OR_RETURN(int position, ChainPositionLocked(inode, index, chains));
      const auto& chain = routing_.chains(position);
      const auto address_of = TargetAddresses(routing_);
      for (const auto& t : chain.targets()) {
        if (ParsePublicState(t.state()) == PublicState::kServing)
          replicas.emplace_back(t.target(), AddressOf(address_of, t.target()));
      }
    }
    // Spread reads over the replicas; on failure try the next one.
    const std::size_t start = replicas.empty() ? 0 : rotate_++ % replicas.size();
    for (std::size_t k = 0; k < replicas.size(); ++k) {
      const auto& [target, address] = replicas[(start + k) % replicas.size()];
      req.set_target(target);
      fs3rpc::ReadResponse resp;
      const auto issued = std::chrono::steady_clock::now();
      last = transport_->Read(address, req, &resp, options_.rpc_timeout);
      if (last.ok()) {
        CountRead(target, resp.data().size(), std::chrono::steady_clock::now() - issued);
        // The bytes must be what the chunk's length says is there: fewer would be read as a
        // hole (zeros). A replica that answers otherwise is passed over.
        const uint64_t has = resp.chunk_length() > offset ? resp.chunk_length() - offset : 0;
        if (resp.data().size() == std::min<uint64_t>(length, has)) {
          return std::move(*resp.mutable_data());
        }
        last = Unavailable("target " + std::to_string(target) + " answered " +
                           std::to_string(resp.data().size()) + " bytes of chunk " +
                           std::to_string(index) + " of inode " + std::to_string(inode) + " at " +
                           std::to_string(offset) + " for a chunk of " +
                           std::to_string(resp.chunk_length()) + " bytes");
        spdlog::warn("fs3 client: {}", last.message());
        continue;
      }
      if (!Retryable(last)) return last;
    }
    if (Clock::now() > deadline) {
      return Unavailable("read of chunk " + std::to_string(index) + " of inode " +
                         std::to_string(inode) + ": no replica could serve it (" + last.message() +
                         ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 20 * (attempt + 1))));
    (void)RefreshRouting();
  }
}

Result<std::vector<std::string>> StorageClient::ReadBatch(const std::vector<ReadOp>& ops) {
  // A few workers pull ranges; the read credits (request-to-send) bound the bytes in flight.
  std::vector<Result<std::string>> results(ops.size(), Result<std::string>(std::string()));
  std::atomic<std::size_t> next{0};
  const std::size_t workers = std::min<std::size_t>(ops.size(), 16);
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (std::size_t i; (i = next++) < ops.size();) {
        results[i] = Read(ops[i].inode, ops[i].offset, ops[i].length, ops[i].chains);
      }
    });
  }
  for (auto& t : threads)
    t.join();
  std::vector<std::string> out;
  out.reserve(ops.size());
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    out.push_back(std::move(*r));
  }
  return out;
}

std::vector<std::pair<uint64_t, std::string>> StorageClient::ChainTails() {
  MutexLock lock(&mu_);
  const auto address_of = TargetAddresses(routing_);
  std::vector<std::pair<uint64_t, std::string>> out;
  for (const auto& chain : routing_.chains()) {
    uint64_t tail = 0;
    for (const auto& t : chain.targets()) {
      if (ParsePublicState(t.state()) == PublicState::kServing) tail = t.target();
    }
    out.emplace_back(tail, tail == 0 ? std::string() : AddressOf(address_of, tail));
  }
  return out;
}

Result<StorageClient::Extent> StorageClient::StoredExtent(uint64_t inode) {
  const uint64_t size = chunk_size();
  const auto deadline = Clock::now() + options_.retry_timeout;
  for (int attempt = 0;; ++attempt) {
    Extent extent;
    Status last = Status::Ok();
    for (const auto& [target, address] : ChainTails()) {
      if (target == 0) {
        last = Unavailable("a chain has no serving target");
        break;
      }
      fs3rpc::ExtentRequest req;
      req.set_target(target);
      req.set_inode(inode);
      fs3rpc::ExtentResponse resp;
      auto* stub = stubs_.Get(address);
      Status st = CallRpc("fs3-storage Extent", CallOptions::Idempotent(options_.rpc_timeout),
                          [&](grpc::ClientContext* c) { return stub->Extent(c, req, &resp); });
      if (!st.ok()) {
        last = st;
        break;
      }
      extent.stored_bytes += resp.stored_bytes();
      if (!resp.has_last()) continue;  // no chunks of the file on this chain
      const fs3rpc::ChunkMetaRecord& rec = resp.last();
      extent.length = std::max(extent.length, uint64_t{rec.id().index()} * size + rec.length());
    }
    if (last.ok()) return extent;
    if (!Retryable(last) || Clock::now() > deadline) {
      return Unavailable("length of inode " + std::to_string(inode) + ": " + last.message());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 20 * (attempt + 1))));
    (void)RefreshRouting();
  }
}

Result<uint64_t> StorageClient::StoredLength(uint64_t inode) {
  FF_ASSIGN_OR_RETURN(Extent extent, StoredExtent(inode));
  return extent.length;
}

Result<std::map<uint64_t, uint64_t>> StorageClient::StoredLengths() {
  // With routing refreshed and asked again while a tail is being replaced (a restart moves it).
  const auto deadline = Clock::now() + options_.retry_timeout;
  for (int attempt = 0;; ++attempt) {
    auto lengths = StoredLengthsOnce();
    if (lengths.ok() || !Retryable(lengths.status()) || Clock::now() > deadline) return lengths;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 20 * (attempt + 1))));
    (void)RefreshRouting();
  }
}

Result<std::map<uint64_t, uint64_t>> StorageClient::StoredLengthsOnce() {
  const uint64_t size = chunk_size();
  std::map<uint64_t, uint64_t> out;
  for (const auto& [target, address] : ChainTails()) {
    if (target == 0) return Unavailable("a chain has no serving target");
    fs3rpc::DumpMetaRequest req;
    req.set_target(target);
    fs3rpc::DumpMetaResponse resp;
    auto* stub = stubs_.Get(address);
    FF_RETURN_IF_ERROR(
        CallRpc("fs3-storage DumpMeta", CallOptions::Idempotent(std::chrono::seconds(60)),
                [&](grpc::ClientContext* c) { return stub->DumpMeta(c, req, &resp); }));
    for (const auto& chunk : resp.chunks()) {
      if (chunk.committed_version() == 0) continue;
      uint64_t& len = out[chunk.id().inode()];
      len = std::max(len, uint64_t{chunk.id().index()} * size + chunk.length());
    }
  }
  return out;
}

Status StorageClient::TruncateData(uint64_t inode, uint64_t length, uint64_t old_length,
                                   Chains chains) {
  const uint64_t size = chunk_size();
  const uint64_t keep = (length + size - 1) / size;  // chunks that keep data
  const uint64_t had = (old_length + size - 1) / size;
  for (uint64_t i = keep; i < had; ++i)
    FF_RETURN_IF_ERROR(RemoveChunk(inode, static_cast<uint32_t>(i), chains));
  if (length % size != 0 && length < old_length) {
    FF_RETURN_IF_ERROR(TruncateChunk(inode, static_cast<uint32_t>(length / size),
                                     static_cast<uint32_t>(length % size), chains));
  }
  return Status::Ok();
}

Status StorageClient::RemoveData(uint64_t inode, Chains chains) {
  FF_ASSIGN_OR_RETURN(uint64_t length, StoredLength(inode));
  if (!chains.empty()) return TruncateData(inode, 0, length, chains);
  // Placement unknown (chunks found by fsck): every chain.
  const uint64_t size = chunk_size();
  for (uint32_t id : ChainIds()) {
    const uint32_t one[] = {id};
    for (uint64_t i = 0; i < (length + size - 1) / size; ++i)
      FF_RETURN_IF_ERROR(RemoveChunk(inode, static_cast<uint32_t>(i), one));
  }
  return Status::Ok();
}

Result<StorageClient::Space> StorageClient::SpaceInfo() {
  std::vector<std::pair<uint64_t, std::string>> targets;
  uint32_t replication = 1;
  {
    MutexLock lock(&mu_);
    replication = std::max<uint32_t>(1, routing_.replication());
    const auto address_of = TargetAddresses(routing_);
    for (const auto& t : routing_.targets()) {
      if (t.chain() != 0 && ParsePublicState(t.public_state()) == PublicState::kServing)
        targets.emplace_back(t.id(), AddressOf(address_of, t.id()));
    }
  }
  Space space;
  for (const auto& [target, address] : targets) {
    fs3rpc::SpaceInfoRequest req;
    req.set_target(target);
    fs3rpc::SpaceInfoResponse resp;
    auto* stub = stubs_.Get(address);
    FF_RETURN_IF_ERROR(
        CallRpc("fs3-storage SpaceInfo", CallOptions::Idempotent(options_.rpc_timeout),
                [&](grpc::ClientContext* c) { return stub->SpaceInfo(c, req, &resp); }));
    space.used_bytes += resp.used_bytes();
    space.free_bytes += resp.free_bytes();
  }
  space.used_bytes /= replication;
  space.free_bytes /= replication;
  space.capacity_bytes = space.used_bytes + space.free_bytes;
  return space;
}

}  // namespace ff::fs3

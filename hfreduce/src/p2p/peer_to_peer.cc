#include "p2p/peer_to_peer.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "engine/device_copy.h"
#include "engine/rank_worker.h"
#include "transport/shm.h"

namespace ff::hfreduce {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x48465033;    // "HFP3"
constexpr uint32_t kMessageMagic = 0x4846504d;  // "HFPM"

// What the lower rank sends first on a new connection.
struct Hello {
  uint32_t magic;
  int32_t rank;
  // Same node: where the higher rank opens the shared memory the pair will talk through (it
  // answers one byte, 1: opened, the pair moves there; 0: the pair stays on this connection).
  // Empty: TCP.
  char shm[104];
};
static_assert(sizeof(Hello) == 112);

struct MessageHeader {
  uint32_t magic;
  uint8_t dtype;
  uint8_t reserved[3];
  uint64_t count;
  uint32_t tag;
  uint32_t reserved2;
};
static_assert(sizeof(MessageHeader) == 24);
// Larger messages are refused as garbage (the count would overflow a size, or no host holds it).
constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 40;
// A message that arrives before its receive is posted is buffered in pieces of this size.
constexpr std::size_t kBufferPieceBytes = std::size_t{16} << 20;

// While only receives from any source are pending, a channel waits this long for a message
// before it looks again (for expired receives, and for receives of its own).
constexpr auto kAnySourcePoll = std::chrono::milliseconds(100);

std::string Describe(std::size_t count, DataType type) {
  return std::to_string(count) + " x " + std::string(DataTypeName(type));
}

// A send or receive waiting for its channel's thread (or, from any source, for any channel's).
struct Op {
  void* buf = nullptr;
  std::size_t count = 0;
  DataType type = DataType::kUInt8;
  uint32_t tag = 0;
  Clock::time_point deadline;
  std::shared_ptr<WorkImpl> work;
  int* source = nullptr;  // a receive from any source: where its sender goes
};

// A message received before a receive of its tag was posted.
struct Unexpected {
  uint32_t tag = 0;
  uint8_t dtype = 0;
  uint64_t count = 0;
  std::vector<char> data;
};

Status Mismatch(int rank, int peer, uint64_t count, DataType type, const Op& op) {
  return InvalidArgument("hfreduce: rank " + std::to_string(peer) + " sent " +
                         Describe(count, type) + " with tag " + std::to_string(op.tag) + ", rank " +
                         std::to_string(rank) + " expected " + Describe(op.count, op.type));
}

// Copies a buffered message from `peer` into the receive posted for it.
Status DeliverBuffered(int rank, int peer, const Op& op, const Unexpected& u) {
  if (u.count != op.count || u.dtype != static_cast<uint8_t>(op.type)) {
    return Mismatch(rank, peer, u.count, static_cast<DataType>(u.dtype), op);
  }
  const std::size_t bytes = op.count * ElementSize(op.type);
  if (bytes > 0) {
    if (int device = DeviceOf(op.buf); device >= 0) {
      FF_RETURN_IF_ERROR(CopyFromHost(op.buf, u.data.data(), bytes, device));
    } else {
      std::memcpy(op.buf, u.data.data(), bytes);
    }
  }
  if (op.source != nullptr) *op.source = peer;
  return Status::Ok();
}

}  // namespace

struct PeerToPeer::State {
  int rank;
  std::unique_ptr<TcpListener> listener;
  std::vector<std::string> addresses;
  std::chrono::milliseconds timeout;
  std::vector<bool> same_node;  // by rank
  std::size_t direct_bytes = 0;
  Mutex mu;
  std::map<int, std::unique_ptr<Channel>> channels FF_GUARDED_BY(mu);
  std::atomic<bool> stop{false};
  std::thread acceptor;
  // Receives from any source, oldest first. any_mu is taken before a channel's lock, never after.
  Mutex any_mu;
  std::deque<Op> any FF_GUARDED_BY(any_mu);
  std::atomic<int> any_pending{0};
  Status any_broken FF_GUARDED_BY(any_mu);  // set by Abort: later ones fail with it

  // The oldest receive from any source of `tag`, taken from the queue.
  std::optional<Op> ClaimAny(uint32_t tag) FF_REQUIRES(any_mu) {
    auto it = std::find_if(any.begin(), any.end(), [&](const Op& op) { return op.tag == tag; });
    if (it == any.end()) return std::nullopt;
    Op op = std::move(*it);
    any.erase(it);
    --any_pending;
    return op;
  }
  // Fails the receives from any source whose deadline passed.
  void ExpireAny() {
    std::vector<Op> expired;
    {
      MutexLock lock(&any_mu);
      const auto now = Clock::now();
      for (auto it = any.begin(); it != any.end();) {
        if (it->deadline > now) {
          ++it;
          continue;
        }
        expired.push_back(std::move(*it));
        it = any.erase(it);
        --any_pending;
      }
    }
    for (Op& op : expired) {
      op.work->Complete(DeadlineExceeded("hfreduce: rank " + std::to_string(rank) +
                                         " waited too long for a message of tag " +
                                         std::to_string(op.tag) + " from any rank"));
    }
  }
};

class PeerToPeer::Channel {
 public:
  Channel(State& state, int peer) : state_(state), peer_(peer) {
    sender_ = std::thread([this] { Loop(true); });
    receiver_ = std::thread([this] { Loop(false); });
  }

  ~Channel() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      if (conn_) conn_->Shutdown();
    }
    cv_.notify_all();
    sender_.join();
    receiver_.join();
    for (auto* q : {&sends_, &recvs_}) {
      for (Op& op : *q) {
        op.work->Complete(Status(StatusCode::kCancelled, "hfreduce: communicator destroyed"));
      }
    }
  }

  std::shared_ptr<Work> Enqueue(bool send, void* buf, std::size_t count, DataType type,
                                uint32_t tag) {
    auto work = std::make_shared<WorkImpl>();
    Op op{buf, count, type, tag, Clock::now() + state_.timeout, work, nullptr};
    std::optional<Unexpected> early;
    {
      MutexLock lock(&mu_);
      if (send) {
        sends_.push_back(std::move(op));
      } else {
        // A message of this tag that arrived before its receive was posted.
        auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                               [&](const Unexpected& u) { return u.tag == tag; });
        if (it == unexpected_.end()) {
          recvs_.push_back(std::move(op));
        } else {
          early = std::move(*it);
          unexpected_.erase(it);
        }
      }
    }
    if (early) {
      work->Complete(DeliverBuffered(state_.rank, peer_, op, *early));
      return work;
    }
    cv_.notify_all();
    return work;
  }

  // A buffered message of `tag`, taken (for a receive from any source).
  std::optional<Unexpected> TakeUnexpected(uint32_t tag) {
    MutexLock lock(&mu_);
    auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                           [&](const Unexpected& u) { return u.tag == tag; });
    if (it == unexpected_.end()) return std::nullopt;
    Unexpected u = std::move(*it);
    unexpected_.erase(it);
    return u;
  }

  // A receive from any source was posted: the receiver thread reads from now on.
  void Wake() {
    { MutexLock lock(&mu_); }
    cv_.notify_all();
  }

  int peer() const { return peer_; }

  std::string Path() {
    MutexLock lock(&mu_);
    if (!conn_) return "";
    if (auto* shm = dynamic_cast<ShmConnection*>(conn_.get())) {
      return shm->direct() ? "shm-direct" : "shm";
    }
    return "tcp";
  }

  // Fails the queued operations with `status` and cuts the connection: the operation a loop
  // thread holds fails as the connection goes, with the same status.
  void Abort(const Status& status) {
    std::deque<Op> failed;
    {
      MutexLock lock(&mu_);
      broken_ = status;
      if (conn_) conn_->Shutdown();
      failed.swap(sends_);
      for (Op& op : recvs_)
        failed.push_back(std::move(op));
      recvs_.clear();
    }
    cv_.notify_all();
    for (Op& op : failed)
      op.work->Complete(status);
  }

  // The acceptor hands over the connection a lower rank opened to us.
  void Adopt(std::unique_ptr<Connection> conn) {
    {
      MutexLock lock(&mu_);
      if (conn_ || stop_) return;  // a duplicate: dropped
      conn_ = std::move(conn);
    }
    cv_.notify_all();
  }

 private:
  // The connection, opening it if we are the lower rank. Returns null on stop or failure.
  Result<Connection*> Connection_(Clock::time_point deadline) {
    UniqueLock lock(&mu_);
    while (true) {
      if (stop_) return Status(StatusCode::kCancelled, "hfreduce: communicator destroyed");
      if (!broken_.ok()) return broken_;
      if (conn_) return conn_.get();
      if (state_.rank < peer_ && !connecting_) {
        connecting_ = true;
        lock.unlock();
        Result<std::unique_ptr<Connection>> conn = Connect(deadline);
        Status st = conn.status();
        lock.lock();
        connecting_ = false;
        if (!broken_.ok()) return broken_;  // aborted while connecting: the connection is dropped
        if (!st.ok()) {
          broken_ = st.WithContext("hfreduce: connect to rank " + std::to_string(peer_));
          cv_.notify_all();
          return broken_;
        }
        conn_ = std::move(*conn);
        cv_.notify_all();
        return conn_.get();
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        return DeadlineExceeded("hfreduce: rank " + std::to_string(peer_) +
                                " did not connect in time");
      }
    }
  }

  // Opens the connection to the higher rank `peer_`: TCP, then (same node) shared memory.
  Result<std::unique_ptr<Connection>> Connect(Clock::time_point deadline) {
    FF_ASSIGN_OR_RETURN(std::unique_ptr<Connection> tcp,
                        TcpConnect(state_.addresses[peer_], deadline, state_.listener->dscp()));
    const std::string name = "rank " + std::to_string(peer_);
    Hello hello{kHelloMagic, state_.rank, {}};
    std::unique_ptr<ShmConnection> shm;
    if (state_.same_node[peer_]) {
      // Without shared memory (none left, say) the pair talks over TCP: slower, not wrong.
      auto made = ShmConnection::Create(state_.direct_bytes);
      if (made.ok() && (*made)->path().size() < sizeof hello.shm) {
        shm = std::move(*made);
        std::memcpy(hello.shm, shm->path().data(), shm->path().size());
      }
    }
    FF_RETURN_IF_ERROR(tcp->Send(&hello, sizeof hello));
    if (shm) {
      uint8_t opened = 0;
      FF_RETURN_IF_ERROR(tcp->RecvBefore(&opened, 1, deadline));
      if (opened == 1 && shm->Established().ok()) {
        shm->set_peer(name + " (shared memory)");
        return std::unique_ptr<Connection>(std::move(shm));
      }
    }
    tcp->set_peer(name + " (" + tcp->peer() + ")");
    return tcp;
  }

  void Loop(bool sending) {
    if (!sending) return ReceiveLoop();
    while (true) {
      Op op;
      {
        UniqueLock lock(&mu_);
        cv_.wait(lock, [&] {
          mu_.AssertHeld();
          return stop_ || !sends_.empty();
        });
        if (stop_) return;
        op = std::move(sends_.front());
        sends_.pop_front();
      }
      Status st = DoSend(op);
      if (!st.ok()) st = Break(st);
      op.work->Complete(st);
    }
  }

  // Reads messages while receives are pending (this channel's, or from any source): each goes to
  // the oldest pending receive of its tag on this channel, else to the oldest from any source of
  // its tag, else into the unexpected queue.
  void ReceiveLoop() {
    while (true) {
      Clock::time_point deadline, connect_deadline;
      bool idle_ok = false;  // only receives from any source: no message in time is no error
      {
        UniqueLock lock(&mu_);
        cv_.wait(lock, [&] {
          mu_.AssertHeld();
          return stop_ || !recvs_.empty() || state_.any_pending.load() > 0;
        });
        if (stop_) return;
        if (!recvs_.empty()) {
          deadline = recvs_.front().deadline;
          for (const Op& op : recvs_)
            deadline = std::min(deadline, op.deadline);
          connect_deadline = deadline;
        } else {
          idle_ok = true;
          deadline = Clock::now() + kAnySourcePoll;
          connect_deadline = Clock::now() + state_.timeout;
        }
      }
      Status st = ReceiveOne(deadline, connect_deadline, idle_ok);
      if (idle_ok) state_.ExpireAny();
      if (st.code() == StatusCode::kUnavailable && idle_ok) continue;  // nothing yet
      if (!st.ok()) {
        st = Break(st);
        std::deque<Op> failed;
        {
          MutexLock lock(&mu_);
          failed.swap(recvs_);
        }
        for (Op& op : failed)
          op.work->Complete(st);
      }
    }
  }

  // Marks the channel broken by `st` unless something (an abort) broke it first; returns what
  // broke it.
  Status Break(const Status& st) {
    MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = st;
    if (conn_) conn_->Shutdown();
    return broken_;
  }

  // Reads one message, waiting for it until `deadline` (for the connection until
  // `connect_deadline`). With `idle_ok`, no message by then returns kUnavailable.
  Status ReceiveOne(Clock::time_point deadline, Clock::time_point connect_deadline, bool idle_ok) {
    FF_ASSIGN_OR_RETURN(Connection * conn, Connection_(connect_deadline));
    Status readable = conn->WaitReadable(deadline);
    if (!readable.ok()) {
      if (readable.code() != StatusCode::kDeadlineExceeded) return readable;
      if (idle_ok) return Status(StatusCode::kUnavailable, "no message yet");
      return DeadlineExceeded("hfreduce: rank " + std::to_string(state_.rank) +
                              " waited too long for a message from rank " + std::to_string(peer_));
    }
    MessageHeader h{};
    FF_RETURN_IF_ERROR(conn->Recv(&h, sizeof h));
    if (h.magic != kMessageMagic || h.dtype > static_cast<uint8_t>(DataType::kInt8)) {
      return DataLoss("hfreduce: garbage from " + conn->peer() + " (not an HFReduce message)");
    }
    const auto type = static_cast<DataType>(h.dtype);
    if (h.count > kMaxMessageBytes / ElementSize(type)) {
      return DataLoss("hfreduce: " + conn->peer() + " announced a message of " +
                      std::to_string(h.count) + " elements (garbage, or not an HFReduce peer)");
    }
    const std::size_t bytes = h.count * ElementSize(type);
    std::optional<Op> target;
    {
      MutexLock lock(&mu_);
      auto it =
          std::find_if(recvs_.begin(), recvs_.end(), [&](const Op& op) { return op.tag == h.tag; });
      if (it != recvs_.end()) {
        target = std::move(*it);
        recvs_.erase(it);
      }
    }
    if (!target) {
      MutexLock any_lock(&state_.any_mu);
      target = state_.ClaimAny(h.tag);
    }
    if (!target) {
      Unexpected u;
      u.tag = h.tag;
      u.dtype = h.dtype;
      u.count = h.count;
      // Buffered as it arrives, a piece at a time: the header alone (garbage, or a peer gone
      // wrong) must not make this rank allocate what it announces.
      for (std::size_t got = 0; got < bytes;) {
        const std::size_t piece = std::min(bytes - got, kBufferPieceBytes);
        try {
          u.data.resize(got + piece);
        } catch (const std::bad_alloc&) {
          return ResourceExhausted("hfreduce: no memory to buffer a message of " +
                                   std::to_string(bytes) + " bytes from rank " +
                                   std::to_string(peer_) + " before its receive is posted");
        }
        FF_RETURN_IF_ERROR(conn->Recv(u.data.data() + got, piece));
        got += piece;
      }
      // A receive from any source posted while it arrived looked for it among the buffered
      // messages before it was one: it takes it now.
      std::optional<Op> late;
      {
        MutexLock any_lock(&state_.any_mu);
        late = state_.ClaimAny(h.tag);
        if (!late) {
          MutexLock lock(&mu_);
          unexpected_.push_back(std::move(u));
        }
      }
      if (late) late->work->Complete(DeliverBuffered(state_.rank, peer_, *late, u));
      return Status::Ok();
    }
    if (h.count != target->count || h.dtype != static_cast<uint8_t>(target->type)) {
      Status mismatch = Mismatch(state_.rank, peer_, h.count, type, *target);
      target->work->Complete(mismatch);
      return mismatch;  // the payload is not read: the channel is broken
    }
    Status st = Status::Ok();
    if (bytes > 0) {
      if (int device = DeviceOf(target->buf); device >= 0) {
        std::vector<char> staging(bytes);
        st = conn->Recv(staging.data(), bytes);
        if (st.ok()) st = CopyFromHost(target->buf, staging.data(), bytes, device);
      } else {
        st = conn->Recv(target->buf, bytes);
      }
    }
    if (!st.ok()) st = Break(st);
    if (st.ok() && target->source != nullptr) *target->source = peer_;
    target->work->Complete(st);
    return st;
  }

  Status DoSend(const Op& op) {
    auto deadline = Clock::now() + state_.timeout;
    FF_ASSIGN_OR_RETURN(Connection * conn, Connection_(deadline));
    const std::size_t bytes = op.count * ElementSize(op.type);
    MessageHeader h{kMessageMagic, static_cast<uint8_t>(op.type), {0, 0, 0}, op.count, op.tag, 0};
    FF_RETURN_IF_ERROR(conn->Send(&h, sizeof h, bytes > 0));
    if (bytes == 0) return Status::Ok();
    if (int device = DeviceOf(op.buf); device >= 0) {
      std::vector<char> staging(bytes);
      FF_RETURN_IF_ERROR(CopyToHost(staging.data(), op.buf, bytes, device));
      return conn->Send(staging.data(), bytes);
    }
    return conn->Send(op.buf, bytes);
  }

  State& state_;
  const int peer_;
  Mutex mu_;
  CondVar cv_;
  std::unique_ptr<Connection> conn_ FF_GUARDED_BY(mu_);
  bool connecting_ FF_GUARDED_BY(mu_) = false;
  bool stop_ FF_GUARDED_BY(mu_) = false;
  Status broken_ FF_GUARDED_BY(mu_);
  std::deque<Op> sends_ FF_GUARDED_BY(mu_), recvs_ FF_GUARDED_BY(mu_);
  std::deque<Unexpected> unexpected_ FF_GUARDED_BY(mu_);
  std::thread sender_, receiver_;
};

PeerToPeer::PeerToPeer(int rank, std::unique_ptr<TcpListener> listener,
                       std::vector<std::string> addresses, std::chrono::milliseconds timeout,
                       std::vector<int> same_node, std::size_t direct_bytes)
    : state_(std::make_unique<State>()) {
  state_->rank = rank;
  state_->listener = std::move(listener);
  state_->addresses = std::move(addresses);
  state_->timeout = timeout;
  state_->same_node.assign(state_->addresses.size(), false);
  for (int r : same_node) {
    if (r >= 0 && r < static_cast<int>(state_->addresses.size()) && r != rank) {
      state_->same_node[r] = true;
    }
  }
  state_->direct_bytes = direct_bytes;
  state_->acceptor = std::thread([this] { AcceptLoop(); });
}

PeerToPeer::~PeerToPeer() {
  state_->stop = true;
  state_->listener->Shutdown();  // the acceptor returns now, not at its next poll
  state_->acceptor.join();
  {
    MutexLock lock(&state_->mu);
    state_->channels.clear();
  }
  FailAny(Status(StatusCode::kCancelled, "hfreduce: communicator destroyed"));
}

void PeerToPeer::FailAny(const Status& status) {
  std::deque<Op> failed;
  {
    MutexLock lock(&state_->any_mu);
    if (state_->any_broken.ok()) state_->any_broken = status;
    failed.swap(state_->any);
    state_->any_pending = 0;
  }
  for (Op& op : failed)
    op.work->Complete(status);
}

void PeerToPeer::Abort(const Status& status) {
  FailAny(status);
  MutexLock lock(&state_->mu);
  for (auto& [peer, channel] : state_->channels)
    channel->Abort(status);
}

std::string PeerToPeer::Path(int peer) {
  MutexLock lock(&state_->mu);
  auto it = state_->channels.find(peer);
  return it == state_->channels.end() ? "" : it->second->Path();
}

PeerToPeer::Channel& PeerToPeer::ChannelTo(int peer) {
  MutexLock lock(&state_->mu);
  auto& channel = state_->channels[peer];
  if (!channel) channel = std::make_unique<Channel>(*state_, peer);
  return *channel;
}

void PeerToPeer::AcceptLoop() {
  while (!state_->stop) {
    auto conn = state_->listener->Accept(Clock::now() + std::chrono::milliseconds(200));
    if (!conn.ok()) continue;  // a timeout (checks stop) or a failed handshake
    Hello hello{};
    // Within 2 s, so that a connection that sends nothing or part of a Hello cannot hold up
    // the ranks that connect after it.
    if (!(*conn)->RecvBefore(&hello, sizeof hello, Clock::now() + std::chrono::seconds(2)).ok() ||
        hello.magic != kHelloMagic || hello.rank < 0 || hello.rank >= state_->rank ||
        hello.rank >= static_cast<int>(state_->addresses.size())) {
      continue;  // not one of our lower ranks: dropped
    }
    const std::string name = "rank " + std::to_string(hello.rank);
    if (hello.shm[0] != '\0') {
      // The lower rank offers shared memory: take it if it is ours to open (same node).
      hello.shm[sizeof hello.shm - 1] = '\0';
      std::unique_ptr<ShmConnection> shm;
      if (state_->same_node[hello.rank]) {
        auto opened = ShmConnection::Open(hello.shm, state_->direct_bytes);
        if (opened.ok()) shm = std::move(*opened);
      }
      const uint8_t answer = shm ? 1 : 0;
      if (!(*conn)->Send(&answer, 1).ok()) continue;
      if (shm) {
        shm->set_peer(name + " (shared memory)");
        ChannelTo(hello.rank).Adopt(std::move(shm));
        continue;
      }
    }
    (*conn)->set_peer(name + " (" + (*conn)->peer() + ")");
    ChannelTo(hello.rank).Adopt(std::move(*conn));
  }
}

std::shared_ptr<Work> PeerToPeer::Send(const void* buf, std::size_t count, DataType type, int peer,
                                       uint32_t tag) {
  return ChannelTo(peer).Enqueue(true, const_cast<void*>(buf), count, type, tag);
}

std::shared_ptr<Work> PeerToPeer::Recv(void* buf, std::size_t count, DataType type, int peer,
                                       uint32_t tag) {
  return ChannelTo(peer).Enqueue(false, buf, count, type, tag);
}

std::shared_ptr<Work> PeerToPeer::RecvAny(void* buf, std::size_t count, DataType type, uint32_t tag,
                                          int* source) {
  auto work = std::make_shared<WorkImpl>();
  Op op{buf, count, type, tag, Clock::now() + state_->timeout, work, source};
  std::vector<Channel*> peers;
  for (int p = 0; p < static_cast<int>(state_->addresses.size()); ++p) {
    if (p != state_->rank) peers.push_back(&ChannelTo(p));
  }
  std::optional<Unexpected> early;
  int from = -1;
  {
    MutexLock lock(&state_->any_mu);
    if (!state_->any_broken.ok()) {
      work->Complete(state_->any_broken);
      return work;
    }
    // A message of its tag already buffered (from the lowest rank that has one).
    for (Channel* c : peers) {
      if ((early = c->TakeUnexpected(tag))) {
        from = c->peer();
        break;
      }
    }
    if (!early) {
      state_->any.push_back(std::move(op));
      ++state_->any_pending;
    }
  }
  if (early) {
    work->Complete(DeliverBuffered(state_->rank, from, op, *early));
    return work;
  }
  for (Channel* c : peers)
    c->Wake();
  return work;
}

}  // namespace ff::hfreduce

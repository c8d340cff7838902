#include "engine/rank_worker.h"

#include <sched.h>

#include <cstring>

#include "engine/device_copy.h"
#include "reduce/kernels.h"

namespace ff::hfreduce {
namespace {
// How long the latency path looks for the other ranks, yielding, before it sleeps; and how long
// a waiter looks for its work to complete, and an idle worker after a latency-path operation
// for the next one.
constexpr std::chrono::microseconds kSmallYield{200};
constexpr std::chrono::microseconds kIdleYield{200};
}  // namespace

void WorkImpl::SetHelper(std::function<void()> help) {
  MutexLock lock(&mu_);
  if (!done_) helper_ = std::move(help);
}

std::function<void()> WorkImpl::TakeHelper() {
  MutexLock lock(&mu_);
  std::function<void()> help;
  help.swap(helper_);
  return help;
}

Status WorkImpl::Wait() {
  if (std::function<void()> help = TakeHelper()) help();
  // Short operations (the latency path) complete within microseconds: look, yielding the CPU,
  // before sleeping (a wake-up from the condition variable costs more than they do).
  const auto until = std::chrono::steady_clock::now() + kIdleYield;
  while (!done_flag_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    sched_yield();
  }
  UniqueLock lock(&mu_);
  done_cv_.wait(lock, [&] {
    mu_.AssertHeld();
    return done_;
  });
  return status_;
}

bool WorkImpl::Test() {
  MutexLock lock(&mu_);
  return done_;
}

void WorkImpl::OnComplete(std::function<void(const Status&)> done) {
  {
    MutexLock lock(&mu_);
    if (!done_) {
      callbacks_.push_back(std::move(done));
      return;
    }
  }
  done(status_);  // status_ no longer changes once done_
}

void WorkImpl::Complete(Status status) {
  std::vector<std::function<void(const Status&)>> callbacks;
  {
    MutexLock lock(&mu_);
    if (done_) return;
    status_ = std::move(status);
    done_ = true;
    helper_ = nullptr;
    done_flag_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
    done_cv_.notify_all();
  }
  // Outside the lock: a callback may wait on or test this work.
  for (auto& callback : callbacks)
    callback(status_);
}

RankWorker::RankWorker(NodeSegment& segment, int local_rank, int rank, int world_size,
                       Waiter waiter, std::chrono::milliseconds timeout, std::size_t chunk_bytes)
    : seg_(segment),
      local_rank_(local_rank),
      rank_(rank),
      world_size_(world_size),
      waiter_(std::move(waiter)),
      timeout_(timeout),
      chunk_bytes_(chunk_bytes) {
  thread_ = std::thread([this] { Run(); });
}

RankWorker::~RankWorker() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (Pending& p : queue_) {
    p.work->Complete(Status(StatusCode::kCancelled, "hfreduce: communicator destroyed"));
  }
}

std::shared_ptr<Work> RankWorker::Submit(OpDesc desc, const void* send, void* recv, void* stream) {
  auto work = std::make_shared<WorkImpl>();
  Pending p{desc, send, recv, stream, work, false, 0, false, nullptr};
  {
    MutexLock lock(&mu_);
    p.small = Small(desc);
    // (The pipeline's numbering, which the engine follows: the latency path has its own.)
    if (!p.small) p.desc.op_seq = next_op_seq_++;
    if (!p.small || running_ || !queue_.empty()) {
      queue_.push_back(std::move(p));
      submitted_.fetch_add(1, std::memory_order_release);
      cv_.notify_all();
      return work;
    }
    running_ = true;  // the worker is idle: this thread takes the turn to post
  }
  p.small_seq = next_small_++;
  Status st = seg_.AbortStatus();
  if (st.ok()) st = PostSmall(p);
  if (st.ok()) {
    p.posted = true;
    p.claim = std::make_shared<std::atomic<bool>>(false);
    work->SetHelper([this, p] { TryFinish(p); });
  }
  {
    MutexLock lock(&mu_);
    running_ = false;
    // Finished by the worker (first in line: ops submitted meanwhile follow it) or the waiter.
    if (st.ok()) {
      queue_.push_front(p);
      submitted_.fetch_add(1, std::memory_order_release);
    }
  }
  cv_.notify_all();
  if (!st.ok()) work->Complete(st);
  return work;
}

bool RankWorker::TryFinish(const Pending& p) {
  bool expected = false;
  if (!p.claim->compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return false;
  Status st = seg_.AbortStatus();
  if (st.ok()) st = FinishSmall(p);
  p.work->Complete(st);
  return true;
}

void RankWorker::Run() {
  bool was_small = false;
  uint32_t taken = 0;
  while (true) {
    Pending p;
    if (was_small) {  // the next one often follows at once (a loop of small allreduces)
      const auto until = std::chrono::steady_clock::now() + kIdleYield;
      while (submitted_.load(std::memory_order_acquire) == taken &&
             std::chrono::steady_clock::now() < until) {
        sched_yield();
      }
    }
    {
      UniqueLock lock(&mu_);
      cv_.wait(lock, [&] {
        mu_.AssertHeld();
        return stop_ || (!queue_.empty() && !running_);
      });
      if (stop_) return;
      p = queue_.front();
      queue_.pop_front();
      running_ = true;
      ++taken;
    }
    was_small = p.small;
    if (p.posted) {
      // Posted by its caller: finished here, unless a waiting caller is at it (then the next
      // operation waits for it).
      if (!TryFinish(p)) (void)p.work->Wait();
    } else {
      Status st = seg_.AbortStatus();
      if (st.ok() && p.small) {
        p.small_seq = next_small_++;
        st = PostSmall(p);
        if (st.ok()) st = FinishSmall(p);
      } else if (st.ok()) {
        OpPlan plan = MakePlan(p.desc, next_chunk_, chunk_bytes_, world_size_);
        next_chunk_ += plan.num_chunks;
        st = Execute(plan, p.send, p.recv, p.stream);
      }
      p.work->Complete(st);
    }
    MutexLock lock(&mu_);
    running_ = false;
  }
}

Status RankWorker::Execute(const OpPlan& plan, const void* send, void* recv, void* stream) {
  RankSlot& me = seg_.header().ranks[local_rank_];
  me.desc = plan.desc;
  me.desc_seq.store(plan.desc.op_seq, std::memory_order_release);
  seg_.header().doorbell.Ring();

  // Which chunks this rank copies in and out: its own piece only, in a reduce-scatter's copy-out
  // and an allgather's copy-in; the root only copies a broadcast in, the others only out.
  const auto kind = plan.kind();
  auto copies_in = [&](uint32_t c) {
    switch (kind) {
      case CollectiveKind::kBarrier:
        return false;
      case CollectiveKind::kBroadcast:
        return plan.desc.root == rank_;
      case CollectiveKind::kAllgather:
        return plan.OwnerRank(c) == rank_;
      default:
        return true;
    }
  };
  auto copies_out = [&](uint32_t c) {
    switch (kind) {
      case CollectiveKind::kBarrier:
        return false;
      case CollectiveKind::kBroadcast:
        return plan.desc.root != rank_;
      case CollectiveKind::kReduceScatter:
        return plan.OwnerRank(c) == rank_;
      default:
        return true;
    }
  };
  const bool contributes = kind != CollectiveKind::kBarrier &&
                           (kind != CollectiveKind::kBroadcast || plan.desc.root == rank_);
  const bool receives = kind != CollectiveKind::kBarrier &&
                        (kind != CollectiveKind::kBroadcast || plan.desc.root != rank_);
  const int send_device = contributes ? DeviceOf(send) : -1;
  const int recv_device = receives ? DeviceOf(recv) : -1;
  const auto slots = static_cast<uint32_t>(seg_.slots());
  const auto deadline = Waiter::Clock::now() + timeout_;

  uint32_t in = 0, out = 0;
  const uint32_t n = plan.num_chunks;
  auto can_copy_in = [&] {
    uint32_t g = plan.first_chunk + in;
    return in < n && in - out < slots &&
           StampReached(
               seg_.input_free(static_cast<int>(g % slots)).load(std::memory_order_acquire),
               g - slots + 1);
  };
  auto can_copy_out = [&] {
    uint32_t g = plan.first_chunk + out;
    return out < in &&
           seg_.result_filled(static_cast<int>(g % slots)).load(std::memory_order_acquire) == g + 1;
  };
  while (out < n) {
    bool progressed = false;
    if (can_copy_in()) {
      uint32_t g = plan.first_chunk + in;
      int slot = static_cast<int>(g % slots);
      if (copies_in(in) && plan.ChunkSize(in) > 0) {
        FF_RETURN_IF_ERROR(
            CopyIn(plan, in, send, send_device, stream, seg_.input(local_rank_, slot)));
      }
      seg_.input_filled(local_rank_, slot).store(g + 1, std::memory_order_release);
      seg_.header().doorbell.Ring();
      ++in;
      progressed = true;
    }
    if (can_copy_out()) {
      uint32_t g = plan.first_chunk + out;
      int slot = static_cast<int>(g % slots);
      if (copies_out(out) && plan.ChunkSize(out) > 0) {
        FF_RETURN_IF_ERROR(CopyOut(plan, out, seg_.result(slot), recv, recv_device, stream));
      }
      seg_.result_pending(slot).fetch_sub(1, std::memory_order_acq_rel);
      seg_.header().doorbell.Ring();
      ++out;
      progressed = true;
    }
    if (!progressed) {
      FF_RETURN_IF_ERROR(waiter_.Until([&] { return can_copy_in() || can_copy_out(); }, deadline,
                                       [&] {
                                         return "chunk " + std::to_string(out) + " of " +
                                                std::to_string(n) + " of " + DescribeOp(plan.desc) +
                                                " on rank " + std::to_string(rank_);
                                       }));
    }
  }
  return Status::Ok();
}

bool RankWorker::Small(const OpDesc& desc) const {
  if (world_size_ != seg_.local_size() || world_size_ < 2 || seg_.header().small_bytes == 0) {
    return false;
  }
  const auto kind = static_cast<CollectiveKind>(desc.kind);
  const std::size_t bytes = desc.count * ElementSize(static_cast<DataType>(desc.dtype));
  return kind == CollectiveKind::kBarrier ||
         (kind == CollectiveKind::kAllreduce && bytes > 0 && bytes <= seg_.header().small_bytes &&
          bytes <= kSmallBytes);
}

bool RankWorker::SmallReached(int local_rank, uint32_t seq, bool reading) {
  const RankSlot& r = seg_.header().ranks[local_rank];
  return reading ? StampReached(r.small_read.load(std::memory_order_acquire), seq - 2)
                 : StampReached(r.small_posted.load(std::memory_order_acquire), seq);
}

Status RankWorker::WaitSmall(const OpDesc& desc, bool reading) {
  const int local = seg_.local_size();
  auto reached = [&] {
    for (int lr = 0; lr < local; ++lr) {
      if (!SmallReached(lr, desc.op_seq, reading)) return false;
    }
    return true;
  };
  auto what = [&] {
    std::string missing;
    for (int lr = 0; lr < local; ++lr) {
      if (!SmallReached(lr, desc.op_seq, reading)) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(lr);
      }
    }
    return std::string(reading ? "the buffers" : "the inputs") + " of " + DescribeOp(desc) +
           " (operation " + std::to_string(desc.op_seq) + " of the latency path) on rank " +
           std::to_string(rank_) + "; local ranks not there: " + missing;
  };
  return waiter_.Until(reached, Waiter::Clock::now() + timeout_, what, true, kSmallYield,
                       &seg_.header().small_doorbell);
}

Status RankWorker::PostSmall(const Pending& p) {
  NodeHeader& h = seg_.header();
  const uint32_t seq = p.small_seq;
  const int parity = static_cast<int>(seq & 1);
  OpDesc desc = p.desc;
  desc.op_seq = seq;
  const std::size_t bytes = desc.count * ElementSize(static_cast<DataType>(desc.dtype));
  // Buffer `parity` last held operation seq - 2: every rank must have read it (they have, by
  // the time this rank finished seq - 1, unless it never waited for it).
  FF_RETURN_IF_ERROR(WaitSmall(desc, true));
  RankSlot& me = h.ranks[local_rank_];
  if (bytes > 0) {
    FF_RETURN_IF_ERROR(
        CopyToHost(seg_.small(local_rank_, parity), p.send, bytes, DeviceOf(p.send), p.stream));
  }
  me.small_desc[parity] = desc;
  me.small_posted.store(seq, std::memory_order_release);
  h.small_doorbell.Ring();
  return Status::Ok();
}

Status RankWorker::FinishSmall(const Pending& p) {
  NodeHeader& h = seg_.header();
  const int local = seg_.local_size();
  const uint32_t seq = p.small_seq;
  const int parity = static_cast<int>(seq & 1);
  OpDesc desc = p.desc;
  desc.op_seq = seq;
  const auto type = static_cast<DataType>(desc.dtype);
  const std::size_t bytes = desc.count * ElementSize(type);
  FF_RETURN_IF_ERROR(WaitSmall(desc, false));
  const void* inputs[kMaxLocalRanks];
  for (int lr = 0; lr < local; ++lr) {
    const OpDesc theirs = h.ranks[lr].small_desc[parity];
    if (!(theirs == desc)) {
      seg_.Abort(InvalidArgument("hfreduce: ranks disagree on operation " + std::to_string(seq) +
                                 " of the latency path: rank " + std::to_string(rank_) +
                                 " called " + DescribeOp(desc) + ", local rank " +
                                 std::to_string(lr) + " called " + DescribeOp(theirs)));
      return seg_.AbortStatus();
    }
    inputs[lr] = seg_.small(lr, parity);
  }
  RankSlot& me = h.ranks[local_rank_];
  if (static_cast<CollectiveKind>(desc.kind) == CollectiveKind::kBarrier) {
    me.small_read.store(seq, std::memory_order_release);  // (nothing to read)
    h.small_doorbell.Ring();
    return Status::Ok();
  }
  const int device = DeviceOf(p.recv);
  void* out = p.recv;
  if (device >= 0) {
    small_out_.resize(bytes);
    out = small_out_.data();
  }
  const auto op = static_cast<ReduceOp>(desc.redop);
  Reduce(type, op == ReduceOp::kAvg ? ReduceOp::kSum : op, inputs, local, out, desc.count);
  // Every input is read: the others may reuse this parity's buffers.
  me.small_read.store(seq, std::memory_order_release);
  h.small_doorbell.Ring();
  if (op == ReduceOp::kAvg) DivideInPlace(type, out, desc.count, world_size_);
  if (device >= 0) FF_RETURN_IF_ERROR(CopyFromHost(p.recv, out, bytes, device, p.stream));
  return Status::Ok();
}

Status RankWorker::CopyIn(const OpPlan& plan, uint32_t c, const void* send, int device,
                          void* stream, char* slot) {
  const std::size_t offset = plan.ChunkOffset(c), size = plan.ChunkSize(c);
  if (plan.kind() != CollectiveKind::kAllgather) {
    return CopyToHost(slot, static_cast<const char*>(send) + offset, size, device, stream);
  }
  // Allgather: chunk c lies inside this rank's piece (the caller checked), which is all `send`
  // holds.
  const std::size_t shard_start = plan.shard_bytes * static_cast<std::size_t>(rank_);
  return CopyToHost(slot, static_cast<const char*>(send) + (offset - shard_start), size, device,
                    stream);
}

Status RankWorker::CopyOut(const OpPlan& plan, uint32_t c, const char* slot, void* recv, int device,
                           void* stream) {
  const std::size_t offset = plan.ChunkOffset(c), size = plan.ChunkSize(c);
  if (plan.kind() != CollectiveKind::kReduceScatter) {
    return CopyFromHost(static_cast<char*>(recv) + offset, slot, size, device, stream);
  }
  // Reduce-scatter: chunk c lies inside this rank's piece (the caller checked), which is all
  // `recv` holds.
  const std::size_t shard_start = plan.shard_bytes * static_cast<std::size_t>(rank_);
  return CopyFromHost(static_cast<char*>(recv) + (offset - shard_start), slot, size, device,
                      stream);
}

}  // namespace ff::hfreduce

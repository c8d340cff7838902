#include "engine/rank_worker.h"

#include <cstring>

#include "engine/device_copy.h"

namespace ff::hfreduce {

Status WorkImpl::Wait() {
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
  {
    MutexLock lock(&mu_);
    desc.op_seq = next_op_seq_++;
    queue_.push_back(Pending{desc, send, recv, stream, work});
  }
  cv_.notify_all();
  return work;
}

void RankWorker::Run() {
  while (true) {
    Pending p;
    {
      UniqueLock lock(&mu_);
      cv_.wait(lock, [&] {
        mu_.AssertHeld();
        return stop_ || !queue_.empty();
      });
      if (stop_) return;
      p = queue_.front();
      queue_.pop_front();
    }
    Status st = seg_.AbortStatus();
    if (st.ok()) {
      OpPlan plan = MakePlan(p.desc, next_chunk_, chunk_bytes_, world_size_);
      next_chunk_ += plan.num_chunks;
      st = Execute(plan, p.send, p.recv, p.stream);
    }
    p.work->Complete(st);
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

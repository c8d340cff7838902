// The copy pipeline of one rank: for each collective it publishes the rank's OpDesc, copies its
// chunks into its input slots and the node's results back out, keeping up to `slots` chunks in
// flight. Operations run one after another on the worker's thread in the order submitted.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "engine/op.h"
#include "engine/waiter.h"
#include "hfreduce/communicator.h"

namespace ff::hfreduce {

// A Work completed by the engine.
class WorkImpl final : public Work {
 public:
  Status Wait() override;
  bool Test() override;
  void OnComplete(std::function<void(const Status&)> done) override;
  // Completes the work (once; later calls are ignored) and runs the callbacks on this thread.
  void Complete(Status status);
  // Something Wait() runs on its own thread before it waits (once): a latency-path operation
  // finishes itself on the caller's thread where the caller waits for it.
  void SetHelper(std::function<void()> help);

 private:
  std::function<void()> TakeHelper();

  Mutex mu_;
  std::function<void()> helper_ FF_GUARDED_BY(mu_);
  CondVar done_cv_;
  bool done_ FF_GUARDED_BY(mu_) = false;
  std::atomic<bool> done_flag_{false};  // done_, for Wait's yielding look before it sleeps
  Status status_;                       // written once, under mu_ before done_; read-only after
  std::vector<std::function<void(const Status&)>> callbacks_ FF_GUARDED_BY(mu_);
};

class RankWorker {
 public:
  RankWorker(NodeSegment& segment, int local_rank, int rank, int world_size, Waiter waiter,
             std::chrono::milliseconds timeout, std::size_t chunk_bytes);
  ~RankWorker();  // fails queued operations with kCancelled, then joins

  // Queues an operation; desc.op_seq is assigned here. `stream`: the caller's cudaStream_t for
  // device buffers, or null.
  std::shared_ptr<Work> Submit(OpDesc desc, const void* send, void* recv, void* stream = nullptr);

 private:
  struct Pending {
    OpDesc desc;
    const void* send;
    void* recv;
    void* stream;
    std::shared_ptr<WorkImpl> work;
    bool small = false;
    // The latency path: its number, and, once its input is posted (on the caller's thread),
    // who finishes it: the first of the worker and a thread waiting for it to set `claim`.
    uint32_t small_seq = 0;
    bool posted = false;
    std::shared_ptr<std::atomic<bool>> claim;
  };

  void Run();
  Status Execute(const OpPlan& plan, const void* send, void* recv, void* stream);
  // Whether `desc` takes the latency path: on a world of one node with the path on, a barrier
  // or an allreduce of at most the node's small_bytes (the same answer on every rank).
  bool Small(const OpDesc& desc) const;
  // The latency path: this rank copies its input into its small buffer of the operation's
  // parity and posts it (PostSmall); once every local rank has, each sums all of them itself, in
  // local-rank order (the same result on every rank), straight into `recv` (FinishSmall).
  // Nothing goes through the leader's reducer; the buffers of parity p are reused once every
  // rank has read them. When the worker is idle, the caller's thread posts at once and a caller
  // that waits finishes it itself: no hand-over between threads.
  Status PostSmall(const Pending& p);
  Status FinishSmall(const Pending& p);
  // Finishes `p` unless another thread claimed it first; true if this one did.
  bool TryFinish(const Pending& p);
  // Waits until every local rank has read the buffers of desc.op_seq's parity (`reading`: they
  // held op_seq - 2), or has posted its input of desc.op_seq; the timeout's message names the
  // local ranks not there.
  Status WaitSmall(const OpDesc& desc, bool reading);
  bool SmallReached(int local_rank, uint32_t seq, bool reading);
  // `device`: DeviceOf() the caller's buffer.
  Status CopyIn(const OpPlan& plan, uint32_t c, const void* send, int device, void* stream,
                char* slot);
  Status CopyOut(const OpPlan& plan, uint32_t c, const char* slot, void* recv, int device,
                 void* stream);

  NodeSegment& seg_;
  const int local_rank_;
  const int rank_;
  const int world_size_;
  Waiter waiter_;
  const std::chrono::milliseconds timeout_;
  const std::size_t chunk_bytes_;

  Mutex mu_;
  CondVar cv_;
  std::deque<Pending> queue_ FF_GUARDED_BY(mu_);
  std::atomic<uint32_t> submitted_{0};  // operations queued so far (the worker's idle look)
  bool stop_ FF_GUARDED_BY(mu_) = false;
  // An operation is being worked on (by the worker, or posted by a caller): the turn of the
  // fields below that the running operation owns.
  bool running_ FF_GUARDED_BY(mu_) = false;
  uint32_t next_op_seq_ FF_GUARDED_BY(mu_) = 1;
  uint32_t next_chunk_ = 0;      // worker thread only
  uint32_t next_small_ = 1;      // the turn's holder only
  std::vector<char> small_out_;  // the finishing thread only: a result bound for a device buffer
  std::thread thread_;
};

}  // namespace ff::hfreduce

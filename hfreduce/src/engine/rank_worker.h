// The copy pipeline of one rank: for each collective it publishes the rank's OpDesc, copies its
// chunks into its input slots and the node's results back out, keeping up to `slots` chunks in
// flight. Operations run one after another on the worker's thread in the order submitted.
#pragma once

#include <deque>
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

 private:
  Mutex mu_;
  CondVar done_cv_;
  bool done_ FF_GUARDED_BY(mu_) = false;
  Status status_;  // written once, under mu_ before done_; read-only after
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
  };

  void Run();
  Status Execute(const OpPlan& plan, const void* send, void* recv, void* stream);
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
  bool stop_ FF_GUARDED_BY(mu_) = false;
  uint32_t next_op_seq_ FF_GUARDED_BY(mu_) = 1;
  uint32_t next_chunk_ = 0;  // worker thread only
  std::thread thread_;
};

}  // namespace ff::hfreduce

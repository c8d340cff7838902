#include "hfreduce_backend.h"

#include <ATen/core/ivalue.h>

#include "backend_ops.h"

#ifdef FF_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <stdexcept>
#include <thread>

namespace ff::haiscale {

using namespace detail;  // NOLINT: the helpers shared with the op files (backend_ops.h)

namespace {

// The c10d::Store torch hands a backend, as the store HFReduce rendezvouses through.
class TorchStore final : public hf::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  Status Set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return Status::Ok();
    } catch (const std::exception& e) {
      return Unavailable(std::string("hfreduce: store set '") + key + "': " + e.what());
    }
  }

  Result<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) override {
    try {
      store_->wait(keys, timeout);
    } catch (const std::exception& e) {
      std::string missing;
      for (const std::string& k : keys) {
        try {
          if (!store_->check({k})) missing += (missing.empty() ? "" : ", ") + k;
        } catch (const std::exception&) {
        }
      }
      return DeadlineExceeded("hfreduce: waited " + std::to_string(timeout.count()) +
                              " ms for store keys" + (missing.empty() ? "" : " " + missing) + ": " +
                              e.what());
    }
    std::vector<std::string> values;
    try {
      for (const std::string& k : keys) {
        std::vector<uint8_t> v = store_->get(k);
        values.emplace_back(v.begin(), v.end());
      }
    } catch (const std::exception& e) {
      return Unavailable(std::string("hfreduce: store get: ") + e.what());
    }
    return values;
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    try {
      return store_->add(key, delta);
    } catch (const std::exception& e) {
      return Unavailable(std::string("hfreduce: store add '") + key + "': " + e.what());
    }
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

// One torch op in flight: how to finish it, and how many HFReduce works it still waits for.
// ProcessCommClock's counts.
static std::atomic<uint64_t> comm_collectives{0};
static std::atomic<uint64_t> comm_ns{0};

struct PendingOp {
  explicit PendingOp(std::size_t n) : left(n) {}
  // True for the call that completes the last work; keeps the first failure.
  bool Done(const Status& st) {
    MutexLock lock(&mu);
    if (!st.ok() && first_error.ok()) first_error = st;
    return --left == 0;
  }
  // Copies staged results back (in completion order); returns the op's error, if any.
  std::function<std::exception_ptr(const Status&)> finish;
  // Completes the Work and its future, whose callbacks run here and may block.
  std::function<void(std::exception_ptr)> complete;
  Mutex mu;
  std::size_t left FF_GUARDED_BY(mu);
  Status first_error FF_GUARDED_BY(mu);
};

// Runs completions on threads of the backend's own: the copy-back of staged tensors on one
// thread, in the order the collectives completed (two ops on one tensor land in order); then the
// Work's completion and its future's callbacks on a pool that always has a free thread for the
// next completion. A callback may issue a collective and wait for it (torch's PowerSGD comm hook
// does): had it run on the completing thread, nothing could complete the inner collective. As
// with gloo, Work::wait returns once the future's callbacks have run.
//
// A finished op still holds tensors, and dropping the last reference to a tensor that Python
// owns takes the GIL: that must happen on a caller's thread, never here (a thread of ours that
// blocks on the GIL while the interpreter shuts down is killed mid-C++). So finished ops go to a
// graveyard that the caller's thread empties (TakeFinished) on its next call.
class Completer {
 public:
  Completer() : thread_([this] { Run(); }) {}
  ~Completer() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // runs what is posted, handing the completions to the pool
    {
      MutexLock lock(&pool_mu_);
      pool_stop_ = true;
    }
    pool_cv_.notify_all();
    for (std::thread& t : pool_)
      t.join();
  }
  void Post(std::shared_ptr<PendingOp> op) {
    {
      MutexLock lock(&mu_);
      queue_.push_back(std::move(op));
    }
    cv_.notify_all();
  }
  // The finished ops, for the calling thread to drop.
  std::vector<std::shared_ptr<PendingOp>> TakeFinished() {
    std::vector<std::shared_ptr<PendingOp>> dead;
    MutexLock lock(&pool_mu_);
    dead.swap(graveyard_);
    return dead;
  }

 private:
  using Completion = std::pair<std::shared_ptr<PendingOp>, std::exception_ptr>;

  void Run() {
    while (true) {
      std::shared_ptr<PendingOp> op;
      {
        UniqueLock lock(&mu_);
        cv_.wait(lock, [&] {
          mu_.AssertHeld();
          return stop_ || !queue_.empty();
        });
        if (queue_.empty()) return;  // stopping, and everything posted has run
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      Status first_error;
      {
        MutexLock done(&op->mu);  // every work of it has completed: nothing writes it now
        first_error = op->first_error;
      }
      std::exception_ptr error = op->finish(first_error);
      Dispatch({std::move(op), error});
    }
  }

  // Hands a completion to a waiting pool thread, or to a new one when every thread is busy
  // (blocked in a callback, perhaps): a completion never waits behind a callback.
  void Dispatch(Completion c) {
    MutexLock lock(&pool_mu_);
    completions_.push_back(std::move(c));
    if (completions_.size() > idle_) pool_.emplace_back([this] { RunCallbacks(); });
    pool_cv_.notify_one();
  }

  void RunCallbacks() {
    UniqueLock lock(&pool_mu_);
    while (true) {
      ++idle_;
      pool_cv_.wait(lock, [&] {
        pool_mu_.AssertHeld();
        return pool_stop_ || !completions_.empty();
      });
      --idle_;
      if (completions_.empty()) return;
      Completion c = std::move(completions_.front());
      completions_.pop_front();
      lock.unlock();
      c.first->complete(c.second);
      lock.lock();
      graveyard_.push_back(std::move(c.first));
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::shared_ptr<PendingOp>> queue_ FF_GUARDED_BY(mu_);
  bool stop_ FF_GUARDED_BY(mu_) = false;
  Mutex pool_mu_;
  CondVar pool_cv_;
  std::deque<Completion> completions_ FF_GUARDED_BY(pool_mu_);
  std::size_t idle_ FF_GUARDED_BY(pool_mu_) = 0;  // pool threads waiting for a completion
  std::vector<std::thread> pool_ FF_GUARDED_BY(pool_mu_);
  std::vector<std::shared_ptr<PendingOp>> graveyard_ FF_GUARDED_BY(pool_mu_);
  bool pool_stop_ FF_GUARDED_BY(pool_mu_) = false;
  std::thread thread_;  // last: started once the rest is built
};

namespace {

// The non-CPU devices of `tensors` (a future holding CUDA tensors must name their devices).
std::vector<c10::Device> DevicesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : tensors) {
    if (t.defined() && !t.device().is_cpu() &&
        std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

class HFReduceWork final : public c10d::Work {
 public:
  HFReduceWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()), DevicesOf(outputs_))) {}

  bool isCompleted() override {
    MutexLock lock(&mu_);
    return done_;
  }
  bool isSuccess() const override {
    MutexLock lock(&mu_);
    return done_ && !error_;
  }
  std::exception_ptr exception() const override {
    MutexLock lock(&mu_);
    return error_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}

  bool wait(std::chrono::milliseconds timeout) override {
    UniqueLock lock(&mu_);
    if (timeout == ::kNoTimeout) {
      cv_.wait(lock, [&] {
        mu_.AssertHeld();
        return done_;
      });
    } else if (!cv_.wait_for(lock, timeout, [&] {
                 mu_.AssertHeld();
                 return done_;
               })) {
      throw std::runtime_error("hfreduce: operation did not complete within " +
                               std::to_string(timeout.count()) + " ms");
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // A receive from any source: its sender, once completed.
  void SetSource(std::shared_ptr<int> source) { source_ = std::move(source); }
  int sourceRank() const override {
    TORCH_CHECK(source_ != nullptr,
                "hfreduce: sourceRank() of a work that is no receive from "
                "any source");
    MutexLock lock(&mu_);
    TORCH_CHECK(done_ && !error_, "hfreduce: sourceRank() before the receive completed");
    return *source_;
  }

  // On a completion thread: completes the future (running its callbacks here), then records
  // the outcome and wakes waiters (as gloo does: wait() returns after the callbacks ran).
  void Finish(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
    {
      MutexLock lock(&mu_);
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  const std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable Mutex mu_;
  CondVar cv_;
  bool done_ FF_GUARDED_BY(mu_) = false;
  std::exception_ptr error_ FF_GUARDED_BY(mu_);
  std::shared_ptr<int> source_;  // written by HFReduce before the work completes
};

std::exception_ptr ErrorOf(const Status& st) {
  std::string message = st.message();
  if (message.rfind("hfreduce", 0) != 0) message = "hfreduce: " + message;
  return std::make_exception_ptr(std::runtime_error(message));
}

}  // namespace

// ---- helpers shared with the op files (backend_ops.h) ----------------------------------------

namespace detail {

std::string TypeName(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type()));
}

hf::DataType ReductionType(const at::Tensor& t, const char* op) {
  CheckDense(t, op);
  switch (t.scalar_type()) {
    case at::kFloat:
      return hf::DataType::kFloat32;
    case at::kDouble:
      return hf::DataType::kFloat64;
    case at::kHalf:
      return hf::DataType::kFloat16;
    case at::kBFloat16:
      return hf::DataType::kBFloat16;
    case at::kInt:
      return hf::DataType::kInt32;
    case at::kLong:
      return hf::DataType::kInt64;
    case at::kByte:
    case at::kBool:
      return hf::DataType::kUInt8;
    case at::kChar:
      return hf::DataType::kInt8;
    default:
      TORCH_CHECK(false, "hfreduce: ", op, " of ", TypeName(t),
                  " tensors is not supported (reductions take float32, float64, float16, "
                  "bfloat16, int32, int64, uint8, int8 and bool)");
  }
}

void Reduction::Scale(at::Tensor& t) const {
  if (!premul) return;
  if (tensor_factor.defined()) {
    t.mul_(tensor_factor.to(t.device()));
  } else {
    t.mul_(factor);
  }
}

Reduction ReductionOf(const c10d::ReduceOp& reduce_op, const at::Tensor& t, const char* what) {
  Reduction r;
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (reduce_op.op_) {
    case c10d::ReduceOp::SUM:
      r.op = is_bool ? hf::ReduceOp::kMax : hf::ReduceOp::kSum;  // logical or
      break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "hfreduce: ", what, " with AVG of bool tensors is not defined");
      r.op = hf::ReduceOp::kAvg;
      break;
    case c10d::ReduceOp::MAX:
      r.op = hf::ReduceOp::kMax;
      break;
    case c10d::ReduceOp::MIN:
      r.op = hf::ReduceOp::kMin;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? hf::ReduceOp::kMin : hf::ReduceOp::kProduct;  // logical and
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "hfreduce: ", what,
                  " with PREMUL_SUM needs a floating-point tensor, got ", TypeName(t));
      // NCCLPreMulSumSupplement: the name every 2.x has (newer ones alias PreMulSumSupplement).
      auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(reduce_op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "hfreduce: ", what, " with PREMUL_SUM has no factor");
      r.op = hf::ReduceOp::kSum;
      r.premul = true;
      r.factor = supplement->double_factor;
      r.tensor_factor = supplement->tensor_factor;
      break;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      const char* name = reduce_op.op_ == c10d::ReduceOp::BAND  ? "BAND"
                         : reduce_op.op_ == c10d::ReduceOp::BOR ? "BOR"
                                                                : "BXOR";
      // As Gloo: on integer tensors and bool (which travels as uint8, 0 or 1).
      TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/true), "hfreduce: ", what,
                  " with ", name, " needs an integer or bool tensor, got ", TypeName(t));
      r.op = reduce_op.op_ == c10d::ReduceOp::BAND  ? hf::ReduceOp::kBand
             : reduce_op.op_ == c10d::ReduceOp::BOR ? hf::ReduceOp::kBor
                                                    : hf::ReduceOp::kBxor;
      break;
    }
    default:
      TORCH_CHECK(false, "hfreduce: ", what, " with reduce op ", static_cast<int>(reduce_op.op_),
                  " is not supported; sum, avg, min, max, product, premul_sum, band, bor and "
                  "bxor are");
  }
  (void)ReductionType(t, what);  // raises for unsupported element types
  return r;
}

void CheckDense(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.layout() == at::kStrided, "hfreduce: ", op, " of a ", t.layout(),
              " tensor is not supported (dense tensors only, but for all_reduce of a sparse COO "
              "tensor: pass t.to_dense())");
}

void CheckSingle(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "hfreduce: ", op, " takes one tensor per call, got ",
              tensors.size());
  CheckDense(tensors[0], op);
}

void CheckSameType(const at::Tensor& a, const at::Tensor& b, const char* op) {
  CheckDense(a, op);
  CheckDense(b, op);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "hfreduce: ", op, " of ", TypeName(b), " into ",
              TypeName(a), ": the types differ");
}

std::size_t Bytes(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * t.element_size();
}

}  // namespace detail

// ---- construction and lifetime -----------------------------------------------------------------

HFReduceBackend::HFReduceBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                 BackendOptions options)
    : Backend(options.rank, options.size), options_(std::move(options)) {
  hf::CommunicatorOptions o;
  o.rank = options_.rank;
  o.world_size = options_.size;
  o.local_rank = options_.local_rank;
  if (options_.store_address.empty()) {
    o.store = std::make_shared<TorchStore>(store);
  } else {
    o.store_address = options_.store_address;
    o.rank0_hosts_store = false;
    o.store_prefix = options_.store_prefix;
  }
  o.node_id = options_.node_id;
  o.listen_host = options_.listen_host;
  o.transport = options_.transport;
  o.timeout = options_.timeout;
  if (options_.chunk_bytes > 0) o.chunk_bytes = options_.chunk_bytes;
  if (options_.pipeline_depth > 0) o.pipeline_depth = options_.pipeline_depth;
  Result<std::unique_ptr<hf::Communicator>> comm = hf::Communicator::Create(o);
  TORCH_CHECK(comm.ok(), "hfreduce: creating the process group",
              options_.group_name.empty() ? "" : " '" + options_.group_name + "'", " (rank ",
              options_.rank, " of ", options_.size, ") failed: ", comm.status().message());
  comm_ = std::move(*comm);
  completer_ = std::make_unique<Completer>();
}

HFReduceBackend::HFReduceBackend(std::unique_ptr<hf::Communicator> comm, BackendOptions options)
    : Backend(comm->rank(), comm->world_size()), options_(std::move(options)) {
  comm_ = std::move(comm);
  completer_ = std::make_unique<Completer>();
}

HFReduceBackend::~HFReduceBackend() {
  shutdown();
}

void HFReduceBackend::shutdown() {
  std::unique_ptr<hf::Communicator> comm;
  {
    MutexLock lock(&mu_);
    comm.swap(comm_);
  }
  // Destroying the communicator finishes or cancels its operations, whose completions are
  // posted to the completer; the completer runs everything posted before it stops.
  comm.reset();
  completer_.reset();  // runs what is queued; the finished ops are released here, below
}

void HFReduceBackend::abort() {
  {
    MutexLock lock(&mu_);
    if (comm_) comm_->Abort("abort() called on the process group");
  }
  shutdown();
}

c10::intrusive_ptr<c10d::Backend> HFReduceBackend::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& opts_override) {
  std::vector<int> excluded;
  for (int64_t r : ranks_to_exclude) {
    TORCH_CHECK(r >= 0 && r < getSize(), "hfreduce: shrink: rank ", r, " is outside 0..",
                getSize() - 1);
    excluded.push_back(static_cast<int>(r));
  }
  BackendOptions options = options_;
  if (opts_override && opts_override->timeout.count() > 0) options.timeout = opts_override->timeout;
  Result<std::unique_ptr<hf::Communicator>> shrunk =
      [&]() -> Result<std::unique_ptr<hf::Communicator>> {
    MutexLock lock(&mu_);
    if (!comm_) return FailedPrecondition("the process group was shut down");
    if (shrink_flags & 1) comm_->Abort("the process group is being shrunk (SHRINK_ABORT)");
    return comm_->Shrink(excluded);
  }();
  TORCH_CHECK(shrunk.ok(), "hfreduce: shrinking the process group",
              options_.group_name.empty() ? "" : " '" + options_.group_name + "'",
              " failed: ", shrunk.status().message());
  options.rank = (*shrunk)->rank();
  options.size = (*shrunk)->world_size();
  options.local_rank = -1;
  return c10::make_intrusive<HFReduceBackend>(std::move(*shrunk), std::move(options));
}

c10::intrusive_ptr<c10d::Backend::Options> HFReduceBackend::getBackendOptions() {
  auto o = c10::make_intrusive<Options>("hfreduce", options_.timeout);
  o->group_name = options_.group_name;
  return o;
}

int HFReduceBackend::num_nodes() const {
  MutexLock lock(&mu_);
  TORCH_CHECK(comm_, "hfreduce: the process group was shut down");
  return comm_->num_nodes();
}

std::string HFReduceBackend::transport() const {
  MutexLock lock(&mu_);
  TORCH_CHECK(comm_, "hfreduce: the process group was shut down");
  return comm_->transport();
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::Launch(
    c10d::OpType type, const char* title, std::vector<at::Tensor> outputs, const Issue& issue,
    std::vector<Staged> staged, std::function<void()> post, std::shared_ptr<int> source) {
  auto work = c10::make_intrusive<HFReduceWork>(getRank(), type, std::move(outputs));
  if (source) work->SetSource(std::move(source));
  std::vector<std::shared_ptr<hf::Work>> parts;
  std::vector<std::shared_ptr<PendingOp>> finished;  // dropped here, outside the lock
  Completer* completer = nullptr;
  {
    MutexLock lock(&mu_);
    TORCH_CHECK(comm_, "hfreduce: ", title, " on a process group that was shut down");
    completer = completer_.get();
    finished = completer->TakeFinished();
#ifdef FF_TORCH_CUDA
    // Device buffers are copied on the caller's current stream: after the work already queued
    // on it, and the result lands on it before later work.
    std::vector<c10::Device> devices = DevicesOf(work->result());
    comm_->SetCudaStream(
        devices.empty() ? nullptr : c10::cuda::getCurrentCUDAStream(devices[0].index()).stream());
#endif
    parts = issue(*comm_);
    if (type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
        type != c10d::OpType::RECVANYSOURCE) {
      ++sequence_;
    }
  }
  const bool collective = type != c10d::OpType::SEND && type != c10d::OpType::RECV &&
                          type != c10d::OpType::RECVANYSOURCE;
  const auto issued = std::chrono::steady_clock::now();
  auto op = std::make_shared<PendingOp>(parts.size());
  op->finish = [staged = std::move(staged),
                post = std::move(post)](const Status& st) -> std::exception_ptr {
    if (!st.ok()) return ErrorOf(st);
    try {
      for (const Staged& s : staged) {
        if (s.copy_back) s.user.copy_(s.buf);
      }
      if (post) post();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  };
  op->complete = [work](std::exception_ptr error) { work->Finish(error); };
  if (parts.empty()) {
    completer->Post(op);
    return work;
  }
  // The callbacks hold only the op: the last one hands it to the completer, so no tensor is
  // released on HFReduce's pipeline threads.
  for (auto& part : parts) {
    part->OnComplete([op, completer, collective, issued](const Status& st) {
      if (!op->Done(st)) return;
      if (collective) {
        comm_ns.fetch_add(
            static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - issued)
                                      .count()),
            std::memory_order_relaxed);
        comm_collectives.fetch_add(1, std::memory_order_relaxed);
      }
      completer->Post(op);
    });
  }
  return work;
}

CommClock ProcessCommClock() {
  return {comm_collectives.load(std::memory_order_relaxed),
          static_cast<double>(comm_ns.load(std::memory_order_relaxed)) * 1e-9};
}

void HFReduceBackend::setSequenceNumberForGroup() {
  MutexLock lock(&mu_);
  sequence_ = 0;
}

uint64_t HFReduceBackend::getSequenceNumberForGroup() {
  MutexLock lock(&mu_);
  return sequence_;
}

uint32_t HFReduceBackend::NextCollectiveTag() {
  MutexLock lock(&mu_);
  return kCollectiveTagBit | (collective_tags_++ & ~kCollectiveTagBit);
}

void HFReduceBackend::CheckRank(int peer, const char* op) const {
  TORCH_CHECK(peer >= 0 && peer < getSize(), "hfreduce: ", op, " rank ", peer,
              " is outside the group's ranks 0..", getSize() - 1);
}

}  // namespace ff::haiscale

#include "hfreduce_backend.h"

#include <ATen/core/ivalue.h>

#ifdef FF_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <stdexcept>
#include <thread>

namespace ff::haiscale {
namespace {

namespace hf = ff::hfreduce;

// User tags of send/recv are non-negative ints; collectives built from point-to-point messages
// use tags with the top bit set.
constexpr uint32_t kCollectiveTagBit = 0x80000000u;

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
struct PendingOp {
  explicit PendingOp(std::size_t n) : left(n) {}
  // True for the call that completes the last work; keeps the first failure.
  bool Done(const Status& st) {
    std::lock_guard lock(mu);
    if (!st.ok() && first_error.ok()) first_error = st;
    return --left == 0;
  }
  std::function<void(const Status&)> finish;  // copies staged results back, completes the Work
  std::mutex mu;
  std::size_t left;
  Status first_error;
};

// Runs completions (copy-back of staged tensors, then marking futures, whose callbacks may take
// the GIL) on one thread of the backend's own, in the order the collectives completed.
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
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::shared_ptr<PendingOp> op) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(op));
    }
    cv_.notify_all();
  }
  // The finished ops, for the calling thread to drop.
  std::vector<std::shared_ptr<PendingOp>> TakeFinished() {
    std::vector<std::shared_ptr<PendingOp>> dead;
    std::lock_guard lock(mu_);
    dead.swap(graveyard_);
    return dead;
  }

 private:
  void Run() {
    while (true) {
      std::shared_ptr<PendingOp> op;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and everything posted has run
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      op->finish(op->first_error);
      std::lock_guard lock(mu_);
      graveyard_.push_back(std::move(op));
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PendingOp>> queue_;
  std::vector<std::shared_ptr<PendingOp>> graveyard_;
  bool stop_ = false;
  std::thread thread_;
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
    std::lock_guard lock(mu_);
    return done_;
  }
  bool isSuccess() const override {
    std::lock_guard lock(mu_);
    return done_ && !error_;
  }
  std::exception_ptr exception() const override {
    std::lock_guard lock(mu_);
    return error_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}

  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (timeout == ::kNoTimeout) {
      cv_.wait(lock, [&] { return done_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      throw std::runtime_error("hfreduce: operation did not complete within " +
                               std::to_string(timeout.count()) + " ms");
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // On the completer thread: records the outcome, wakes waiters, then completes the future
  // (running its callbacks on this thread).
  void Finish(std::exception_ptr error) {
    {
      std::lock_guard lock(mu_);
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  const std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

std::exception_ptr ErrorOf(const Status& st) {
  std::string message = st.message();
  if (message.rfind("hfreduce", 0) != 0) message = "hfreduce: " + message;
  return std::make_exception_ptr(std::runtime_error(message));
}

std::string TypeName(const at::Tensor& t) {
  return std::string(c10::toString(t.scalar_type()));
}

// The HFReduce element type a reduction of `t` runs in; bool travels as uint8.
hf::DataType ReductionType(const at::Tensor& t, const char* op) {
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

// What a torch ReduceOp becomes: an HFReduce op, and for PREMUL_SUM the factor applied first.
struct Reduction {
  hf::ReduceOp op = hf::ReduceOp::kSum;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensor_factor;

  void Scale(at::Tensor& t) const {
    if (!premul) return;
    if (tensor_factor.defined()) {
      t.mul_(tensor_factor.to(t.device()));
    } else {
      t.mul_(factor);
    }
  }
};

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
    default:
      TORCH_CHECK(false, "hfreduce: ", what, " with reduce op ", static_cast<int>(reduce_op.op_),
                  " (BAND/BOR/BXOR) is not supported; sum, avg, min, max, product and "
                  "premul_sum are");
  }
  (void)ReductionType(t, what);  // raises for unsupported element types
  return r;
}

void CheckSingle(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "hfreduce: ", op, " takes one tensor per call, got ",
              tensors.size());
}

void CheckSameType(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "hfreduce: ", op, " of ", TypeName(b), " into ",
              TypeName(a), ": the types differ");
}

std::size_t Bytes(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * t.element_size();
}

}  // namespace

// ---- construction and lifetime -----------------------------------------------------------------

HFReduceBackend::HFReduceBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                 BackendOptions options)
    : Backend(options.rank, options.size), options_(std::move(options)) {
  hf::CommunicatorOptions o;
  o.rank = options_.rank;
  o.world_size = options_.size;
  o.local_rank = options_.local_rank;
  o.store = std::make_shared<TorchStore>(store);
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

HFReduceBackend::~HFReduceBackend() {
  shutdown();
}

void HFReduceBackend::shutdown() {
  std::unique_ptr<hf::Communicator> comm;
  {
    std::lock_guard lock(mu_);
    comm.swap(comm_);
  }
  // Destroying the communicator finishes or cancels its operations, whose completions are
  // posted to the completer; the completer runs everything posted before it stops.
  comm.reset();
  completer_.reset();  // runs what is queued; the finished ops are released here, below
}

void HFReduceBackend::abort() {
  shutdown();
}

c10::intrusive_ptr<c10d::Backend::Options> HFReduceBackend::getBackendOptions() {
  auto o = c10::make_intrusive<Options>("hfreduce", options_.timeout);
  o->group_name = options_.group_name;
  return o;
}

int HFReduceBackend::num_nodes() const {
  std::lock_guard lock(mu_);
  TORCH_CHECK(comm_, "hfreduce: the process group was shut down");
  return comm_->num_nodes();
}

std::string HFReduceBackend::transport() const {
  std::lock_guard lock(mu_);
  TORCH_CHECK(comm_, "hfreduce: the process group was shut down");
  return comm_->transport();
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::Launch(c10d::OpType type, const char* title,
                                                       std::vector<at::Tensor> outputs,
                                                       const Issue& issue,
                                                       std::vector<Staged> staged,
                                                       std::function<void()> post) {
  auto work = c10::make_intrusive<HFReduceWork>(getRank(), type, std::move(outputs));
  std::vector<std::shared_ptr<hf::Work>> parts;
  std::vector<std::shared_ptr<PendingOp>> finished;  // dropped here, outside the lock
  Completer* completer = nullptr;
  {
    std::lock_guard lock(mu_);
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
  }
  auto op = std::make_shared<PendingOp>(parts.size());
  op->finish = [work, staged = std::move(staged), post = std::move(post)](const Status& st) {
    if (!st.ok()) return work->Finish(ErrorOf(st));
    try {
      for (const Staged& s : staged) {
        if (s.copy_back) s.user.copy_(s.buf);
      }
      if (post) post();
    } catch (...) {
      return work->Finish(std::current_exception());
    }
    work->Finish(nullptr);
  };
  if (parts.empty()) {
    completer->Post(op);
    return work;
  }
  // The callbacks hold only the op: the last one hands it to the completer, so no tensor is
  // released on HFReduce's pipeline threads.
  for (auto& part : parts) {
    part->OnComplete([op, completer](const Status& st) {
      if (op->Done(st)) completer->Post(op);
    });
  }
  return work;
}

uint32_t HFReduceBackend::NextCollectiveTag() {
  std::lock_guard lock(mu_);
  return kCollectiveTagBit | (collective_tags_++ & ~kCollectiveTagBit);
}

void HFReduceBackend::CheckRank(int peer, const char* op) const {
  TORCH_CHECK(peer >= 0 && peer < getSize(), "hfreduce: ", op, " rank ", peer,
              " is outside the group's ranks 0..", getSize() - 1);
}

namespace {

// A tensor the communicator can work on in place, or a contiguous host copy of it. CUDA tensors
// go to HFReduce's CUDA path directly where this extension is built against a CUDA torch and
// HFReduce with CUDA (FF_TORCH_CUDA); elsewhere through the host copy.
#ifdef FF_TORCH_CUDA
constexpr bool kCudaPath = true;
#else
constexpr bool kCudaPath = false;
#endif

struct Stager {
  static bool Direct(const at::Tensor& t) {
    return t.is_contiguous() && (t.device().is_cpu() || (kCudaPath && t.device().is_cuda()));
  }
  // copy_in: the communicator reads the tensor; copy_out: it writes the result back.
  template <typename Staged>
  static Staged Stage(const at::Tensor& t, bool copy_in, bool copy_out) {
    if (Direct(t)) return Staged{t, t, false};
    at::Tensor buf = copy_in ? t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true,
                                    at::MemoryFormat::Contiguous)
                             : at::empty(t.sizes(), t.options().device(at::kCPU));
    return Staged{t, buf, copy_out};
  }
};

}  // namespace

// ---- reductions --------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  CheckSingle(tensors, "allreduce");
  at::Tensor t = tensors[0];
  Reduction r = ReductionOf(opts.reduceOp, t, "allreduce");
  hf::DataType type = ReductionType(t, "allreduce");
  Staged s = Stager::Stage<Staged>(t, true, true);
  r.Scale(s.buf);
  void* data = s.buf.data_ptr();
  auto n = static_cast<std::size_t>(t.numel());
  return Launch(
      c10d::OpType::ALLREDUCE, "allreduce", tensors,
      [&](hf::Communicator& c) {
        return std::vector<std::shared_ptr<hf::Work>>{c.AllreduceAsync(data, data, n, type, r.op)};
      },
      {s});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<Staged> staged;
  std::vector<std::pair<hf::DataType, hf::ReduceOp>> how;
  for (at::Tensor& t : tensors) {
    Reduction r = ReductionOf(opts.reduceOp, t, "allreduce_coalesced");
    how.emplace_back(ReductionType(t, "allreduce_coalesced"), r.op);
    staged.push_back(Stager::Stage<Staged>(t, true, true));
    r.Scale(staged.back().buf);
  }
  return Launch(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
      [&](hf::Communicator& c) {
        std::vector<std::shared_ptr<hf::Work>> parts;
        for (std::size_t i = 0; i < staged.size(); ++i) {
          void* data = staged[i].buf.data_ptr();
          parts.push_back(c.AllreduceAsync(data, data, static_cast<std::size_t>(tensors[i].numel()),
                                           how[i].first, how[i].second));
        }
        return parts;
      },
      staged);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  CheckSingle(tensors, "reduce");
  CheckRank(static_cast<int>(opts.rootRank), "reduce: root");
  at::Tensor t = tensors[0];
  Reduction r = ReductionOf(opts.reduceOp, t, "reduce");
  hf::DataType type = ReductionType(t, "reduce");
  const bool root = opts.rootRank == getRank();
  // The root reduces in place; the others into a scratch copy, leaving their input as it was.
  Staged s = root ? Stager::Stage<Staged>(t, true, true)
                  : Staged{t, t.to(at::kCPU, false, true, at::MemoryFormat::Contiguous), false};
  r.Scale(s.buf);
  void* data = s.buf.data_ptr();
  auto n = static_cast<std::size_t>(t.numel());
  return Launch(
      c10d::OpType::REDUCE, "reduce", tensors,
      [&](hf::Communicator& c) {
        return std::vector<std::shared_ptr<hf::Work>>{c.AllreduceAsync(data, data, n, type, r.op)};
      },
      {s});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  CheckSameType(output, input, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * getSize(),
              "hfreduce: reduce_scatter_tensor: the input has ", input.numel(),
              " elements, but the output's ", output.numel(), " x ", getSize(),
              " ranks = ", output.numel() * getSize(), " are needed");
  Reduction r = ReductionOf(opts.reduceOp, input, "reduce_scatter_tensor");
  hf::DataType type = ReductionType(input, "reduce_scatter_tensor");
  Staged in =
      r.premul ? Staged{input, input.to(at::kCPU, false, true, at::MemoryFormat::Contiguous), false}
               : Stager::Stage<Staged>(input, true, false);
  r.Scale(in.buf);
  Staged out = Stager::Stage<Staged>(output, false, true);
  const void* send = in.buf.data_ptr();
  void* recv = out.buf.data_ptr();
  auto n = static_cast<std::size_t>(output.numel());
  return Launch(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output},
                [&](hf::Communicator& c) {
                  return std::vector<std::shared_ptr<hf::Work>>{
                      c.ReduceScatterAsync(send, recv, n, type, r.op)};
                },
                {in, out});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "hfreduce: reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<Staged> staged;
  std::vector<std::pair<hf::DataType, hf::ReduceOp>> how;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    CheckSameType(outputs[i], inputs[i], "reduce_scatter_tensor_coalesced");
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize(),
                "hfreduce: reduce_scatter_tensor_coalesced: input ", i, " has ", inputs[i].numel(),
                " elements, expected ", outputs[i].numel() * getSize());
    Reduction r = ReductionOf(opts.reduceOp, inputs[i], "reduce_scatter_tensor_coalesced");
    how.emplace_back(ReductionType(inputs[i], "reduce_scatter_tensor_coalesced"), r.op);
    staged.push_back(
        r.premul ? Staged{inputs[i],
                          inputs[i].to(at::kCPU, false, true, at::MemoryFormat::Contiguous), false}
                 : Stager::Stage<Staged>(inputs[i], true, false));
    r.Scale(staged.back().buf);
    staged.push_back(Stager::Stage<Staged>(outputs[i], false, true));
  }
  return Launch(
      c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs,
      [&](hf::Communicator& c) {
        std::vector<std::shared_ptr<hf::Work>> parts;
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          parts.push_back(c.ReduceScatterAsync(
              staged[2 * i].buf.data_ptr(), staged[2 * i + 1].buf.data_ptr(),
              static_cast<std::size_t>(outputs[i].numel()), how[i].first, how[i].second));
        }
        return parts;
      },
      staged);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  CheckSingle(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "hfreduce: reduce_scatter needs one list of ", getSize(), " input tensors");
  at::Tensor output = outputs[0];
  for (const at::Tensor& t : inputs[0]) {
    CheckSameType(output, t, "reduce_scatter");
    TORCH_CHECK(t.numel() == output.numel(), "hfreduce: reduce_scatter: an input has ", t.numel(),
                " elements, the output ", output.numel());
  }
  // The list is gathered into one flat buffer (a copy the premul factor may scale).
  std::vector<at::Tensor> flat_pieces;
  for (const at::Tensor& t : inputs[0])
    flat_pieces.push_back(t.reshape({-1}).to(at::kCPU));
  at::Tensor flat = at::cat(flat_pieces);
  return _reduce_scatter_base(output, flat, opts);
}

// ---- data movement -----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> HFReduceBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  CheckSingle(tensors, "broadcast");
  CheckRank(static_cast<int>(opts.rootRank), "broadcast: root");
  at::Tensor t = tensors[0];
  const bool root = opts.rootRank == getRank();
  Staged s = Stager::Stage<Staged>(t, root, !root);
  void* data = s.buf.data_ptr();
  std::size_t bytes = Bytes(t);
  int root_rank = static_cast<int>(opts.rootRank);
  return Launch(c10d::OpType::BROADCAST, "broadcast", tensors,
                [&](hf::Communicator& c) {
                  return std::vector<std::shared_ptr<hf::Work>>{
                      c.BroadcastAsync(data, bytes, hf::DataType::kUInt8, root_rank)};
                },
                {s});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  CheckSameType(output, input, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * getSize(),
              "hfreduce: all_gather_into_tensor: the output has ", output.numel(),
              " elements, but the input's ", input.numel(), " x ", getSize(),
              " ranks = ", input.numel() * getSize(), " are needed");
  Staged out = Stager::Stage<Staged>(output, false, true);
  // In place (the input is this rank's piece of the output) stays in place when not staged.
  Staged in = Stager::Stage<Staged>(input, true, false);
  const void* send = in.buf.data_ptr();
  void* recv = out.buf.data_ptr();
  std::size_t bytes = Bytes(input);
  return Launch(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {output},
                [&](hf::Communicator& c) {
                  return std::vector<std::shared_ptr<hf::Work>>{
                      c.AllgatherAsync(send, recv, bytes, hf::DataType::kUInt8)};
                },
                {in, out});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "hfreduce: allgather_into_tensor_coalesced: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  std::vector<Staged> staged;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    CheckSameType(outputs[i], inputs[i], "allgather_into_tensor_coalesced");
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * getSize(),
                "hfreduce: allgather_into_tensor_coalesced: output ", i, " has ",
                outputs[i].numel(), " elements, expected ", inputs[i].numel() * getSize());
    staged.push_back(Stager::Stage<Staged>(inputs[i], true, false));
    staged.push_back(Stager::Stage<Staged>(outputs[i], false, true));
  }
  return Launch(
      c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", outputs,
      [&](hf::Communicator& c) {
        std::vector<std::shared_ptr<hf::Work>> parts;
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          parts.push_back(c.AllgatherAsync(staged[2 * i].buf.data_ptr(),
                                           staged[2 * i + 1].buf.data_ptr(), Bytes(inputs[i]),
                                           hf::DataType::kUInt8));
        }
        return parts;
      },
      staged);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "hfreduce: allgather takes one input tensor and one output list per call");
  return allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  TORCH_CHECK(output_lists.size() == inputs.size(), "hfreduce: allgather: ", output_lists.size(),
              " output lists for ", inputs.size(), " inputs");
  std::vector<Staged> staged;
  std::vector<at::Tensor> flats;
  std::vector<at::Tensor> all_outputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(static_cast<int>(output_lists[i].size()) == getSize(),
                "hfreduce: allgather: ", output_lists[i].size(), " output tensors for a group of ",
                getSize());
    for (const at::Tensor& o : output_lists[i]) {
      CheckSameType(o, inputs[i], "allgather");
      TORCH_CHECK(o.numel() == inputs[i].numel(), "hfreduce: allgather: an output has ", o.numel(),
                  " elements, the input ", inputs[i].numel(),
                  " (every rank must send the same size)");
      all_outputs.push_back(o);
    }
    staged.push_back(Stager::Stage<Staged>(inputs[i], true, false));
    flats.push_back(
        at::empty({getSize() * inputs[i].numel()}, inputs[i].options().device(at::kCPU)));
  }
  auto post = [output_lists, flats] {
    for (std::size_t i = 0; i < output_lists.size(); ++i) {
      int64_t n = flats[i].numel() / static_cast<int64_t>(output_lists[i].size());
      for (std::size_t r = 0; r < output_lists[i].size(); ++r) {
        at::Tensor o = output_lists[i][r];
        o.copy_(flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view(o.sizes()));
      }
    }
  };
  return Launch(
      c10d::OpType::ALLGATHER, "allgather", all_outputs,
      [&](hf::Communicator& c) {
        std::vector<std::shared_ptr<hf::Work>> parts;
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          parts.push_back(c.AllgatherAsync(staged[i].buf.data_ptr(), flats[i].data_ptr(),
                                           Bytes(inputs[i]), hf::DataType::kUInt8));
        }
        return parts;
      },
      staged, post);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  CheckSingle(inputs, "gather");
  CheckRank(static_cast<int>(opts.rootRank), "gather: root");
  const bool root = opts.rootRank == getRank();
  at::Tensor input = inputs[0];
  if (root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "hfreduce: gather: the root needs one list of ", getSize(), " output tensors");
    for (const at::Tensor& o : outputs[0]) {
      CheckSameType(o, input, "gather");
      TORCH_CHECK(o.numel() == input.numel(), "hfreduce: gather: an output has ", o.numel(),
                  " elements, the input ", input.numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "hfreduce: gather: only the root (rank ", opts.rootRank, ") passes outputs");
  }
  // Every rank gathers (the same traffic tree as an allgather); the root keeps the pieces.
  Staged in = Stager::Stage<Staged>(input, true, false);
  at::Tensor flat = at::empty({getSize() * input.numel()}, input.options().device(at::kCPU));
  std::vector<at::Tensor> outs = root ? outputs[0] : std::vector<at::Tensor>{};
  auto post = [outs, flat, n = input.numel()] {
    for (std::size_t r = 0; r < outs.size(); ++r) {
      at::Tensor o = outs[r];
      o.copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(o.sizes()));
    }
  };
  const void* send = in.buf.data_ptr();
  void* recv = flat.data_ptr();
  std::size_t bytes = Bytes(input);
  return Launch(
      c10d::OpType::GATHER, "gather", outs,
      [&](hf::Communicator& c) {
        return std::vector<std::shared_ptr<hf::Work>>{
            c.AllgatherAsync(send, recv, bytes, hf::DataType::kUInt8)};
      },
      {in}, post);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  CheckSingle(outputs, "scatter");
  CheckRank(static_cast<int>(opts.rootRank), "scatter: root");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor output = outputs[0];
  std::vector<Staged> staged;
  if (root == getRank()) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "hfreduce: scatter: the root needs one list of ", getSize(), " input tensors");
    for (const at::Tensor& t : inputs[0]) {
      CheckSameType(output, t, "scatter");
      TORCH_CHECK(t.numel() == output.numel(), "hfreduce: scatter: an input has ", t.numel(),
                  " elements, the output ", output.numel());
      staged.push_back(Stager::Stage<Staged>(t, true, false));
    }
    output.copy_(inputs[0][static_cast<std::size_t>(root)].view(output.sizes()));
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "hfreduce: scatter: only the root (rank ", root, ") passes inputs");
    staged.push_back(Stager::Stage<Staged>(output, false, true));
  }
  const uint32_t tag = NextCollectiveTag();
  const std::size_t bytes = Bytes(output);
  const int me = getRank(), size = getSize();
  return Launch(
      c10d::OpType::SCATTER, "scatter", outputs,
      [&](hf::Communicator& c) {
        std::vector<std::shared_ptr<hf::Work>> parts;
        if (me == root) {
          for (int r = 0; r < size; ++r) {
            if (r == root) continue;
            parts.push_back(c.SendAsync(staged[static_cast<std::size_t>(r)].buf.data_ptr(), bytes,
                                        hf::DataType::kUInt8, r, tag));
          }
        } else {
          parts.push_back(
              c.RecvAsync(staged[0].buf.data_ptr(), bytes, hf::DataType::kUInt8, root, tag));
        }
        return parts;
      },
      staged);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& /*opts*/) {
  CheckSameType(output, input, "all_to_all_single");
  const int size = getSize();
  auto splits = [&](const at::Tensor& t, const std::vector<int64_t>& given, const char* which) {
    TORCH_CHECK(t.dim() >= 1 || size == 1, "hfreduce: all_to_all_single: the ", which,
                " tensor needs a first dimension to split");
    int64_t rows = t.dim() >= 1 ? t.size(0) : 1;
    std::vector<int64_t> s = given;
    if (s.empty()) {
      TORCH_CHECK(rows % size == 0, "hfreduce: all_to_all_single: the ", which, "'s ", rows,
                  " rows do not split evenly over ", size, " ranks");
      s.assign(static_cast<std::size_t>(size), rows / size);
    }
    TORCH_CHECK(static_cast<int>(s.size()) == size, "hfreduce: all_to_all_single: ", s.size(), " ",
                which, " split sizes for ", size, " ranks");
    int64_t total = 0;
    for (int64_t v : s) {
      TORCH_CHECK(v >= 0, "hfreduce: all_to_all_single: a negative split size");
      total += v;
    }
    TORCH_CHECK(total == rows, "hfreduce: all_to_all_single: ", which, " split sizes add up to ",
                total, ", the tensor has ", rows, " rows");
    return s;
  };
  std::vector<int64_t> out_splits = splits(output, output_split_sizes, "output");
  std::vector<int64_t> in_splits = splits(input, input_split_sizes, "input");
  const int64_t out_row = output.dim() >= 1 && output.size(0) > 0
                              ? static_cast<int64_t>(Bytes(output)) / output.size(0)
                              : 0;
  const int64_t in_row = input.dim() >= 1 && input.size(0) > 0
                             ? static_cast<int64_t>(Bytes(input)) / input.size(0)
                             : 0;
  Staged in = Stager::Stage<Staged>(input, true, false);
  Staged out = Stager::Stage<Staged>(output, false, true);
  std::vector<std::size_t> in_off(static_cast<std::size_t>(size) + 1, 0),
      out_off(static_cast<std::size_t>(size) + 1, 0);
  for (int r = 0; r < size; ++r) {
    in_off[r + 1] = in_off[r] + static_cast<std::size_t>(in_splits[r] * in_row);
    out_off[r + 1] = out_off[r] + static_cast<std::size_t>(out_splits[r] * out_row);
  }
  const int me = getRank();
  TORCH_CHECK(in_off[me + 1] - in_off[me] == out_off[me + 1] - out_off[me],
              "hfreduce: all_to_all_single: this rank sends itself ", in_off[me + 1] - in_off[me],
              " bytes but expects ", out_off[me + 1] - out_off[me]);
  auto* src = static_cast<char*>(in.buf.data_ptr());
  auto* dst = static_cast<char*>(out.buf.data_ptr());
  if (out_off[me + 1] > out_off[me]) {
    // This rank's own rows, as a tensor copy (the buffers may be on a GPU).
    const auto len = static_cast<int64_t>(out_off[me + 1] - out_off[me]);
    out.buf.reshape({-1})
        .view(at::kByte)
        .narrow(0, static_cast<int64_t>(out_off[me]), len)
        .copy_(
            in.buf.reshape({-1}).view(at::kByte).narrow(0, static_cast<int64_t>(in_off[me]), len));
  }
  const uint32_t tag = NextCollectiveTag();
  return Launch(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output},
                [&](hf::Communicator& c) {
                  std::vector<std::shared_ptr<hf::Work>> parts;
                  for (int r = 0; r < size; ++r) {
                    if (r == me) continue;
                    parts.push_back(c.RecvAsync(dst + out_off[r], out_off[r + 1] - out_off[r],
                                                hf::DataType::kUInt8, r, tag));
                    parts.push_back(c.SendAsync(src + in_off[r], in_off[r + 1] - in_off[r],
                                                hf::DataType::kUInt8, r, tag));
                  }
                  return parts;
                },
                {in, out});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& /*opts*/) {
  const int size = getSize(), me = getRank();
  TORCH_CHECK(static_cast<int>(outputs.size()) == size && static_cast<int>(inputs.size()) == size,
              "hfreduce: all_to_all needs ", size, " input and ", size, " output tensors");
  std::vector<Staged> staged;
  for (int r = 0; r < size; ++r) {
    CheckSameType(outputs[r], inputs[r], "all_to_all");
    staged.push_back(Stager::Stage<Staged>(inputs[r], true, false));
    staged.push_back(Stager::Stage<Staged>(outputs[r], false, true));
  }
  TORCH_CHECK(Bytes(inputs[me]) == Bytes(outputs[me]),
              "hfreduce: all_to_all: this rank sends itself ", Bytes(inputs[me]),
              " bytes but expects ", Bytes(outputs[me]));
  staged[2 * me + 1].buf.copy_(staged[2 * me].buf.view(staged[2 * me + 1].buf.sizes()));
  const uint32_t tag = NextCollectiveTag();
  return Launch(
      c10d::OpType::ALLTOALL, "all_to_all", outputs,
      [&](hf::Communicator& c) {
        std::vector<std::shared_ptr<hf::Work>> parts;
        for (int r = 0; r < size; ++r) {
          if (r == me) continue;
          parts.push_back(c.RecvAsync(staged[2 * r + 1].buf.data_ptr(), Bytes(outputs[r]),
                                      hf::DataType::kUInt8, r, tag));
          parts.push_back(c.SendAsync(staged[2 * r].buf.data_ptr(), Bytes(inputs[r]),
                                      hf::DataType::kUInt8, r, tag));
        }
        return parts;
      },
      staged);
}

// ---- point to point and barrier ----------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> HFReduceBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                     int tag) {
  CheckSingle(tensors, "send");
  CheckRank(dst_rank, "send: destination");
  TORCH_CHECK(dst_rank != getRank(), "hfreduce: send to itself (rank ", dst_rank, ")");
  TORCH_CHECK(tag >= 0, "hfreduce: send: tags must be non-negative, got ", tag);
  Staged s = Stager::Stage<Staged>(tensors[0], true, false);
  const void* data = s.buf.data_ptr();
  std::size_t bytes = Bytes(tensors[0]);
  return Launch(c10d::OpType::SEND, "send", tensors,
                [&](hf::Communicator& c) {
                  return std::vector<std::shared_ptr<hf::Work>>{c.SendAsync(
                      data, bytes, hf::DataType::kUInt8, dst_rank, static_cast<uint32_t>(tag))};
                },
                {s});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                     int tag) {
  CheckSingle(tensors, "recv");
  CheckRank(src_rank, "recv: source");
  TORCH_CHECK(src_rank != getRank(), "hfreduce: recv from itself (rank ", src_rank, ")");
  TORCH_CHECK(tag >= 0, "hfreduce: recv: tags must be non-negative, got ", tag);
  Staged s = Stager::Stage<Staged>(tensors[0], false, true);
  void* data = s.buf.data_ptr();
  std::size_t bytes = Bytes(tensors[0]);
  return Launch(c10d::OpType::RECV, "recv", tensors,
                [&](hf::Communicator& c) {
                  return std::vector<std::shared_ptr<hf::Work>>{c.RecvAsync(
                      data, bytes, hf::DataType::kUInt8, src_rank, static_cast<uint32_t>(tag))};
                },
                {s});
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::recvAnysource(std::vector<at::Tensor>& /*tensors*/,
                                                              int /*tag*/) {
  TORCH_CHECK(false, "hfreduce: recv from any source is not supported; name the source rank");
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  return Launch(c10d::OpType::BARRIER, "barrier", {}, [&](hf::Communicator& c) {
    return std::vector<std::shared_ptr<hf::Work>>{c.BarrierAsync()};
  });
}

}  // namespace ff::haiscale

// The "hfreduce" torch.distributed backend: a c10d::Backend over ff::hfreduce::Communicator.
// hfreduce_backend.cc holds its core (rendezvous, lifetime, completion), backend_reductions.cc
// and backend_movement.cc its operations.
//
// One backend serves one process group (the default group or a subgroup) on CPU and CUDA
// tensors. It rendezvouses through the store torch hands it (no second port), then every
// collective is issued on its communicator in call order and completes asynchronously: the
// returned Work's future is completed on the backend's own completion thread (never on a caller's
// thread, never on HFReduce's pipeline threads), with the output tensors as its value, so DDP's
// comm hooks and FSDP2's overlap work unchanged.
//
// What each torch op becomes:
//   allreduce (sum, avg, min, max, product, premul_sum,  HFReduce allreduce (premul: scaled first)
//     band, bor, bxor)
//   allreduce of a sparse COO tensor (sum, avg)          allgathers of its entries, coalesced
//   reduce_scatter / _reduce_scatter_base                HFReduce reduce-scatter
//   allgather / _allgather_base                          HFReduce allgather (bytes: any dtype)
//   broadcast                                            HFReduce broadcast (bytes: any dtype)
//   reduce, gather                                       allreduce / allgather, root keeps it
//   scatter, alltoall(_base), send / recv                HFReduce point-to-point (tagged)
//   barrier                                              HFReduce barrier
// The coalesced forms issue their ops back to back and complete when the last one has.
// Reductions take fp32, fp64, fp16, bf16, int32, int64, uint8, int8 and bool (sum/max = or,
// product/min = and); anything else raises a RuntimeError naming the op and the type.
//
// Tensors that are not contiguous CPU tensors (strided views; CUDA tensors in a build without
// HFReduce's CUDA path) are staged through a contiguous host copy.
//
// Failures (a dead rank, mismatched calls, the timeout) complete the Work with an error: wait()
// raises RuntimeError naming the cause, and the backend is then broken. shutdown()/abort() and
// the destructor stop every thread the backend started.
//
// Membership changes (torch's own fault-tolerance API): abort() fails every pending operation at
// once, on this rank and, through HFReduce, on the others (ProcessGroup.abort(), and what
// SHRINK_ABORT does); shrink() (torch.distributed.shrink_group) makes the backend of the surviving
// ranks without restarting them. A larger group (ranks started later joining) is a new backend
// created by every member on a store they share (haiscale.new_process_group).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "common/thread_annotations.h"
#include "hfreduce/communicator.h"

namespace ff::haiscale {

struct BackendOptions {
  int rank = 0;
  int size = 1;
  // Rendezvous and every collective fail after this long.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string group_name;
  // Ranks with the same node id share a node (shared memory and one CPU reduction).
  std::string node_id;
  // When >= 0, the local rank the launcher gave this process; the rendezvous fails if the node
  // grouping disagrees.
  int local_rank = -1;
  // Address other nodes reach this one at, and the inter-node transport (auto, tcp, verbs).
  std::string listen_host = "127.0.0.1";
  std::string transport = "auto";
  // Pipeline geometry (0: HFReduce's defaults).
  std::size_t chunk_bytes = 0;
  int pipeline_depth = 0;
  // Rendezvous through an hfreduce store (hfreduce-store, or hai-server's) at this address under
  // this prefix instead of the c10d store (which may then be null).
  std::string store_address;
  std::string store_prefix;
};

class Completer;

// The process's collectives on every hfreduce backend so far (not point-to-point): how many
// completed and their time from issue to completion, summed. Step telemetry (hai_job) takes the
// difference over a step: the rank that arrives last at a collective spends the least time in it.
struct CommClock {
  uint64_t collectives = 0;
  double seconds = 0;
};
CommClock ProcessCommClock();

class HFReduceBackend final : public c10d::Backend {
 public:
  // Rendezvouses with the group's other ranks through `store`; throws c10::Error on failure.
  HFReduceBackend(const c10::intrusive_ptr<c10d::Store>& store, BackendOptions options);
  // Over a communicator already made (a shrunk one); options.rank and size are its own.
  HFReduceBackend(std::unique_ptr<hfreduce::Communicator> comm, BackendOptions options);
  ~HFReduceBackend() override;

  const std::string getBackendName() const override { return "hfreduce"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Stop every thread and release the shared memory; later calls raise.
  void shutdown() override;
  // Fails every pending operation at once (here and on the group's other ranks), then shuts down.
  void abort() override;
  bool supportsShrinking() const override { return true; }
  // The backend of this group's ranks less `ranks_to_exclude` (group ranks), renumbered in order;
  // every survivor calls it. shrink_flags & 1 (SHRINK_ABORT): abort this backend first.
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
      const c10::intrusive_ptr<Options>& opts_override) override;
  // Sequence numbers (TORCH_DISTRIBUTED_DEBUG=DETAIL, object collectives on subgroups): the
  // collectives issued so far, the same on every rank of the group since each issues them in the
  // same order; point-to-point operations, between two ranks only, are not counted. Every group
  // starts at 0, as gloo's do.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // How many nodes the group spans, and which transport joins them ("shm" for one node).
  int num_nodes() const;
  std::string transport() const;

 private:
  // One staged tensor: `buf` is what the communicator reads and writes; when it is not the
  // caller's tensor, `user` gets the result copied back before the Work completes.
  struct Staged {
    at::Tensor user;
    at::Tensor buf;
    bool copy_back = false;
  };
  using Issue =
      std::function<std::vector<std::shared_ptr<hfreduce::Work>>(hfreduce::Communicator&)>;

  // Issues the HFReduce works of one torch op (under the submission lock) and returns the torch
  // Work that completes, after `post` ran, when all of them have. `source`: where a receive
  // from any source writes its sender (the Work's sourceRank()).
  c10::intrusive_ptr<c10d::Work> Launch(c10d::OpType type, const char* title,
                                        std::vector<at::Tensor> outputs, const Issue& issue,
                                        std::vector<Staged> staged = {},
                                        std::function<void()> post = {},
                                        std::shared_ptr<int> source = nullptr);
  // allgather of each input into its list of per-rank outputs: per_input[i][rank].
  c10::intrusive_ptr<c10d::Work> AllgatherLists(
      const std::vector<std::vector<at::Tensor>>& per_input, const std::vector<at::Tensor>& inputs,
      c10d::OpType type, const char* op);
  // allreduce (SUM or AVG) of a sparse COO tensor, as Gloo does it: every rank's coalesced
  // indices and values allgathered (after their counts), summed by coalescing, written back into
  // `t`. Blocks the caller for the counts' allgather.
  c10::intrusive_ptr<c10d::Work> SparseAllreduce(at::Tensor& t, const c10d::AllreduceOptions& opts);
  // A tag for the point-to-point messages of one collective (scatter, alltoall): above every
  // user tag, the same on every rank because collectives are issued in the same order.
  uint32_t NextCollectiveTag();
  void CheckRank(int peer, const char* op) const;

  const BackendOptions options_;
  mutable Mutex mu_;  // serialises submissions (a Communicator takes one caller at a time)
  std::unique_ptr<hfreduce::Communicator> comm_ FF_PT_GUARDED_BY(mu_);
  std::unique_ptr<Completer> completer_;
  uint32_t collective_tags_ FF_GUARDED_BY(mu_) = 0;
  uint64_t sequence_ FF_GUARDED_BY(mu_) = 0;  // collectives issued
};

}  // namespace ff::haiscale

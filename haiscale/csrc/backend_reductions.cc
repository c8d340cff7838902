// The reductions of the hfreduce backend: allreduce, reduce, reduce-scatter (see
// hfreduce_backend.h for what each becomes).
#include "backend_ops.h"
#include "hfreduce_backend.h"

namespace ff::haiscale {

using namespace detail;  // NOLINT: the helpers shared by the op files

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

}  // namespace ff::haiscale

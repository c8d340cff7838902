// The reductions of the hfreduce backend: allreduce, reduce, reduce-scatter (see
// hfreduce_backend.h for what each becomes).
#include "backend_ops.h"
#include "hfreduce_backend.h"

namespace ff::haiscale {

using namespace detail;  // NOLINT: the helpers shared by the op files

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].layout() == at::kSparse) {
    return SparseAllreduce(tensors[0], opts);
  }
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

c10::intrusive_ptr<c10d::Work> HFReduceBackend::SparseAllreduce(
    at::Tensor& t, const c10d::AllreduceOptions& opts) {
  const auto op = opts.reduceOp.op_;
  TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG,
              "hfreduce: allreduce of a sparse tensor takes SUM or AVG (reduce op ",
              static_cast<int>(op), " given)");
  TORCH_CHECK(op != c10d::ReduceOp::AVG || at::isFloatingType(t.scalar_type()),
              "hfreduce: allreduce with AVG of a sparse ", TypeName(t),
              " tensor: AVG takes floating-point values");
  const int world = getSize();
  // This rank's entries, each index once, on the host.
  at::Tensor mine = t.coalesce().to(at::kCPU);
  at::Tensor indices = mine._indices().contiguous();  // sparse_dim x nnz
  at::Tensor values = mine._values().contiguous();    // nnz x dense sizes
  const int64_t nnz = mine._nnz();
  // How many entries each rank has (a collective of its own, waited for here).
  at::Tensor counts = at::empty({world}, at::kLong);
  at::Tensor count = at::full({1}, nnz, at::kLong);
  _allgather_base(counts, count, c10d::AllgatherOptions())->wait();
  const int64_t most = counts.max().item<int64_t>();
  // Every rank's entries, padded to the most any rank has.
  std::vector<int64_t> value_shape = values.sizes().vec();
  value_shape[0] = most;
  at::Tensor my_indices = at::zeros({indices.size(0), most}, indices.options());
  at::Tensor my_values = at::zeros(value_shape, values.options());
  my_indices.narrow(1, 0, nnz).copy_(indices);
  my_values.narrow(0, 0, nnz).copy_(values);
  at::Tensor all_indices = at::empty({world, indices.size(0), most}, indices.options());
  std::vector<int64_t> all_shape = value_shape;
  all_shape.insert(all_shape.begin(), world);
  at::Tensor all_values = at::empty(all_shape, values.options());
  const std::size_t index_bytes = Bytes(my_indices), value_bytes = Bytes(my_values);
  const void* send_i = my_indices.data_ptr();
  const void* send_v = my_values.data_ptr();
  void* recv_i = all_indices.data_ptr();
  void* recv_v = all_values.data_ptr();
  // The sum: every rank's entries together, coalesced (equal indices added), into `t`.
  auto post = [t, counts, all_indices, all_values, my_indices, my_values, world,
               avg = op == c10d::ReduceOp::AVG]() mutable {
    std::vector<at::Tensor> is, vs;
    for (int r = 0; r < world; ++r) {
      const int64_t n = counts[r].item<int64_t>();
      is.push_back(all_indices[r].narrow(1, 0, n));
      vs.push_back(all_values[r].narrow(0, 0, n));
    }
    at::Tensor sum = at::sparse_coo_tensor(at::cat(is, 1), at::cat(vs, 0), t.sizes(),
                                           t.options().device(at::kCPU))
                         .coalesce();
    if (avg) sum = sum / world;
    t.copy_(sum.to(t.device()));
  };
  return Launch(
      c10d::OpType::ALLREDUCE, "allreduce (sparse)", {t},
      [&](hf::Communicator& c) {
        return std::vector<std::shared_ptr<hf::Work>>{
            c.AllgatherAsync(send_i, recv_i, index_bytes, hf::DataType::kUInt8),
            c.AllgatherAsync(send_v, recv_v, value_bytes, hf::DataType::kUInt8)};
      },
      {}, post);
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

// The data movement of the hfreduce backend: broadcast, allgather, gather, scatter,
// all-to-all, send/recv and barrier (see hfreduce_backend.h for what each becomes).
#include "backend_ops.h"
#include "hfreduce_backend.h"

namespace ff::haiscale {

using namespace detail;  // NOLINT: the helpers shared by the op files

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
    const c10d::AllgatherOptions& /*opts*/) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "hfreduce: allgather takes one input tensor and one output list per call");
  return AllgatherLists(outputs, inputs, c10d::OpType::ALLGATHER, "allgather");
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  // torch's layout (all_gather_coalesced, and gloo's): one list per rank, holding that rank's
  // piece of every input: output_lists[rank][i].
  TORCH_CHECK(static_cast<int>(output_lists.size()) == getSize(),
              "hfreduce: allgather_coalesced: ", output_lists.size(),
              " output lists for a group of ", getSize(), " (one list per rank)");
  std::vector<std::vector<at::Tensor>> per_input(inputs.size());
  for (std::size_t r = 0; r < output_lists.size(); ++r) {
    TORCH_CHECK(output_lists[r].size() == inputs.size(), "hfreduce: allgather_coalesced: rank ", r,
                "'s output list has ", output_lists[r].size(), " tensors for ", inputs.size(),
                " inputs");
    for (std::size_t i = 0; i < inputs.size(); ++i)
      per_input[i].push_back(output_lists[r][i]);
  }
  return AllgatherLists(per_input, inputs, c10d::OpType::ALLGATHER_COALESCED,
                        "allgather_coalesced");
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::AllgatherLists(
    const std::vector<std::vector<at::Tensor>>& per_input, const std::vector<at::Tensor>& inputs,
    c10d::OpType type, const char* op) {
  std::vector<Staged> staged;
  std::vector<at::Tensor> flats;
  std::vector<at::Tensor> all_outputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(static_cast<int>(per_input[i].size()) == getSize(), "hfreduce: ", op, ": ",
                per_input[i].size(), " output tensors for a group of ", getSize());
    for (const at::Tensor& o : per_input[i]) {
      CheckSameType(o, inputs[i], op);
      TORCH_CHECK(o.numel() == inputs[i].numel(), "hfreduce: ", op, ": an output has ", o.numel(),
                  " elements, the input ", inputs[i].numel(),
                  " (every rank must send the same size)");
      all_outputs.push_back(o);
    }
    staged.push_back(Stager::Stage<Staged>(inputs[i], true, false));
    flats.push_back(
        at::empty({getSize() * inputs[i].numel()}, inputs[i].options().device(at::kCPU)));
  }
  auto post = [per_input, flats] {
    for (std::size_t i = 0; i < per_input.size(); ++i) {
      int64_t n = flats[i].numel() / static_cast<int64_t>(per_input[i].size());
      for (std::size_t r = 0; r < per_input[i].size(); ++r) {
        at::Tensor o = per_input[i][r];
        o.copy_(flats[i].narrow(0, static_cast<int64_t>(r) * n, n).view(o.sizes()));
      }
    }
  };
  return Launch(
      type, op, all_outputs,
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
    output.copy_(inputs[0][static_cast<std::size_t>(root)].reshape(output.sizes()));
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

c10::intrusive_ptr<c10d::Work> HFReduceBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  CheckSingle(tensors, "recv");
  TORCH_CHECK(tag >= 0, "hfreduce: recv: tags must be non-negative, got ", tag);
  TORCH_CHECK(getSize() > 1, "hfreduce: recv from any source in a group of one rank");
  Staged s = Stager::Stage<Staged>(tensors[0], false, true);
  void* data = s.buf.data_ptr();
  std::size_t bytes = Bytes(tensors[0]);
  auto source = std::make_shared<int>(-1);
  return Launch(
      c10d::OpType::RECVANYSOURCE, "recv", tensors,
      [&](hf::Communicator& c) {
        return std::vector<std::shared_ptr<hf::Work>>{c.RecvAnyAsync(
            data, bytes, hf::DataType::kUInt8, static_cast<uint32_t>(tag), source.get())};
      },
      {s}, {}, source);
}

c10::intrusive_ptr<c10d::Work> HFReduceBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  return Launch(c10d::OpType::BARRIER, "barrier", {}, [&](hf::Communicator& c) {
    return std::vector<std::shared_ptr<hf::Work>>{c.BarrierAsync()};
  });
}

}  // namespace ff::haiscale

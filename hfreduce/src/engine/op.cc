#include "engine/op.h"

namespace ff::hfreduce {

std::string DescribeOp(const OpDesc& desc) {
  auto type = static_cast<DataType>(desc.dtype);
  switch (static_cast<CollectiveKind>(desc.kind)) {
    case CollectiveKind::kAllreduce:
      return "allreduce of " + std::to_string(desc.count) + " x " +
             std::string(DataTypeName(type)) + " (" +
             std::string(ReduceOpName(static_cast<ReduceOp>(desc.redop))) + ")";
    case CollectiveKind::kBroadcast:
      return "broadcast of " + std::to_string(desc.count) + " x " +
             std::string(DataTypeName(type)) + " from rank " + std::to_string(desc.root);
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kReduceScatter:
      return "reduce-scatter of " + std::to_string(desc.count) + " x " +
             std::string(DataTypeName(type)) + " per rank (" +
             std::string(ReduceOpName(static_cast<ReduceOp>(desc.redop))) + ")";
    case CollectiveKind::kAllgather:
      return "allgather of " + std::to_string(desc.count) + " x " +
             std::string(DataTypeName(type)) + " per rank";
  }
  return "unknown operation";
}

OpPlan MakePlan(const OpDesc& desc, uint32_t first_chunk, std::size_t chunk_bytes, int world_size) {
  OpPlan plan;
  plan.desc = desc;
  plan.first_chunk = first_chunk;
  plan.chunk_bytes = chunk_bytes;
  const std::size_t element = ElementSize(static_cast<DataType>(desc.dtype));
  switch (plan.kind()) {
    case CollectiveKind::kBarrier:
      plan.bytes = 0;
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllgather:
      plan.shard_bytes = desc.count * element;
      plan.bytes = plan.shard_bytes * static_cast<std::size_t>(world_size);
      if (plan.shard_bytes > 0) {
        plan.chunks_per_shard =
            static_cast<uint32_t>((plan.shard_bytes + chunk_bytes - 1) / chunk_bytes);
        plan.num_chunks = plan.chunks_per_shard * static_cast<uint32_t>(world_size);
        return plan;
      }
      break;
    default:
      plan.bytes = desc.count * element;
      break;
  }
  plan.num_chunks =
      static_cast<uint32_t>(std::max<std::size_t>(1, (plan.bytes + chunk_bytes - 1) / chunk_bytes));
  return plan;
}

FrameHeader MakeFrame(const OpPlan& plan, uint32_t g, uint32_t bytes) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.op_seq = plan.desc.op_seq;
  h.chunk = g;
  h.bytes = bytes;
  h.kind = plan.desc.kind;
  h.dtype = plan.desc.dtype;
  h.redop = plan.desc.redop;
  h.root = plan.desc.root;
  h.count = plan.desc.count;
  return h;
}

}  // namespace ff::hfreduce

// Element types and reduction operations of HFReduce collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ff::hfreduce {

enum class DataType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,   // IEEE binary16; reduced with fp32 accumulation
  kBFloat16,  // bfloat16; reduced with fp32 accumulation
  kInt32,     // sums wrap around (two's complement), as in NCCL
  kInt64,
  kUInt8,  // also how untyped bytes travel (broadcast, allgather, send/recv of any type)
  kInt8,
};

enum class ReduceOp : uint8_t {
  kSum,
  kAvg,  // sum divided by the world size (integer division for integer types)
  kMax,
  kMin,
  kProduct,  // integer products wrap around
  // Bitwise and, or and exclusive or: integer types only (bool travels as uint8).
  kBand,
  kBor,
  kBxor,
};

std::size_t ElementSize(DataType type);  // 0 for a value out of range (from the network)
// "fp32", "fp64", "fp16", "bf16", "int32", "int64", "uint8", "int8"
std::string_view DataTypeName(DataType type);
// "sum", "avg", "max", "min", "product", "band", "bor", "bxor"
std::string_view ReduceOpName(ReduceOp op);
// Whether `op` is one of HFReduce's (values from the network may not be), and whether it is
// defined on `type` (the bitwise ops only on integer types).
bool IsBitwise(ReduceOp op);
bool IsIntegral(DataType type);
bool ReduceOpDefinedOn(ReduceOp op, DataType type);
// Parse the names above; false when unknown.
bool ParseDataType(std::string_view name, DataType* type);
bool ParseReduceOp(std::string_view name, ReduceOp* op);

}  // namespace ff::hfreduce

#include "hfreduce/types.h"

#include <array>

namespace ff::hfreduce {
namespace {
constexpr std::array<std::string_view, 8> kTypeNames = {"fp32",  "fp64",  "fp16",  "bf16",
                                                        "int32", "int64", "uint8", "int8"};
constexpr std::array<std::size_t, 8> kTypeSizes = {4, 8, 2, 2, 4, 8, 1, 1};
constexpr std::array<std::string_view, 8> kOpNames = {"sum",     "avg",  "max", "min",
                                                      "product", "band", "bor", "bxor"};
}  // namespace

// Values from the network (a peer's frame) may be out of range: they get a name that says so
// (and size 0) instead of reading past the tables.
std::size_t ElementSize(DataType type) {
  const auto i = static_cast<std::size_t>(type);
  return i < kTypeSizes.size() ? kTypeSizes[i] : 0;
}
std::string_view DataTypeName(DataType type) {
  const auto i = static_cast<std::size_t>(type);
  return i < kTypeNames.size() ? kTypeNames[i] : "an unknown type";
}
std::string_view ReduceOpName(ReduceOp op) {
  const auto i = static_cast<std::size_t>(op);
  return i < kOpNames.size() ? kOpNames[i] : "an unknown op";
}

bool IsBitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

bool IsIntegral(DataType type) {
  return type == DataType::kInt32 || type == DataType::kInt64 || type == DataType::kUInt8 ||
         type == DataType::kInt8;
}

bool ReduceOpDefinedOn(ReduceOp op, DataType type) {
  if (static_cast<std::size_t>(op) >= kOpNames.size() || ElementSize(type) == 0) return false;
  return !IsBitwise(op) || IsIntegral(type);
}

bool ParseDataType(std::string_view name, DataType* type) {
  for (std::size_t i = 0; i < kTypeNames.size(); ++i) {
    if (kTypeNames[i] == name) {
      *type = static_cast<DataType>(i);
      return true;
    }
  }
  return false;
}

bool ParseReduceOp(std::string_view name, ReduceOp* op) {
  for (std::size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) {
      *op = static_cast<ReduceOp>(i);
      return true;
    }
  }
  return false;
}

}  // namespace ff::hfreduce

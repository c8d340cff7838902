// The vector loop shared by the SIMD kernels, written against a traits type V per element type:
//   V::kLanes, V::Vec, V::Load(p, i), V::Store(p, i, v), V::Add/Max/Min(a, b).
// Included only by kernels_<isa>.cc, each compiled for its ISA; everything here has internal
// linkage so no ISA-specific code escapes into other translation units.
#pragma once

#include <cstddef>

#include "reduce/kernels.h"

namespace ff::hfreduce {
namespace {

constexpr int kMaxTailInputs = 256;

template <typename V, ReduceOp kOp>
inline typename V::Vec Combine(typename V::Vec a, typename V::Vec b) {
  if constexpr (kOp == ReduceOp::kSum) {
    return V::Add(a, b);
  } else if constexpr (kOp == ReduceOp::kMax) {
    return V::Max(a, b);
  } else {
    return V::Min(a, b);
  }
}

template <typename V, ReduceOp kOp>
void VectorLoop(DataType type, const void* const* in, int k, void* out, std::size_t n) {
  std::size_t i = 0;
  // Two vectors per step: independent dependency chains keep the loads in flight.
  for (; i + 2 * V::kLanes <= n; i += 2 * V::kLanes) {
    typename V::Vec a0 = V::Load(in[0], i);
    typename V::Vec a1 = V::Load(in[0], i + V::kLanes);
    for (int j = 1; j < k; ++j) {
      a0 = Combine<V, kOp>(a0, V::Load(in[j], i));
      a1 = Combine<V, kOp>(a1, V::Load(in[j], i + V::kLanes));
    }
    V::Store(out, i, a0);
    V::Store(out, i + V::kLanes, a1);
  }
  for (; i + V::kLanes <= n; i += V::kLanes) {
    typename V::Vec a = V::Load(in[0], i);
    for (int j = 1; j < k; ++j)
      a = Combine<V, kOp>(a, V::Load(in[j], i));
    V::Store(out, i, a);
  }
  if (i == n) return;
  // The tail (fewer than kLanes elements) takes the scalar path: same order, same result.
  const std::size_t size = ElementSize(type);
  const char* shifted[kMaxTailInputs];
  for (int j = 0; j < k; ++j)
    shifted[j] = static_cast<const char*>(in[j]) + i * size;
  ReduceScalar(type, kOp, reinterpret_cast<const void* const*>(shifted), k,
               static_cast<char*>(out) + i * size, n - i);
}

template <typename V>
void VectorReduce(DataType type, ReduceOp op, const void* const* in, int k, void* out,
                  std::size_t n) {
  switch (op) {
    case ReduceOp::kMax:
      return VectorLoop<V, ReduceOp::kMax>(type, in, k, out, n);
    case ReduceOp::kMin:
      return VectorLoop<V, ReduceOp::kMin>(type, in, k, out, n);
    case ReduceOp::kProduct:
      return ReduceScalar(type, op, in, k, out, n);
    default:
      return VectorLoop<V, ReduceOp::kSum>(type, in, k, out, n);
  }
}

}  // namespace
}  // namespace ff::hfreduce

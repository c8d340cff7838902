// Reduction kernels: the CPU side of HFReduce (summing the node's local ranks' chunks, and
// combining partial sums from tree children).
//
// All kernels compute, for every element i < n,
//   out[i] = combine(... combine(combine(in[0][i], in[1][i]), in[2][i]) ..., in[k-1][i])
// in that order, so the SIMD paths are bit-exact with the scalar path. fp16/bf16 inputs are
// widened to fp32, combined in fp32, and rounded once (round to nearest even) on store. max/min
// follow the x86 MAXPS/MINPS rule: max(a, b) = a > b ? a : b (so a NaN in b propagates, in a
// does not). `out` may alias in[0] (accumulate in place); other overlaps are not allowed.
#pragma once

#include <cstddef>
#include <string_view>

#include "hfreduce/types.h"

namespace ff::hfreduce {

enum class Isa { kScalar, kAvx2, kAvx512 };

std::string_view IsaName(Isa isa);
// The best ISA this CPU supports, unless $HFREDUCE_SIMD (scalar, avx2, avx512) asks for a lower
// one. Computed once.
Isa DefaultIsa();
bool IsaSupported(Isa isa);

// `op` must be kSum, kMax, kMin, kProduct or, on integer types, a bitwise op (kAvg is a sum
// followed by DivideInPlace). 8-bit types and products take the scalar path on every ISA; the
// bitwise ops work on the bytes, whatever the integer type.
// k >= 1; n may be 0.
void Reduce(Isa isa, DataType type, ReduceOp op, const void* const* in, int k, void* out,
            std::size_t n);
inline void Reduce(DataType type, ReduceOp op, const void* const* in, int k, void* out,
                   std::size_t n) {
  Reduce(DefaultIsa(), type, op, in, k, out, n);
}

// out = in[0] op in[1] op ... op in[k-1], byte for byte over `bytes` bytes, for op kBand, kBor or
// kBxor (allgather merges ranks' zero-padded pieces with kBor: exact for any type). `out` may
// alias in[0].
void Bitwise(ReduceOp op, const void* const* in, int k, void* out, std::size_t bytes);
inline void BitwiseOr(const void* const* in, int k, void* out, std::size_t bytes) {
  Bitwise(ReduceOp::kBor, in, k, out, bytes);
}

// buf[i] = buf[i] / divisor (integer division for integer types). Scalar: only applied once per
// element at the end of an average, never on the hot path of a sum.
void DivideInPlace(DataType type, void* buf, std::size_t n, int divisor);

// Per-ISA entry points (kernels_<isa>.cc); same contract as Reduce.
void ReduceScalar(DataType type, ReduceOp op, const void* const* in, int k, void* out,
                  std::size_t n);
void ReduceAvx2(DataType type, ReduceOp op, const void* const* in, int k, void* out, std::size_t n);
void ReduceAvx512(DataType type, ReduceOp op, const void* const* in, int k, void* out,
                  std::size_t n);

// Conversions used by the scalar path and the tests (round to nearest even, NaN stays NaN).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace ff::hfreduce

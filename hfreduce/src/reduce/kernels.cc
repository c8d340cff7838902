#include "reduce/kernels.h"

#include <cpuid.h>

#include <cstdlib>
#include <string>

namespace ff::hfreduce {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): Clang's __builtin_cpu_supports does not know "f16c".
bool HaveF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

Isa DetectIsa() {
  __builtin_cpu_init();
  Isa best = Isa::kScalar;
  if (__builtin_cpu_supports("avx2") && HaveF16c()) best = Isa::kAvx2;
  if (best == Isa::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw")) {
    best = Isa::kAvx512;
  }
  return best;
}

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

bool IsaSupported(Isa isa) {
  static const Isa best = DetectIsa();
  return static_cast<int>(isa) <= static_cast<int>(best);
}

Isa DefaultIsa() {
  static const Isa chosen = [] {
    Isa best = DetectIsa();
    const char* want = std::getenv("HFREDUCE_SIMD");
    if (want == nullptr) return best;
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (IsaName(isa) == want && IsaSupported(isa)) return isa;
    }
    return best;  // unknown or unsupported request: the best available
  }();
  return chosen;
}

void Reduce(Isa isa, DataType type, ReduceOp op, const void* const* in, int k, void* out,
            std::size_t n) {
  if (n == 0) return;
  if (IsBitwise(op)) return Bitwise(op, in, k, out, n * ElementSize(type));
  // Products are rare (torch's PRODUCT): the scalar path serves them for every type.
  if (op == ReduceOp::kProduct) isa = Isa::kScalar;
  switch (isa) {
    case Isa::kAvx512:
      return ReduceAvx512(type, op, in, k, out, n);
    case Isa::kAvx2:
      return ReduceAvx2(type, op, in, k, out, n);
    default:
      return ReduceScalar(type, op, in, k, out, n);
  }
}

}  // namespace ff::hfreduce

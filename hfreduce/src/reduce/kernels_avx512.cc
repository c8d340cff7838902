// AVX-512 kernels (compiled with -mavx512f -mavx512bw -mf16c; called only where the CPU has them).
#include <immintrin.h>

#include "reduce/simd_loop.h"

namespace ff::hfreduce {
namespace {

struct F32 {
  static constexpr std::size_t kLanes = 16;
  using Vec = __m512;
  static Vec Load(const void* p, std::size_t i) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm512_storeu_ps(static_cast<float*>(p) + i, v);
  }
  static Vec Add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm512_min_ps(a, b); }
};

struct F64 {
  static constexpr std::size_t kLanes = 8;
  using Vec = __m512d;
  static Vec Load(const void* p, std::size_t i) {
    return _mm512_loadu_pd(static_cast<const double*>(p) + i);
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm512_storeu_pd(static_cast<double*>(p) + i, v);
  }
  static Vec Add(Vec a, Vec b) { return _mm512_add_pd(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_pd(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm512_min_pd(a, b); }
};

struct I32 {
  static constexpr std::size_t kLanes = 16;
  using Vec = __m512i;
  static Vec Load(const void* p, std::size_t i) {
    return _mm512_loadu_si512(static_cast<const int32_t*>(p) + i);
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm512_storeu_si512(static_cast<int32_t*>(p) + i, v);
  }
  static Vec Add(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_epi32(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm512_min_epi32(a, b); }
};

struct I64 {
  static constexpr std::size_t kLanes = 8;
  using Vec = __m512i;
  static Vec Load(const void* p, std::size_t i) {
    return _mm512_loadu_si512(static_cast<const int64_t*>(p) + i);
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm512_storeu_si512(static_cast<int64_t*>(p) + i, v);
  }
  static Vec Add(Vec a, Vec b) { return _mm512_add_epi64(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm512_max_epi64(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm512_min_epi64(a, b); }
};

// fp16 and bf16 accumulate in fp32 lanes.
struct F16 : F32 {
  static Vec Load(const void* p, std::size_t i) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct BF16 : F32 {
  static Vec Load(const void* p, std::size_t i) {
    __m256i raw =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  static void Store(void* p, std::size_t i, Vec v) {
    // Round to nearest even: x + 0x7fff + ((x >> 16) & 1), then keep the top half; NaN: quiet.
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    __m512i result = _mm512_mask_blend_epi32(nan, rounded, quiet_nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i),
                        _mm512_cvtepi32_epi16(result));
  }
};

}  // namespace

void ReduceAvx512(DataType type, ReduceOp op, const void* const* in, int k, void* out,
                  std::size_t n) {
  switch (type) {
    case DataType::kFloat32:
      return VectorReduce<F32>(type, op, in, k, out, n);
    case DataType::kFloat64:
      return VectorReduce<F64>(type, op, in, k, out, n);
    case DataType::kFloat16:
      return VectorReduce<F16>(type, op, in, k, out, n);
    case DataType::kBFloat16:
      return VectorReduce<BF16>(type, op, in, k, out, n);
    case DataType::kInt32:
      return VectorReduce<I32>(type, op, in, k, out, n);
    case DataType::kInt64:
      return VectorReduce<I64>(type, op, in, k, out, n);
    case DataType::kUInt8:
    case DataType::kInt8:
      return ReduceScalar(type, op, in, k, out, n);
  }
}

}  // namespace ff::hfreduce

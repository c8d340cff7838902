// AVX2 kernels (compiled with -mavx2 -mf16c; called only where the CPU has them).
#include <immintrin.h>

#include "reduce/simd_loop.h"

namespace ff::hfreduce {
namespace {

struct F32 {
  static constexpr std::size_t kLanes = 8;
  using Vec = __m256;
  static Vec Load(const void* p, std::size_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm256_storeu_ps(static_cast<float*>(p) + i, v);
  }
  static Vec Add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm256_min_ps(a, b); }
};

struct F64 {
  static constexpr std::size_t kLanes = 4;
  using Vec = __m256d;
  static Vec Load(const void* p, std::size_t i) {
    return _mm256_loadu_pd(static_cast<const double*>(p) + i);
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm256_storeu_pd(static_cast<double*>(p) + i, v);
  }
  static Vec Add(Vec a, Vec b) { return _mm256_add_pd(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm256_max_pd(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm256_min_pd(a, b); }
};

struct I32 {
  static constexpr std::size_t kLanes = 8;
  using Vec = __m256i;
  static Vec Load(const void* p, std::size_t i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const int32_t*>(p) + i));
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<int32_t*>(p) + i), v);
  }
  static Vec Add(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
  static Vec Max(Vec a, Vec b) { return _mm256_max_epi32(a, b); }
  static Vec Min(Vec a, Vec b) { return _mm256_min_epi32(a, b); }
};

struct I64 {
  static constexpr std::size_t kLanes = 4;
  using Vec = __m256i;
  static Vec Load(const void* p, std::size_t i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const int64_t*>(p) + i));
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<int64_t*>(p) + i), v);
  }
  static Vec Add(Vec a, Vec b) { return _mm256_add_epi64(a, b); }
  // No 64-bit max/min in AVX2: compare and blend (a > b ? a : b).
  static Vec Max(Vec a, Vec b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
  static Vec Min(Vec a, Vec b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(b, a)); }
};

struct F16 : F32 {
  static Vec Load(const void* p, std::size_t i) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  }
  static void Store(void* p, std::size_t i, Vec v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct BF16 : F32 {
  static Vec Load(const void* p, std::size_t i) {
    __m128i raw =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  static void Store(void* p, std::size_t i, Vec v) {
    __m256i x = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, nan);
    __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), packed);
  }
};

}  // namespace

void ReduceAvx2(DataType type, ReduceOp op, const void* const* in, int k, void* out,
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

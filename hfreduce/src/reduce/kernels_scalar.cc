// The scalar reduction path: the reference the SIMD paths must match bit for bit.
#include <cstring>
#include <type_traits>

#include "reduce/kernels.h"

namespace ff::hfreduce {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Element access: load widens to the accumulation type, store narrows (rounding once).
template <typename T>
struct Native {
  using Acc = T;
  static Acc Load(const void* p, std::size_t i) { return static_cast<const T*>(p)[i]; }
  static void Store(void* p, std::size_t i, Acc v) { static_cast<T*>(p)[i] = v; }
};
struct Half {
  using Acc = float;
  static Acc Load(const void* p, std::size_t i) {
    return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void Store(void* p, std::size_t i, Acc v) {
    static_cast<uint16_t*>(p)[i] = FloatToHalf(v);
  }
};
struct BFloat {
  using Acc = float;
  static Acc Load(const void* p, std::size_t i) {
    return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void Store(void* p, std::size_t i, Acc v) {
    static_cast<uint16_t*>(p)[i] = FloatToBFloat16(v);
  }
};

template <typename Acc>
Acc Add(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;  // wrap-around without undefined behaviour
    return static_cast<Acc>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename Acc>
Acc Multiply(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    // Wrap-around without undefined behaviour (unsigned int, not a narrower type that promotes
    // to signed int and may overflow).
    using U = std::make_unsigned_t<std::common_type_t<Acc, unsigned>>;
    return static_cast<Acc>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename E, ReduceOp kOp>
void ReduceLoop(const void* const* in, int k, void* out, std::size_t n) {
  using Acc = typename E::Acc;
  for (std::size_t i = 0; i < n; ++i) {
    Acc acc = E::Load(in[0], i);
    for (int j = 1; j < k; ++j) {
      Acc v = E::Load(in[j], i);
      if constexpr (kOp == ReduceOp::kSum) {
        acc = Add(acc, v);
      } else if constexpr (kOp == ReduceOp::kProduct) {
        acc = Multiply(acc, v);
      } else if constexpr (kOp == ReduceOp::kMax) {
        acc = acc > v ? acc : v;
      } else {
        acc = acc < v ? acc : v;
      }
    }
    E::Store(out, i, acc);
  }
}

template <typename E>
void ReduceType(ReduceOp op, const void* const* in, int k, void* out, std::size_t n) {
  switch (op) {
    case ReduceOp::kMax:
      return ReduceLoop<E, ReduceOp::kMax>(in, k, out, n);
    case ReduceOp::kMin:
      return ReduceLoop<E, ReduceOp::kMin>(in, k, out, n);
    case ReduceOp::kProduct:
      return ReduceLoop<E, ReduceOp::kProduct>(in, k, out, n);
    default:
      return ReduceLoop<E, ReduceOp::kSum>(in, k, out, n);
  }
}

template <typename E>
void DivideType(void* buf, std::size_t n, int divisor) {
  using Acc = typename E::Acc;
  for (std::size_t i = 0; i < n; ++i) {
    E::Store(buf, i, static_cast<Acc>(E::Load(buf, i) / static_cast<Acc>(divisor)));
  }
}

}  // namespace

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return FromBits(Bits(v) | sign);
  }
  if (exp == 31) {
    // Infinity, or NaN made quiet (as VCVTPH2PS does).
    return FromBits(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
  }
  return FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  uint32_t x = Bits(f);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // infinity or NaN (made quiet, top payload bits kept)
    if (abs == 0x7f800000) return sign | 0x7c00;
    return static_cast<uint16_t>(sign | 0x7e00 | ((abs >> 13) & 0x3ff));
  }
  int e = static_cast<int>(abs >> 23) - 127;
  if (e > 15) return sign | 0x7c00;
  if (e >= -14) {
    uint32_t mant = abs & 0x7fffff;
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into infinity: correct
    return static_cast<uint16_t>(sign | h);
  }
  if (e < -25) return sign;  // below half the smallest subnormal: rounds to zero
  uint32_t mant = (abs & 0x7fffff) | 0x800000;
  int shift = -e - 1;  // value = mant * 2^(e-23); subnormal units are 2^-24
  uint32_t h = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float BFloat16ToFloat(uint16_t b) {
  return FromBits(static_cast<uint32_t>(b) << 16);
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x = Bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

void ReduceScalar(DataType type, ReduceOp op, const void* const* in, int k, void* out,
                  std::size_t n) {
  switch (type) {
    case DataType::kFloat32:
      return ReduceType<Native<float>>(op, in, k, out, n);
    case DataType::kFloat64:
      return ReduceType<Native<double>>(op, in, k, out, n);
    case DataType::kFloat16:
      return ReduceType<Half>(op, in, k, out, n);
    case DataType::kBFloat16:
      return ReduceType<BFloat>(op, in, k, out, n);
    case DataType::kInt32:
      return ReduceType<Native<int32_t>>(op, in, k, out, n);
    case DataType::kInt64:
      return ReduceType<Native<int64_t>>(op, in, k, out, n);
    case DataType::kUInt8:
      return ReduceType<Native<uint8_t>>(op, in, k, out, n);
    case DataType::kInt8:
      return ReduceType<Native<int8_t>>(op, in, k, out, n);
  }
}

namespace {

template <typename W>
W Combine(ReduceOp op, W a, W b) {
  switch (op) {
    case ReduceOp::kBand:
      return static_cast<W>(a & b);
    case ReduceOp::kBxor:
      return static_cast<W>(a ^ b);
    default:
      return static_cast<W>(a | b);
  }
}

template <ReduceOp kOp>
void BitwiseLoop(const void* const* in, int k, void* out, std::size_t bytes) {
  // Eight bytes at a time (the compiler widens this further), then the tail.
  const std::size_t words = bytes / 8;
  auto* o = static_cast<uint64_t*>(out);
  for (std::size_t w = 0; w < words; ++w) {
    uint64_t acc;
    std::memcpy(&acc, static_cast<const char*>(in[0]) + w * 8, 8);
    for (int j = 1; j < k; ++j) {
      uint64_t v;
      std::memcpy(&v, static_cast<const char*>(in[j]) + w * 8, 8);
      acc = Combine(kOp, acc, v);
    }
    std::memcpy(o + w, &acc, 8);
  }
  for (std::size_t b = words * 8; b < bytes; ++b) {
    unsigned char acc = static_cast<const unsigned char*>(in[0])[b];
    for (int j = 1; j < k; ++j)
      acc = Combine(kOp, acc, static_cast<const unsigned char*>(in[j])[b]);
    static_cast<unsigned char*>(out)[b] = acc;
  }
}

}  // namespace

void Bitwise(ReduceOp op, const void* const* in, int k, void* out, std::size_t bytes) {
  switch (op) {
    case ReduceOp::kBand:
      return BitwiseLoop<ReduceOp::kBand>(in, k, out, bytes);
    case ReduceOp::kBxor:
      return BitwiseLoop<ReduceOp::kBxor>(in, k, out, bytes);
    default:
      return BitwiseLoop<ReduceOp::kBor>(in, k, out, bytes);
  }
}

void DivideInPlace(DataType type, void* buf, std::size_t n, int divisor) {
  switch (type) {
    case DataType::kFloat32:
      return DivideType<Native<float>>(buf, n, divisor);
    case DataType::kFloat64:
      return DivideType<Native<double>>(buf, n, divisor);
    case DataType::kFloat16:
      return DivideType<Half>(buf, n, divisor);
    case DataType::kBFloat16:
      return DivideType<BFloat>(buf, n, divisor);
    case DataType::kInt32:
      return DivideType<Native<int32_t>>(buf, n, divisor);
    case DataType::kInt64:
      return DivideType<Native<int64_t>>(buf, n, divisor);
    case DataType::kUInt8:
      return DivideType<Native<uint8_t>>(buf, n, divisor);
    case DataType::kInt8:
      return DivideType<Native<int8_t>>(buf, n, divisor);
  }
}

}  // namespace ff::hfreduce

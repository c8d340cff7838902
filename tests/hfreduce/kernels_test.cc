// The SIMD reduction kernels against the scalar path (bit-exact) and against a float64 reference.
#include "reduce/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ff::hfreduce {
namespace {

constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                               DataType::kUInt8,    DataType::kInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};

// Random values of `type` in [-100, 100), written as raw bytes.
std::vector<char> RandomBuffer(DataType type, std::size_t n, std::mt19937_64& rng) {
  std::vector<char> buf(n * ElementSize(type));
  std::uniform_real_distribution<double> real(-100, 100);
  std::uniform_int_distribution<int64_t> integer(std::numeric_limits<int64_t>::min(),
                                                 std::numeric_limits<int64_t>::max());
  for (std::size_t i = 0; i < n; ++i) {
    double v = real(rng);
    switch (type) {
      case DataType::kFloat32:
        reinterpret_cast<float*>(buf.data())[i] = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        reinterpret_cast<double*>(buf.data())[i] = v;
        break;
      case DataType::kFloat16:
        reinterpret_cast<uint16_t*>(buf.data())[i] = FloatToHalf(static_cast<float>(v));
        break;
      case DataType::kBFloat16:
        reinterpret_cast<uint16_t*>(buf.data())[i] = FloatToBFloat16(static_cast<float>(v));
        break;
      case DataType::kInt32:  // full range, so sums wrap around
        reinterpret_cast<int32_t*>(buf.data())[i] = static_cast<int32_t>(integer(rng));
        break;
      case DataType::kInt64:
        reinterpret_cast<int64_t*>(buf.data())[i] = integer(rng);
        break;
      case DataType::kUInt8:
        reinterpret_cast<uint8_t*>(buf.data())[i] = static_cast<uint8_t>(integer(rng));
        break;
      case DataType::kInt8:
        reinterpret_cast<int8_t*>(buf.data())[i] = static_cast<int8_t>(integer(rng));
        break;
    }
  }
  return buf;
}

double ValueAt(DataType type, const char* buf, std::size_t i) {
  switch (type) {
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(buf)[i];
    case DataType::kFloat64:
      return reinterpret_cast<const double*>(buf)[i];
    case DataType::kFloat16:
      return HalfToFloat(reinterpret_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(reinterpret_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32:
      return reinterpret_cast<const int32_t*>(buf)[i];
    case DataType::kInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(buf)[i]);
    case DataType::kUInt8:
      return reinterpret_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8:
      return reinterpret_cast<const int8_t*>(buf)[i];
  }
  return 0;
}

std::vector<Isa> SimdIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

TEST(KernelsTest, SimdIsBitExactWithScalarForEveryTypeOpAndLength) {
  std::mt19937_64 rng(42);
  std::vector<Isa> isas = SimdIsas();
  if (isas.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  for (DataType type : kTypes) {
    for (ReduceOp op : kOps) {
      for (int k : {1, 2, 3, 4, 8}) {
        for (std::size_t n : {0, 1, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 4099}) {
          std::vector<std::vector<char>> inputs;
          std::vector<const void*> ptrs;
          for (int j = 0; j < k; ++j)
            inputs.push_back(RandomBuffer(type, n, rng));
          for (auto& b : inputs)
            ptrs.push_back(b.data());
          std::vector<char> expected(n * ElementSize(type) + 1, 'x');
          ReduceScalar(type, op, ptrs.data(), k, expected.data(), n);
          for (Isa isa : isas) {
            std::vector<char> got(expected.size(), 'x');
            Reduce(isa, type, op, ptrs.data(), k, got.data(), n);
            ASSERT_EQ(std::memcmp(got.data(), expected.data(), got.size()), 0)
                << IsaName(isa) << " " << DataTypeName(type) << " " << ReduceOpName(op)
                << " k=" << k << " n=" << n;  // includes the guard byte past the end
          }
        }
      }
    }
  }
}

TEST(KernelsTest, InPlaceAccumulationMatchesOutOfPlace) {
  std::mt19937_64 rng(7);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    for (DataType type : kTypes) {
      const std::size_t n = 1029;
      auto a = RandomBuffer(type, n, rng);
      auto b = RandomBuffer(type, n, rng);
      std::vector<char> out(a.size());
      const void* in[] = {a.data(), b.data()};
      Reduce(isa, type, ReduceOp::kSum, in, 2, out.data(), n);
      Reduce(isa, type, ReduceOp::kSum, in, 2, a.data(), n);  // out aliases in[0]
      EXPECT_EQ(a, out) << IsaName(isa) << " " << DataTypeName(type);
    }
  }
}

TEST(KernelsTest, SpecialFloatValuesMatchScalar) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {
      1.0f,  -0.0f,  0.0f,    inf,      -inf,     nan,     1.0f,     nan,
      3e38f, 1e-40f, -1e-45f, 65504.0f, 65520.0f, 6.0e-8f, 2.98e-8f, 1.0f + 1.0f / 4096};
  std::vector<float> b = {nan,   0.0f,   -0.0f,  -inf,  5.0f, nan,  -1.0f, 2.0f,
                          3e38f, 1e-40f, 1e-45f, 16.0f, 0.0f, 0.0f, 0.0f,  0.0f};
  a.resize(64, 0.5f);
  b.resize(64, 0.25f);
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<char> ba(a.size() * 4), bb(b.size() * 4);
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (type == DataType::kFloat32) {
        reinterpret_cast<float*>(ba.data())[i] = a[i];
        reinterpret_cast<float*>(bb.data())[i] = b[i];
      } else {
        auto conv = type == DataType::kFloat16 ? FloatToHalf : FloatToBFloat16;
        reinterpret_cast<uint16_t*>(ba.data())[i] = conv(a[i]);
        reinterpret_cast<uint16_t*>(bb.data())[i] = conv(b[i]);
      }
    }
    const void* in[] = {ba.data(), bb.data()};
    for (ReduceOp op : kOps) {
      std::vector<char> expected(ba.size());
      ReduceScalar(type, op, in, 2, expected.data(), a.size());
      for (Isa isa : SimdIsas()) {
        std::vector<char> got(ba.size());
        Reduce(isa, type, op, in, 2, got.data(), a.size());
        EXPECT_EQ(got, expected) << IsaName(isa) << " " << DataTypeName(type) << " "
                                 << ReduceOpName(op);
      }
    }
  }
}

TEST(KernelsTest, SumsMatchAFloat64Reference) {
  std::mt19937_64 rng(11);
  const std::size_t n = 2000;
  const int k = 8;
  for (DataType type : kTypes) {
    std::vector<std::vector<char>> inputs;
    std::vector<const void*> ptrs;
    for (int j = 0; j < k; ++j)
      inputs.push_back(RandomBuffer(type, n, rng));
    for (auto& b : inputs)
      ptrs.push_back(b.data());
    std::vector<char> out(n * ElementSize(type));
    Reduce(type, ReduceOp::kSum, ptrs.data(), k, out.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      if (type == DataType::kUInt8 || type == DataType::kInt8) {
        unsigned ref = 0;  // wrap-around sum
        for (auto& b : inputs)
          ref += static_cast<unsigned char>(b[i]);
        ASSERT_EQ(static_cast<unsigned char>(out[i]), static_cast<unsigned char>(ref));
        continue;
      }
      if (type == DataType::kInt32 || type == DataType::kInt64) {
        uint64_t ref = 0;  // wrap-around sum
        for (auto& b : inputs) {
          ref += type == DataType::kInt32
                     ? static_cast<uint64_t>(
                           static_cast<int64_t>(reinterpret_cast<int32_t*>(b.data())[i]))
                     : static_cast<uint64_t>(reinterpret_cast<int64_t*>(b.data())[i]);
        }
        if (type == DataType::kInt32) {
          ASSERT_EQ(reinterpret_cast<int32_t*>(out.data())[i], static_cast<int32_t>(ref));
        } else {
          ASSERT_EQ(reinterpret_cast<int64_t*>(out.data())[i], static_cast<int64_t>(ref));
        }
        continue;
      }
      double ref = 0;
      for (auto& b : inputs)
        ref += ValueAt(type, b.data(), i);
      double tol = type == DataType::kFloat64   ? 1e-12
                   : type == DataType::kFloat32 ? 1e-4
                   : type == DataType::kFloat16 ? 0.5   // 11-bit mantissa on |sum| < 800
                                                : 4.0;  // bf16: 8-bit mantissa
      ASSERT_NEAR(ValueAt(type, out.data(), i), ref, tol) << DataTypeName(type) << " i=" << i;
    }
  }
}

TEST(KernelsTest, DivideInPlaceAverages) {
  std::vector<float> f = {8, 3, -6};
  DivideInPlace(DataType::kFloat32, f.data(), f.size(), 4);
  EXPECT_EQ(f, (std::vector<float>{2, 0.75f, -1.5f}));
  std::vector<int32_t> i = {9, -9, 3};
  DivideInPlace(DataType::kInt32, i.data(), i.size(), 2);
  EXPECT_EQ(i, (std::vector<int32_t>{4, -4, 1}));
  std::vector<uint16_t> b = {FloatToBFloat16(6), FloatToBFloat16(-1)};
  DivideInPlace(DataType::kBFloat16, b.data(), b.size(), 3);
  EXPECT_EQ(BFloat16ToFloat(b[0]), 2.0f);
  EXPECT_NEAR(BFloat16ToFloat(b[1]), -1.0 / 3, 1e-2);
}

TEST(ConversionTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(ConversionTest, HalfRoundingIsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);        // tie, even stays
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);        // tie, rounds up to even
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);                  // largest finite
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                  // rounds to infinity
  EXPECT_EQ(FloatToHalf(5.9604644775390625e-08f), 0x0001);   // smallest subnormal
  EXPECT_EQ(FloatToHalf(2.98023223876953125e-08f), 0x0000);  // half of it: tie to zero
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
}

TEST(ConversionTest, BFloat16RoundingIsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins.
  EXPECT_EQ(FloatToBFloat16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(
      std::isnan(BFloat16ToFloat(FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(FloatToBFloat16(f), b);
    }
  }
}

TEST(TypesTest, NamesRoundTrip) {
  for (DataType type : kTypes) {
    DataType back;
    ASSERT_TRUE(ParseDataType(DataTypeName(type), &back));
    EXPECT_EQ(back, type);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                      ReduceOp::kProduct, ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
    ReduceOp back;
    ASSERT_TRUE(ParseReduceOp(ReduceOpName(op), &back));
    EXPECT_EQ(back, op);
  }
  // Values from the network past the last op are named as such and defined on nothing.
  EXPECT_EQ(ReduceOpName(static_cast<ReduceOp>(8)), "an unknown op");
  EXPECT_FALSE(ReduceOpDefinedOn(static_cast<ReduceOp>(8), DataType::kInt32));
  EXPECT_FALSE(ReduceOpDefinedOn(ReduceOp::kBand, DataType::kFloat32));
  EXPECT_FALSE(ReduceOpDefinedOn(ReduceOp::kSum, static_cast<DataType>(8)));
  EXPECT_TRUE(ReduceOpDefinedOn(ReduceOp::kBxor, DataType::kInt8));
  EXPECT_TRUE(ReduceOpDefinedOn(ReduceOp::kProduct, DataType::kBFloat16));
  DataType t;
  EXPECT_FALSE(ParseDataType("fp8", &t));
  EXPECT_EQ(ElementSize(DataType::kBFloat16), 2u);
}

TEST(KernelsTest, ProductsAndEightBitTypesWrapLikeTheirCTypes) {
  // Products of three inputs, and 8-bit sums that overflow, on every ISA.
  const int8_t a8[4] = {100, -128, 7, -3};
  const int8_t b8[4] = {100, -1, 9, 5};
  const int8_t c8[4] = {1, 1, 2, -1};
  const void* in8[3] = {a8, b8, c8};
  const uint8_t ua[3] = {200, 255, 3};
  const uint8_t ub[3] = {100, 1, 4};
  const void* inu[2] = {ua, ub};
  const float fa[3] = {1.5f, -2.0f, 0.0f};
  const float fb[3] = {2.0f, 3.0f, 5.0f};
  const float fc[3] = {-1.0f, 0.5f, 7.0f};
  const void* inf[3] = {fa, fb, fc};
  const int64_t la[2] = {int64_t{1} << 40, -3};
  const int64_t lb[2] = {int64_t{1} << 30, 3};
  const void* inl[2] = {la, lb};
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!IsaSupported(isa)) continue;
    int8_t sum8[4], prod8[4], max8[4];
    Reduce(isa, DataType::kInt8, ReduceOp::kSum, in8, 3, sum8, 4);
    Reduce(isa, DataType::kInt8, ReduceOp::kProduct, in8, 3, prod8, 4);
    Reduce(isa, DataType::kInt8, ReduceOp::kMax, in8, 3, max8, 4);
    EXPECT_EQ(sum8[0], static_cast<int8_t>(201)) << IsaName(isa);  // wraps to -55
    EXPECT_EQ(sum8[1], static_cast<int8_t>(-128));                 // -128 - 1 + 1
    EXPECT_EQ(prod8[0], static_cast<int8_t>(10000));               // wraps to 16
    EXPECT_EQ(prod8[2], 126);
    EXPECT_EQ(prod8[3], 15);
    EXPECT_EQ(max8[1], 1);
    uint8_t sumu[3], minu[3];
    Reduce(isa, DataType::kUInt8, ReduceOp::kSum, inu, 2, sumu, 3);
    Reduce(isa, DataType::kUInt8, ReduceOp::kMin, inu, 2, minu, 3);
    EXPECT_EQ(sumu[0], 44);  // 300 mod 256
    EXPECT_EQ(sumu[1], 0);
    EXPECT_EQ(sumu[2], 7);
    EXPECT_EQ(minu[0], 100);
    float prodf[3];
    Reduce(isa, DataType::kFloat32, ReduceOp::kProduct, inf, 3, prodf, 3);
    EXPECT_EQ(prodf[0], -3.0f);
    EXPECT_EQ(prodf[1], -3.0f);
    EXPECT_EQ(prodf[2], 0.0f);
    int64_t prodl[2];
    Reduce(isa, DataType::kInt64, ReduceOp::kProduct, inl, 2, prodl, 2);
    EXPECT_EQ(prodl[0], 0);  // 2^70 wraps to 0
    EXPECT_EQ(prodl[1], -9);
  }
}

TEST(KernelsTest, BitwiseOpsCombineEveryIntegerTypeBitForBit) {
  // Three ranks' int32 values with an odd length (the byte tail), and int64, int8 and uint8.
  std::mt19937_64 rng(7);
  for (DataType type : {DataType::kInt32, DataType::kInt64, DataType::kInt8, DataType::kUInt8}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{37}, std::size_t{1000}}) {
      const std::size_t bytes = n * ElementSize(type);
      std::vector<std::vector<unsigned char>> ins(3, std::vector<unsigned char>(bytes));
      for (auto& in : ins) {
        for (auto& b : in)
          b = static_cast<unsigned char>(rng());
      }
      const void* ptrs[3] = {ins[0].data(), ins[1].data(), ins[2].data()};
      for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (!IsaSupported(isa)) continue;
          std::vector<unsigned char> out(bytes);
          Reduce(isa, type, op, ptrs, 3, out.data(), n);
          for (std::size_t b = 0; b < bytes; ++b) {
            const unsigned char x = ins[0][b], y = ins[1][b], z = ins[2][b];
            const unsigned char want = op == ReduceOp::kBand  ? (x & y & z)
                                       : op == ReduceOp::kBor ? (x | y | z)
                                                              : (x ^ y ^ z);
            ASSERT_EQ(out[b], want) << ReduceOpName(op) << " " << DataTypeName(type) << " n=" << n
                                    << " byte " << b << " " << IsaName(isa);
          }
        }
      }
      // In place, as the engine accumulates: out aliases the first input.
      std::vector<unsigned char> acc = ins[0];
      const void* inplace[3] = {acc.data(), ins[1].data(), ins[2].data()};
      Reduce(type, ReduceOp::kBxor, inplace, 3, acc.data(), n);
      for (std::size_t b = 0; b < bytes; ++b)
        ASSERT_EQ(acc[b], ins[0][b] ^ ins[1][b] ^ ins[2][b]);
    }
  }
}

}  // namespace
}  // namespace ff::hfreduce

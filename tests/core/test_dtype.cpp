// DType: promote_types against torch.promote_types, names and sizes, and the 16-bit float
// conversions (round to nearest even, overflow to inf, NaN, subnormals) against PyTorch's bits.
#include <gtest/gtest.h>
#include <cmath>
#include <cstring>
#include "support/golden.h"

namespace dp {
namespace {

using test::golden_case;
using test::json;

const DType kAll[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

float f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t bits32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DType, PromoteTypesMatchesTorch) {
  const json& table = golden_case("shape.json", "promote_types").at("output");
  ASSERT_EQ(table.at("shape"), json::array({8, 8}));
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      const int64_t expected = table.at("data")[a * 8 + b].get<int64_t>();
      EXPECT_EQ(static_cast<int>(promote_types(kAll[a], kAll[b])), expected) << dtype_name(kAll[a]) << " with " << dtype_name(kAll[b]);
    }
}

TEST(DType, NamesSizesCategories) {
  const char* names[] = {"bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
  for (int i = 0; i < 8; ++i) {
    EXPECT_STREQ(dtype_name(kAll[i]), names[i]);
    EXPECT_EQ(element_size(kAll[i]), sizes[i]);
    EXPECT_EQ(is_floating_point(kAll[i]), i >= 4);
    EXPECT_EQ(is_integral(kAll[i], false), i >= 1 && i <= 3);
    EXPECT_EQ(is_integral(kAll[i], true), i <= 3);
  }
  EXPECT_STREQ(legacy_type_name(kFloat32), "torch.FloatTensor");
  EXPECT_STREQ(legacy_type_name(kInt64), "torch.LongTensor");
  std::ostringstream os;
  os << kBFloat16;
  EXPECT_EQ(os.str(), "bfloat16");
  EXPECT_EQ(dtype_of<Half>, kFloat16);
  EXPECT_EQ(dtype_of<uint8_t>, kUInt8);
}

TEST(Half, FromFloatBitsMatchTorch) {
  const json& c = golden_case("shape.json", "f32_to_half_bits");
  const json& in = c.at("inputs")[0].at("data");
  const json& out = c.at("output").at("data");
  ASSERT_EQ(in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t b = static_cast<uint32_t>(in[i].get<int64_t>());
    EXPECT_EQ(Half(f32(b)).x, out[i].get<int64_t>()) << std::hex << "float bits 0x" << b;
  }
}

TEST(BFloat16, FromFloatBitsMatchTorch) {
  const json& c = golden_case("shape.json", "f32_to_bfloat16_bits");
  const json& in = c.at("inputs")[0].at("data");
  const json& out = c.at("output").at("data");
  ASSERT_EQ(in.size(), out.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint32_t b = static_cast<uint32_t>(in[i].get<int64_t>());
    if (std::isnan(f32(b))) {
      // PyTorch's own NaN bits differ between its scalar (0x7FC0) and vectorised (0xFFFF) paths;
      // any NaN is right.
      EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(f32(b)))));
      continue;
    }
    EXPECT_EQ(BFloat16(f32(b)).x, out[i].get<int64_t>()) << std::hex << "float bits 0x" << b;
  }
}

TEST(Half, ToFloatBitsMatchTorch) {
  const json& c = golden_case("shape.json", "half_bits_to_f32_bits");
  const json& in = c.at("inputs")[0].at("data");
  const json& out = c.at("output").at("data");
  for (size_t i = 0; i < in.size(); ++i) {
    const float f = Half::from_bits(static_cast<uint16_t>(in[i].get<int64_t>()));
    const uint32_t expected = static_cast<uint32_t>(out[i].get<int64_t>());
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(f32(expected)));
    else
      EXPECT_EQ(bits32(f), expected) << std::hex << "half bits 0x" << in[i].get<int64_t>();
  }
}

TEST(BFloat16, ToFloatBitsMatchTorch) {
  const json& c = golden_case("shape.json", "bfloat16_bits_to_f32_bits");
  const json& in = c.at("inputs")[0].at("data");
  const json& out = c.at("output").at("data");
  for (size_t i = 0; i < in.size(); ++i) {
    const float f = BFloat16::from_bits(static_cast<uint16_t>(in[i].get<int64_t>()));
    EXPECT_EQ(bits32(f), static_cast<uint32_t>(out[i].get<int64_t>())) << std::hex << "bfloat16 bits 0x" << in[i].get<int64_t>();
  }
}

// Every half value converts to float exactly and back to the same bits (NaNs stay NaN).
TEST(Half, AllBitPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const Half h = Half::from_bits(static_cast<uint16_t>(b));
    const float f = h;
    const uint32_t exp = (b >> 10) & 0x1f, mant = b & 0x3ff;
    const double sign = (b & 0x8000) ? -1.0 : 1.0;
    if (exp == 31) {
      if (mant)
        EXPECT_TRUE(std::isnan(f)) << b;
      else
        EXPECT_EQ(f, sign * INFINITY) << b;
      continue;
    }
    const double exact = exp == 0 ? sign * std::ldexp(mant, -24) : sign * std::ldexp(1024 + mant, static_cast<int>(exp) - 25);
    ASSERT_EQ(static_cast<double>(f), exact) << "half bits " << b;
    ASSERT_EQ(Half(f).x, b) << "half bits " << b;
  }
}

TEST(BFloat16, AllBitPatternsRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16::from_bits(static_cast<uint16_t>(b));
    ASSERT_EQ(bits32(f), b << 16);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(f))));
    else
      ASSERT_EQ(BFloat16(f).x, b) << "bfloat16 bits " << b;
  }
}

TEST(Half, RoundToNearestEvenAndOverflow) {
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).x, 0x3C00);      // tie: stays even (1.0)
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).x, 0x3C02);  // tie: rounds up to even
  EXPECT_EQ(Half(65504.0f).x, 0x7BFF);
  EXPECT_EQ(Half(65519.0f).x, 0x7BFF);
  EXPECT_EQ(Half(65520.0f).x, 0x7C00);
  EXPECT_EQ(Half(-1e9f).x, 0xFC00);
  EXPECT_EQ(Half(std::ldexp(1.0f, -24)).x, 0x0001);  // smallest subnormal
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).x, 0x0000);  // tie with 0: even
  EXPECT_EQ(Half(std::ldexp(3.0f, -26)).x, 0x0001);  // above the tie
  EXPECT_EQ(Half(-0.0f).x, 0x8000);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(NAN))));
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(1.0f, -8)).x, 0x3F80);
  EXPECT_EQ(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).x, 0x3F82);
  EXPECT_EQ(BFloat16(INFINITY).x, 0x7F80);
  EXPECT_EQ(BFloat16(f32(0x7F7FFFFF)).x, 0x7F80);  // rounds up past the largest finite value
}

TEST(DType, TensorConversionsUseTheseRoundings) {
  // The tensor copy kernel goes through the same conversions (float64 -> float32 -> 16 bits).
  Tensor t = tensor<float>({1.0f + std::ldexp(1.0f, -11), 65520.0f, std::ldexp(1.0f, -25)});
  std::vector<Half> h = t.to(kFloat16).to_vector<Half>();
  EXPECT_EQ(h[0].x, 0x3C00);
  EXPECT_EQ(h[1].x, 0x7C00);
  EXPECT_EQ(h[2].x, 0x0000);
  std::vector<BFloat16> b = tensor<float>({1.0f + 3 * std::ldexp(1.0f, -8)}).to(kBFloat16).to_vector<BFloat16>();
  EXPECT_EQ(b[0].x, 0x3F82);
}

}  // namespace
}  // namespace dp

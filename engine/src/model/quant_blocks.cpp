#include "model/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/half.h"

namespace runahead {

namespace {

// The smallest f16 >= v (v >= 0, finite): a scale rounded up never pushes a value out of range.
uint16_t f16_at_least(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;  // positive f16 values are ordered like their bits
  return h;
}

// The largest f16 <= v (v finite): a minimum rounded down never leaves a value below the range.
uint16_t f16_at_most(float v) {
  if (v <= 0) return uint16_t(f16_at_least(-v) ^ 0x8000);  // the sign bit negates
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) > v) --h;
  return h;
}

void dequantize_q8_0(const BlockQ8_0* b, int64_t blocks, float* out) {
  for (int64_t k = 0; k < blocks; ++k, out += 32) {
    const float d = f16_to_f32(b[k].d);
    for (int l = 0; l < 32; ++l) out[l] = d * float(b[k].qs[l]);
  }
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scale/min pairs and 4-bit low parts; high(block, j, l) adds
// Q5_K's fifth bit of weight l in sub-block j (0 for Q4_K).
template <class Block, class High>
void dequantize_k_nibbles(const Block* b, int64_t blocks, float* out, High high) {
  for (int64_t k = 0; k < blocks; ++k) {
    const float d = f16_to_f32(b[k].d), dmin = f16_to_f32(b[k].dmin);
    for (int j = 0; j < 8; ++j, out += 32) {
      uint8_t sc, m;
      q4_k_scale_min(j, b[k].scales, sc, m);
      const uint8_t* q = b[k].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) out[l] = d * sc * float(((q[l] >> shift) & 0xF) | high(b[k], j, l)) - dmin * m;
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* b, int64_t blocks, float* out) {
  dequantize_k_nibbles(b, blocks, out, [](const BlockQ4_K&, int, int) { return 0; });
}

// Q6_K weight i of a block, 0..63 (subtract 32 for its signed value).
int q6_k_value(const BlockQ6_K& b, int i) {
  const int n = i / 128, r = i % 128, k = r / 32, l = r % 32;
  const uint8_t ql = b.ql[64 * n + 32 * (k % 2) + l];
  const int low = k < 2 ? ql & 0xF : ql >> 4;
  return low | ((b.qh[32 * n + l] >> (2 * k)) & 3) << 4;
}

void dequantize_q6_k(const BlockQ6_K* b, int64_t blocks, float* out) {
  for (int64_t k = 0; k < blocks; ++k, out += 256) {
    const float d = f16_to_f32(b[k].d);
    for (int i = 0; i < 256; ++i) out[i] = d * b[k].scales[i / 16] * float(q6_k_value(b[k], i) - 32);
  }
}

// Q4_0/Q5_0: w = d (q - half); Q4_1/Q5_1: w = d q + m.
template <class Block>
void dequantize_32(const Block* b, int64_t blocks, float* out) {
  constexpr int kHalf = kHasFifthBit<Block> ? 16 : 8;
  for (int64_t k = 0; k < blocks; ++k, out += 32) {
    const float d = f16_to_f32(b[k].d);
    for (int l = 0; l < 32; ++l) {
      if constexpr (kHasMin<Block>)
        out[l] = d * float(q_of_32(b[k], l)) + f16_to_f32(b[k].m);
      else
        out[l] = d * float(q_of_32(b[k], l) - kHalf);
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* b, int64_t blocks, float* out) {
  dequantize_k_nibbles(b, blocks, out, [](const BlockQ5_K& x, int j, int l) { return ((x.qh[l] >> j) & 1) << 4; });
}

void quantize_q8_0(const float* x, int64_t blocks, BlockQ8_0* b) {
  for (int64_t k = 0; k < blocks; ++k, x += 32) {
    float amax = 0;
    for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(x[l]));
    b[k].d = f16_at_least(amax / 127);
    const float d = f16_to_f32(b[k].d);
    for (int l = 0; l < 32; ++l) b[k].qs[l] = int8_t(d ? std::clamp(std::lrint(x[l] / d), -127L, 127L) : 0);
  }
}

// Q4_0/Q5_0: d rounded up so that every weight is within [-half d, (half - 1) d]; q in
// [0, 2 half) with w = d (q - half).
void quantize_symmetric32(const float* x, int half, uint16_t& d_f16, uint8_t q[32]) {
  float amax = 0;
  for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(x[l]));
  d_f16 = f16_at_least(amax / float(half - 1));
  const float d = f16_to_f32(d_f16);
  for (int l = 0; l < 32; ++l) q[l] = uint8_t(d ? std::clamp(std::lrint(x[l] / d), long(-half), long(half - 1)) + half : half);
}

// Q4_1/Q5_1: m the block's minimum rounded down, d rounded up so that m + qmax d reaches its
// maximum; q in [0, qmax] with w = d q + m.
void quantize_affine32(const float* x, int qmax, uint16_t& d_f16, uint16_t& m_f16, uint8_t q[32]) {
  const auto [lo, hi] = std::minmax_element(x, x + 32);
  m_f16 = f16_at_most(*lo);
  const float m = f16_to_f32(m_f16);
  d_f16 = f16_at_least((*hi - m) / float(qmax));
  const float d = f16_to_f32(d_f16);
  for (int l = 0; l < 32; ++l) q[l] = uint8_t(d ? std::clamp(std::lrint((x[l] - m) / d), 0L, long(qmax)) : 0);
}

// Q4_0/Q5_0/Q4_1/Q5_1, packed as q_of_32 reads them.
template <class Block>
void quantize_32(const float* x, int64_t blocks, Block* b) {
  constexpr int kBits = kHasFifthBit<Block> ? 5 : 4;
  for (int64_t k = 0; k < blocks; ++k, x += 32) {
    uint8_t q[32];
    if constexpr (kHasMin<Block>)
      quantize_affine32(x, (1 << kBits) - 1, b[k].d, b[k].m, q);
    else
      quantize_symmetric32(x, 1 << (kBits - 1), b[k].d, q);
    if constexpr (kHasFifthBit<Block>) {
      uint32_t qh = 0;
      for (int l = 0; l < 32; ++l) qh |= uint32_t(q[l] >> 4) << l;
      std::memcpy(b[k].qh, &qh, 4);
    }
    for (int l = 0; l < 16; ++l) b[k].qs[l] = uint8_t((q[l] & 0xF) | (q[l + 16] & 0xF) << 4);
  }
}

// The scales of a Q4_K/Q5_K block of 256 with q in [0, qmax]: each sub-block j of 32 covers
// [-dmin m_j, -dmin m_j + qmax d sc_j], mins first (rounded up, so the range starts at or
// below the smallest value), then scales to reach the largest. Fills d, dmin, the packed
// scales and q[256].
void quantize_k_block(const float* x, int qmax, uint16_t& d_f16, uint16_t& dmin_f16, uint8_t packed[12], uint8_t q[256]) {
  float lo[8], hi[8], need[8];
  for (int j = 0; j < 8; ++j) {
    lo[j] = std::min(0.0f, *std::min_element(x + 32 * j, x + 32 * j + 32));
    hi[j] = std::max(0.0f, *std::max_element(x + 32 * j, x + 32 * j + 32));
  }
  dmin_f16 = f16_at_least(-*std::min_element(lo, lo + 8) / 63);
  const float dmin = f16_to_f32(dmin_f16);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    m[j] = uint8_t(dmin ? std::min(63.0f, std::ceil(-lo[j] / dmin)) : 0);
    need[j] = (hi[j] + dmin * m[j]) / float(qmax);
  }
  d_f16 = f16_at_least(*std::max_element(need, need + 8) / 63);
  const float d = f16_to_f32(d_f16);
  for (int j = 0; j < 8; ++j) sc[j] = uint8_t(d ? std::min(63.0f, std::ceil(need[j] / d)) : 0);
  std::memset(packed, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      packed[j] = sc[j];
      packed[j + 4] = m[j];
    } else {
      packed[j + 4] = uint8_t((sc[j] & 0xF) | (m[j] & 0xF) << 4);
      packed[j - 4] |= uint8_t((sc[j] >> 4) << 6);
      packed[j] |= uint8_t((m[j] >> 4) << 6);
    }
  }
  for (int j = 0; j < 8; ++j) {
    const float step = d * sc[j], offset = dmin * m[j];
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = uint8_t(step ? std::clamp(std::lrint((x[32 * j + l] + offset) / step), 0L, long(qmax)) : 0);
  }
}

void quantize_q4_k(const float* x, int64_t blocks, BlockQ4_K* b) {
  for (int64_t k = 0; k < blocks; ++k, x += 256) {
    uint8_t q[256];
    quantize_k_block(x, 15, b[k].d, b[k].dmin, b[k].scales, q);
    std::memset(b[k].qs, 0, 128);
    for (int i = 0; i < 256; ++i) b[k].qs[32 * (i / 64) + i % 32] |= uint8_t(q[i] << (4 * ((i / 32) % 2)));
  }
}

void quantize_q5_k(const float* x, int64_t blocks, BlockQ5_K* b) {
  for (int64_t k = 0; k < blocks; ++k, x += 256) {
    uint8_t q[256];
    quantize_k_block(x, 31, b[k].d, b[k].dmin, b[k].scales, q);
    std::memset(b[k].qs, 0, 128);
    std::memset(b[k].qh, 0, 32);
    for (int i = 0; i < 256; ++i) {
      b[k].qs[32 * (i / 64) + i % 32] |= uint8_t((q[i] & 0xF) << (4 * ((i / 32) % 2)));
      b[k].qh[i % 32] |= uint8_t((q[i] >> 4) << (i / 32));
    }
  }
}

void quantize_q6_k(const float* x, int64_t blocks, BlockQ6_K* b) {
  for (int64_t k = 0; k < blocks; ++k, x += 256) {
    float need[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      need[j] = amax / 31;
    }
    b[k].d = f16_at_least(*std::max_element(need, need + 16) / 127);
    const float d = f16_to_f32(b[k].d);
    std::memset(b[k].ql, 0, 128);
    std::memset(b[k].qh, 0, 64);
    for (int j = 0; j < 16; ++j) {
      b[k].scales[j] = int8_t(d ? std::min(127.0f, std::ceil(need[j] / d)) : 0);
      const float step = d * b[k].scales[j];
      for (int l = 0; l < 16; ++l) {
        const int i = 16 * j + l;
        const int q = int(step ? std::clamp(std::lrint(x[i] / step), -32L, 31L) : 0) + 32;
        const int n = i / 128, r = i % 128, part = r / 32, pos = r % 32;
        b[k].ql[64 * n + 32 * (part % 2) + pos] |= uint8_t((q & 0xF) << (part < 2 ? 0 : 4));
        b[k].qh[32 * n + pos] |= uint8_t((q >> 4) << (2 * part));
      }
    }
  }
}

}  // namespace

void dequantize_row(QuantType t, const uint8_t* row, int64_t cols, float* out) {
  const int64_t blocks = cols / quant_format(t).block_elems;
  switch (t) {
    case QuantType::Q8_0: return dequantize_q8_0(reinterpret_cast<const BlockQ8_0*>(row), blocks, out);
    case QuantType::Q4_K: return dequantize_q4_k(reinterpret_cast<const BlockQ4_K*>(row), blocks, out);
    case QuantType::Q6_K: return dequantize_q6_k(reinterpret_cast<const BlockQ6_K*>(row), blocks, out);
    case QuantType::Q4_0: return dequantize_32(reinterpret_cast<const BlockQ4_0*>(row), blocks, out);
    case QuantType::Q5_0: return dequantize_32(reinterpret_cast<const BlockQ5_0*>(row), blocks, out);
    case QuantType::Q5_K: return dequantize_q5_k(reinterpret_cast<const BlockQ5_K*>(row), blocks, out);
    case QuantType::Q4_1: return dequantize_32(reinterpret_cast<const BlockQ4_1*>(row), blocks, out);
    case QuantType::Q5_1: return dequantize_32(reinterpret_cast<const BlockQ5_1*>(row), blocks, out);
  }
}

void quantize_row(QuantType t, const float* x, int64_t cols, uint8_t* row) {
  const int64_t blocks = cols / quant_format(t).block_elems;
  switch (t) {
    case QuantType::Q8_0: return quantize_q8_0(x, blocks, reinterpret_cast<BlockQ8_0*>(row));
    case QuantType::Q4_K: return quantize_q4_k(x, blocks, reinterpret_cast<BlockQ4_K*>(row));
    case QuantType::Q6_K: return quantize_q6_k(x, blocks, reinterpret_cast<BlockQ6_K*>(row));
    case QuantType::Q4_0: return quantize_32(x, blocks, reinterpret_cast<BlockQ4_0*>(row));
    case QuantType::Q5_0: return quantize_32(x, blocks, reinterpret_cast<BlockQ5_0*>(row));
    case QuantType::Q5_K: return quantize_q5_k(x, blocks, reinterpret_cast<BlockQ5_K*>(row));
    case QuantType::Q4_1: return quantize_32(x, blocks, reinterpret_cast<BlockQ4_1*>(row));
    case QuantType::Q5_1: return quantize_32(x, blocks, reinterpret_cast<BlockQ5_1*>(row));
  }
}

}  // namespace runahead

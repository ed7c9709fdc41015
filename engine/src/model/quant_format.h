#pragma once
// Block-quantized weight formats (llama.cpp's ggml-common.h layouts, bit for bit): a row of
// `cols` weights is cols / block_elems blocks of block_bytes each, stored back to back.
//   Q8_0: 32 weights = f16 d, int8 q[32];                    w = d * q
//   Q4_K: 256 weights = f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks
//         of 32, 128 bytes of 4-bit q;                         w = d * sc_j * q - dmin * m_j
//   Q6_K: 256 weights = 128 bytes low 4 bits, 64 bytes high 2 bits, int8 scales for 16
//         sub-blocks of 16, f16 d;                             w = d * sc_j * (q - 32)
//   Q4_0: 32 weights = f16 d, 16 bytes of 4-bit q (byte l: low nibble weight l, high l + 16);
//                                                              w = d * (q - 8)
//   Q5_0: 32 weights = f16 d, 32 bits of high bits (bit i: weight i), 16 bytes of low 4 bits
//         (as Q4_0);                                           w = d * (q - 16)
//   Q5_K: 256 weights = Q4_K's d, dmin, scales, then 32 bytes of high bits (bit j of byte l:
//         sub-block j), 128 bytes of low 4 bits (as Q4_K);     w = d * sc_j * q - dmin * m_j
//   Q4_1: 32 weights = f16 d, f16 m, 16 bytes of 4-bit q (as Q4_0);      w = d * q + m
//   Q5_1: 32 weights = f16 d, f16 m, 32 bits of high bits and 16 bytes of low 4 bits (as
//         Q5_0);                                                         w = d * q + m
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace runahead {

enum class QuantType : uint8_t { Q8_0, Q4_K, Q6_K, Q4_0, Q5_0, Q5_K, Q4_1, Q5_1 };

struct QuantFormat {
  QuantType type;
  const char* name;   // "q8_0", "q4_k", "q5_0", ... (lower case, as a `weights:` option would say)
  uint32_t ggml_id;   // the tensor type number in a GGUF file
  int block_elems;    // weights per block
  int block_bytes;    // bytes per block
};

inline constexpr QuantFormat kQuantFormats[] = {
    {QuantType::Q8_0, "q8_0", 8, 32, 34},
    {QuantType::Q4_K, "q4_k", 12, 256, 144},
    {QuantType::Q6_K, "q6_k", 14, 256, 210},
    {QuantType::Q4_0, "q4_0", 2, 32, 18},
    {QuantType::Q5_0, "q5_0", 6, 32, 22},
    {QuantType::Q5_K, "q5_k", 13, 256, 176},
    {QuantType::Q4_1, "q4_1", 3, 32, 20},
    {QuantType::Q5_1, "q5_1", 7, 32, 24},
};

constexpr const QuantFormat& quant_format(QuantType t) { return kQuantFormats[static_cast<int>(t)]; }

inline std::optional<QuantType> quant_type_of_ggml(uint32_t ggml_id) {
  for (const QuantFormat& f : kQuantFormats)
    if (f.ggml_id == ggml_id) return f.type;
  return std::nullopt;
}

inline std::optional<QuantType> quant_type_named(std::string_view name) {
  for (const QuantFormat& f : kQuantFormats)
    if (name == f.name) return f.type;
  return std::nullopt;
}

// Bytes of one row of `cols` weights (cols a multiple of block_elems).
constexpr size_t quant_row_bytes(QuantType t, int64_t cols) {
  return size_t(cols / quant_format(t).block_elems) * size_t(quant_format(t).block_bytes);
}

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[32];
};
struct BlockQ4_K {
  uint16_t d;     // f16: scale of the 6-bit sub-block scales
  uint16_t dmin;  // f16: scale of the 6-bit sub-block mins
  uint8_t scales[12];
  uint8_t qs[128];  // bytes [32g, 32g+32): low nibbles = sub-block 2g, high nibbles = 2g+1
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;  // f16
};
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;     // f16
  uint8_t qh[4];  // a little-endian uint32: bit i is weight i's fifth bit
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16: the block's minimum, added to every weight
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;     // f16
  uint16_t m;     // f16
  uint8_t qh[4];  // as Q5_0's
  uint8_t qs[16];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // as Q4_K's
  uint8_t qh[32];      // bit j of byte l: the fifth bit of weight l of sub-block j
  uint8_t qs[128];     // as Q4_K's
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_1) == 24);

// The 32-weight blocks of 4 or 5 bits (Q4_0, Q5_0, Q4_1, Q5_1): whether a block has a fifth
// bit (qh) and a minimum (m, the _1 types; the _0 types centre q on half its range instead).
// (Detection without `requires`: nvcc compiles the CUDA files that include this as C++17.)
template <class Block, class = void>
constexpr bool kHasFifthBit = false;
template <class Block>
constexpr bool kHasFifthBit<Block, std::void_t<decltype(std::declval<const Block&>().qh)>> = true;
template <class Block, class = void>
constexpr bool kHasMin = false;
template <class Block>
constexpr bool kHasMin<Block, std::void_t<decltype(std::declval<const Block&>().m)>> = true;

// The 4- or 5-bit q of weight l of a 32-weight block: weight l in byte l's low nibble, l + 16
// in its high; the fifth bit (Q5_0/Q5_1) is bit l of qh.
template <class Block>
int q_of_32(const Block& b, int l) {
  const int low = l < 16 ? b.qs[l] & 0xF : b.qs[l - 16] >> 4;
  if constexpr (kHasFifthBit<Block>) {
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    return low | int((qh >> l) & 1) << 4;
  }
  return low;
}

// Sub-block j's 6-bit scale and min of a Q4_K block: j < 4 in the low 6 bits of bytes j and
// j + 4; j >= 4 split between the low/high nibble of byte j + 4 and the top 2 bits of the others.
inline void q4_k_scale_min(int j, const uint8_t* s, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = uint8_t((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    min = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

}  // namespace runahead

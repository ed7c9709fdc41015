#include "cpu/quant_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/simd_select.h"
#include "model/half.h"

namespace runahead {

namespace {

// llama.cpp's nearest_int: round half to even (the default rounding mode) of |v| < 2^22.
int nearest_int(float v) { return int(std::nearbyint(v)); }

}  // namespace

void Q8Activations::quantize(const float* x, int64_t n, unsigned blocks) {
  cols = n;
  if (blocks & kBlocks32) {
    const int64_t count = size_q8_0(*this, n);
    for (int64_t b = 0; b < count; ++b) {
      const float* xb = x + 32 * b;
      float amax = 0;
      for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(xb[l]));
      d[b] = f16_to_f32(f32_to_f16(amax / 127));
      const float inv = amax ? 127 / amax : 0;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int8_t v = int8_t(nearest_int(xb[l] * inv));
        q[32 * b + l] = v;
        s += v;
      }
      sum[b] = s;
    }
  }
  if ((blocks & kBlocks256) && n % 256 == 0) {
    const int64_t count = size_q8_k(*this, n);
    for (int64_t b = 0; b < count; ++b) {  // quantize_row_q8_K_ref, step for step
      const float* xb = x + 256 * b;
      int8_t* qb = &qk[256 * b];
      float max = 0, amax = 0;
      for (int l = 0; l < 256; ++l)
        if (std::fabs(xb[l]) > amax) amax = std::fabs(xb[l]), max = xb[l];
      const float iscale = amax ? -127.f / max : 0.f;
      for (int l = 0; l < 256; ++l) qb[l] = int8_t(std::min(127, nearest_int(iscale * xb[l])));
      for (int j = 0; j < 16; ++j) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += qb[16 * j + l];
        bsum16[16 * b + j] = int16_t(s);
      }
      finish_q8_k_block(*this, b, amax, iscale);
    }
    pair_sub_blocks(*this);
  }
}

int64_t size_q8_0(Q8Activations& xq, int64_t cols) {
  const int64_t count = cols / 32;
  xq.d.resize(count);
  xq.q.resize(cols);
  xq.sum.resize(count);
  return count;
}

int64_t size_q8_k(Q8Activations& xq, int64_t cols) {
  const int64_t count = cols / 256;
  xq.dk.resize(count);
  xq.qk.resize(cols);
  xq.bsum16.resize(16 * count);
  xq.bsum32.resize(8 * count);
  return count;
}

void finish_q8_k_block(Q8Activations& xq, int64_t b, float amax, float iscale) {
  for (int j = 0; j < 8; ++j) xq.bsum32[8 * b + j] = int16_t(xq.bsum16[16 * b + 2 * j] + xq.bsum16[16 * b + 2 * j + 1]);
  xq.dk[b] = amax ? 1 / iscale : 0.f;
}

void pair_sub_blocks(Q8Activations& xq) {
  xq.qk_pairs.resize(xq.qk.size());
  for (size_t b = 0; b < xq.qk.size(); b += 256)
    for (int j = 0; j < 8; ++j) std::memcpy(&xq.qk_pairs[b + 32 * j], &xq.qk[b + 32 * kQkPairOrder[j]], 32);
}

void quantize_activations(Q8Activations& xq, const float* x, int64_t cols, unsigned blocks) {
  xq.quantize(x, cols, blocks);
}

std::vector<const QuantKernels*> available_quant_kernels() {
  std::vector<const QuantKernels*> tables;
#ifdef RUNAHEAD_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    tables.push_back(&avx512_vnni_quant_kernels());
  if (avx2 && __builtin_cpu_supports("avxvnni")) tables.push_back(&avx2_vnni_quant_kernels());
  if (avx2) tables.push_back(&avx2_quant_kernels());
#endif
  tables.push_back(&portable_quant_kernels());
  return tables;
}

const QuantKernels& select_quant_kernels() { return select_simd_table(available_quant_kernels()); }

}  // namespace runahead

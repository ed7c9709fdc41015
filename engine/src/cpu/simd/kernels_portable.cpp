// Portable kernels (any CPU, e.g. ARM): an 8-float "vector" of plain C++ that the
// compiler may map to whatever SIMD the target has by default.
#include <algorithm>
#include <cmath>

#include "model/half.h"
#include "cpu/simd/make_kernels.h"

namespace runahead {
namespace {

struct Portable {
  static constexpr int width = 8;
  struct V {
    float v[width];
  };
  static constexpr int decode_rows = 4;
  static constexpr int tile_rows = 4;
  static constexpr int tile_tokens = 2;
  static constexpr int combine_heads = 4, combine_cols = 2;  // a plain loop either way
  static constexpr int prefetch_bytes = 0;

  static V zero() { return V{}; }
  static V set1(float a) {
    V r;
    for (float& f : r.v) f = a;
    return r;
  }
  template <class W>
  static V load(const W* p) {
    V r;
    for (int i = 0; i < width; ++i) r.v[i] = scalar(p[i]);
    return r;
  }
  static void store(float* p, const V& a) {
    for (int i = 0; i < width; ++i) p[i] = a.v[i];
  }
  static V fma(const V& a, const V& b, V c) {
    for (int i = 0; i < width; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  static float sum(const V& a) {
    float s = 0.0f;
    for (float f : a.v) s += f;
    return s;
  }
  static void sum4(const V& a, const V& b, const V& c, const V& d, float* out) {
    out[0] = sum(a), out[1] = sum(b), out[2] = sum(c), out[3] = sum(d);
  }
  template <class Op>
  static V map(const V& a, const V& b, Op op) {
    V r;
    for (int i = 0; i < width; ++i) r.v[i] = op(a.v[i], b.v[i]);
    return r;
  }
  static V add(const V& a, const V& b) { return map(a, b, [](float x, float y) { return x + y; }); }
  static V mul(const V& a, const V& b) { return map(a, b, [](float x, float y) { return x * y; }); }
  static V div(const V& a, const V& b) { return map(a, b, [](float x, float y) { return x / y; }); }
  static V min(const V& a, const V& b) { return map(a, b, [](float x, float y) { return std::min(x, y); }); }
  static V max(const V& a, const V& b) { return map(a, b, [](float x, float y) { return std::max(x, y); }); }
  static V round(const V& a) { return map(a, a, [](float x, float) { return std::nearbyint(x); }); }
  static V pow2(const V& n) { return map(n, n, [](float x, float) { return std::ldexp(1.0f, int(x)); }); }
  static float scalar(float w) { return w; }
  static float scalar(simd::Bf16 w) { return bf16_to_f32(w.bits); }
  static float scalar(simd::F16 w) { return f16_to_f32(w.bits); }
  static void prefetch(const char*) {}
};

}  // namespace

const Kernels& portable_kernels() {
  static const Kernels kernels = simd::make_kernels<Portable>("portable");
  return kernels;
}

}  // namespace runahead

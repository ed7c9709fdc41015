#pragma once
// exp on vectors and the two ops built on it (softmax, SwiGLU), shared by every
// instruction set. Instantiated only through make_kernels.h.
#include <cmath>
#include <cstdint>

namespace runahead::simd {

// e^x = 2^n e^r with n = round(x log2 e), |r| <= ln2 / 2, e^r by the Cephes expf
// polynomial (about 1 ulp); x is clamped to the range where e^x is a normal f32.
template <class Isa>
inline typename Isa::V exp(typename Isa::V x) {
  using V = typename Isa::V;
  x = Isa::min(Isa::max(x, Isa::set1(-87.3f)), Isa::set1(88.3f));
  const V n = Isa::round(Isa::mul(x, Isa::set1(1.44269504088896341f)));
  V r = Isa::fma(n, Isa::set1(-0.693359375f), x);  // ln 2 in two parts, so r is exact
  r = Isa::fma(n, Isa::set1(2.12194440e-4f), r);
  V p = Isa::set1(1.9875691500e-4f);
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                  5.0000001201e-1f}) {
    p = Isa::fma(p, r, Isa::set1(c));
  }
  p = Isa::fma(p, Isa::mul(r, r), Isa::add(r, Isa::set1(1.0f)));
  return Isa::mul(p, Isa::pow2(n));
}

// s[i] = exp(scale (s[i] - max_j s[j])) / sum_j exp(scale (s[j] - max_k s[k]))   for s: [n].
template <class Isa>
void softmax(float* s, int64_t n, float scale) {
  using V = typename Isa::V;
  // The largest score, in vectors (a scalar loop was a chain of dependent compares: a third of
  // the softmax at 2048 positions). The same value in any order. Not std::max_element: an
  // out-of-line copy of a std template built with this file's -mavx512f could be the one the
  // linker keeps for everyone.
  float max = s[0];
  int64_t m = 0;
  if (n >= Isa::width) {
    V vmax = Isa::load(s);
    for (m = Isa::width; m + Isa::width <= n; m += Isa::width) vmax = Isa::max(vmax, Isa::load(s + m));
    float lanes[Isa::width];
    Isa::store(lanes, vmax);
    for (float f : lanes) max = f > max ? f : max;
  }
  for (; m < n; ++m) max = s[m] > max ? s[m] : max;
  const float shift = -scale * max;
  const V vscale = Isa::set1(scale), vshift = Isa::set1(shift);
  V vsum = Isa::zero();
  float sum = 0.0f;
  int64_t i = 0;
  for (; i + Isa::width <= n; i += Isa::width) {
    const V e = exp<Isa>(Isa::fma(Isa::load(s + i), vscale, vshift));
    Isa::store(s + i, e);
    vsum = Isa::add(vsum, e);
  }
  for (; i < n; ++i) sum += s[i] = std::exp(s[i] * scale + shift);
  sum += Isa::sum(vsum);
  const V inv = Isa::set1(1.0f / sum);
  for (i = 0; i + Isa::width <= n; i += Isa::width) Isa::store(s + i, Isa::mul(Isa::load(s + i), inv));
  for (; i < n; ++i) s[i] *= 1.0f / sum;
}

// gate[i] = silu(gate[i]) up[i] = gate[i] / (1 + exp(-gate[i])) up[i]   for i in [0, n).
template <class Isa>
void swiglu(float* gate, const float* up, int64_t n) {
  using V = typename Isa::V;
  const V one = Isa::set1(1.0f), minus_one = Isa::set1(-1.0f);
  int64_t i = 0;
  for (; i + Isa::width <= n; i += Isa::width) {
    const V g = Isa::load(gate + i);
    const V silu = Isa::div(g, Isa::add(one, exp<Isa>(Isa::mul(g, minus_one))));
    Isa::store(gate + i, Isa::mul(silu, Isa::load(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace runahead::simd

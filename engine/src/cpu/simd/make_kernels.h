#pragma once
// The kernel table of one instruction set. Include only from a simd/kernels_*.cpp whose
// Isa struct lives in an anonymous namespace: every instantiation then has internal
// linkage, so code built with -mavx512f never replaces code meant for a lesser CPU.
#include "cpu/simd/kernels.h"
#include "cpu/simd/matmul_tile.h"
#include "cpu/simd/vector_exp.h"

namespace runahead::simd {

template <class Isa>
Kernels make_kernels(const char* name) {
  return Kernels{name,           &matmul_rows<Isa, float>, &matmul_rows<Isa, F16>,
                 &matmul_rows<Isa, Bf16>, &combine_rows<Isa>, &sum<Isa>,
                 &softmax<Isa>,  &swiglu<Isa>};
}

}  // namespace runahead::simd

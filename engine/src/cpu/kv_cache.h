#pragma once
// The f32 KV cache of every layer, each KV head's positions in one sequential stream:
//   values [layers][kv_heads][capacity][head_dim];
//   keys   [layers][kv_heads][capacity / kKeyBlock][head_dim][kKeyBlock], blocks of 64 positions
//          with each dimension's 64 values side by side.
// So q . k over a block is the value side's own kernel (combine_rows over the head_dim rows of
// the block): a vector of positions per fma, no horizontal sums, and every score the same
// sequence of fmas whatever the number of heads or positions. Rows of all heads interleaved
// ([capacity][kv_heads * head_dim]) made a decode step's q . k loads wait on memory; rows of one
// head took a horizontal sum per score (0.5B at context 2048: 3.6 and ~1.6 of ~20 ms a token).
// Appending copies rows in; rollback only moves len.
#include <cstddef>
#include <memory>

namespace runahead {

class KVCache {
 public:
  static constexpr int kKeyBlock = 64;

  KVCache(int layers, int capacity, int kv_heads, int head_dim);

  int capacity() const { return capacity_; }
  int len() const { return len_; }
  void set_len(int len) { len_ = len; }

  // Head `head`'s keys at positions [kKeyBlock * block, kKeyBlock * (block + 1)) of `layer`:
  // head_dim rows of kKeyBlock floats (row i: dimension i of each position). Positions at or
  // past len hold whatever was there (never a score anyone reads).
  const float* k_block(int layer, int head, int block) const { return k_.get() + k_offset(layer, head, block); }
  // Head `head`'s value at `pos` of `layer`; the next position's is head_dim floats on.
  const float* v(int layer, int head, int pos) const { return v_.get() + v_offset(layer, head, pos); }

  // Copies n positions' keys and values, rows of kv_heads * head_dim, to positions
  // [pos0, pos0 + n) of `layer`.
  void append(int layer, int pos0, int n, const float* k_rows, const float* v_rows);

 private:
  size_t k_offset(int layer, int head, int block) const {
    return ((size_t(layer) * kv_heads_ + head) * blocks_ + block) * head_dim_ * kKeyBlock;
  }
  size_t v_offset(int layer, int head, int pos) const {
    return ((size_t(layer) * kv_heads_ + head) * capacity_ + pos) * head_dim_;
  }
  int layers_, capacity_, kv_heads_, head_dim_, blocks_;
  int len_ = 0;
  // Left uninitialised: untouched positions cost no resident memory.
  std::unique_ptr<float[]> k_, v_;
};

}  // namespace runahead

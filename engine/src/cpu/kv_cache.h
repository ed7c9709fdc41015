#pragma once
// The f32 KV cache: keys and values of every layer, each KV head's positions contiguous,
// [layers][kv_heads][capacity][head_dim]. Attention reads one head's keys (and values) as one
// sequential stream; rows of all heads interleaved ([capacity][kv_heads * head_dim]) made a
// decode step's q . k loads wait on memory (0.5B at context 2048: 3.6 of 20.6 ms a token).
// Appending copies rows in; rollback only moves len.
#include <cstddef>
#include <memory>

namespace runahead {

class KVCache {
 public:
  KVCache(int layers, int capacity, int kv_heads, int head_dim);

  int capacity() const { return capacity_; }
  int len() const { return len_; }
  int head_dim() const { return head_dim_; }
  void set_len(int len) { len_ = len; }

  // Head `head`'s key (value) at `pos` of `layer`; the next position's is head_dim() floats on.
  float* k(int layer, int head, int pos) { return k_.get() + offset(layer, head, pos); }
  float* v(int layer, int head, int pos) { return v_.get() + offset(layer, head, pos); }

  // Copies n positions' keys and values, rows of kv_heads * head_dim, to positions
  // [pos0, pos0 + n) of `layer`.
  void append(int layer, int pos0, int n, const float* k_rows, const float* v_rows);

 private:
  size_t offset(int layer, int head, int pos) const {
    return ((size_t(layer) * kv_heads_ + head) * capacity_ + pos) * head_dim_;
  }
  int layers_, capacity_, kv_heads_, head_dim_;
  int len_ = 0;
  // Left uninitialised: untouched positions cost no resident memory.
  std::unique_ptr<float[]> k_, v_;
};

}  // namespace runahead

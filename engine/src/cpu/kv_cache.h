#pragma once
// The f32 KV cache: keys and values of every layer at every position,
// [layers][capacity][kv_heads * head_dim]. Appending writes rows; rollback only moves len.
#include <cstddef>
#include <memory>

namespace runahead {

class KVCache {
 public:
  KVCache(int layers, int capacity, int kv_dim);

  int capacity() const { return capacity_; }
  int len() const { return len_; }
  int kv_dim() const { return kv_dim_; }
  void set_len(int len) { len_ = len; }

  float* k(int layer, int pos) { return k_.get() + offset(layer, pos); }
  float* v(int layer, int pos) { return v_.get() + offset(layer, pos); }

 private:
  size_t offset(int layer, int pos) const {
    return (size_t(layer) * capacity_ + pos) * kv_dim_;
  }
  int layers_, capacity_, kv_dim_;
  int len_ = 0;
  // Left uninitialised: untouched positions cost no resident memory.
  std::unique_ptr<float[]> k_, v_;
};

}  // namespace runahead

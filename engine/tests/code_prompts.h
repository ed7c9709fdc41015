#pragma once
// Three real code prompts (Python, JavaScript, C) as token ids of the embedded model's
// tokenizer (engine/models/runahead-coder/tokenizer.json; re-encode the texts when it
// changes): a trained model's greedy continuation of real code is confident, so
// quantization must not change it.
#include <cstdint>
#include <vector>

namespace runahead::test {

inline const std::vector<std::vector<int32_t>>& code_prompts() {
  static const std::vector<std::vector<int32_t>> prompts = {
      // def binary_search(items, target): ... if items[mid] == target: return mid
      {342, 4139, 6179, 14, 2193, 18, 1270, 396, 265, 583, 18, 13547, 278, 227, 22, 18, 977, 14, 2193, 15,
       390, 227, 23, 205, 265, 2111, 583, 1924, 13547, 310, 267, 10088, 278, 328, 324, 457, 13547, 15, 416, 227,
       24, 205, 267, 361, 4186, 5677, 369, 67, 517, 1270, 310, 296, 367, 10088, 205},
      // function debounce(fn, ms) { ... } export function throttle(fn, ms) {
      {1735, 491, 4164, 316, 337, 7067, 18, 8313, 15, 344, 227, 1137, 11504, 320, 227, 367, 14763, 596, 15, 795,
       344, 265, 4891, 4173, 749, 4515, 413, 265, 11504, 278, 798, 4173, 8217, 795, 1225, 6546, 596, 510, 8313, 413,
       227, 1877, 563, 862, 668, 381, 303, 1002, 284, 7067, 18, 8313, 15, 344},
      // #include <stdio.h> int main(int argc, char **argv) { for (...) { printf("%s\n", argv[i]); }
      {1311, 533, 274, 2659, 915, 3252, 386, 3554, 2734, 958, 73, 18, 1499, 853, 15787, 15, 344, 265, 384, 328,
       386, 286, 278, 227, 23, 33, 286, 533, 958, 73, 33, 286, 6232, 344, 267, 2055, 76, 5024, 89, 1929,
       435, 8300, 1411, 3871, 265, 565},
  };
  return prompts;
}

}  // namespace runahead::test

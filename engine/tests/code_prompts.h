#pragma once
// Three real code prompts (Python, JavaScript, C) as token ids of the embedded model's
// tokenizer (engine/models/runahead-coder/tokenizer.json): a trained model's greedy
// continuation of real code is confident, so quantization must not change it.
#include <cstdint>
#include <vector>

namespace runahead::test {

inline const std::vector<std::vector<int32_t>>& code_prompts() {
  static const std::vector<std::vector<int32_t>> prompts = {
      // def binary_search(items, target): ... if items[mid] == target: return mid
      {331, 4139, 5928, 14,  1600, 18,   1242, 336,  265, 552,  18,  475,  79,   277, 227,  22,   18,   855, 14,   1600,
       15,  369,  227,  23,  205,  265,  2185, 552,  1870, 475, 79,  287,  266,  5489, 277, 325,  318,  436, 475,  79,
       15,  1134, 227,  24,  205,  266,  342,  4632, 7041, 370, 67,  441,  1242, 287,  276, 366,  5489, 205},
      // function debounce(fn, ms) { ... } export function throttle(fn, ms) {
      {2187, 494,  72,   608,  339,  6304, 18,   6929, 15,  652,  227,  3787, 12237, 497,  227, 366, 325, 3004, 440,
       15,   2025, 652,  265,  6701, 8191, 739,  6084, 862, 265,  12237, 277, 790,   8191, 14,  506, 2025, 3097, 7982,
       440,  448,  6929, 862,  227,  4548, 1680, 1948, 719, 403,  4498, 9965, 6304,  18,   6929, 15,  652},
      // #include <stdio.h> int main(int argc, char **argv) { for (...) { printf("%s\n", argv[i]); }
      {9,   5895, 778,  275,  532,  85,    1297, 9814, 414, 4270, 4080, 905, 73,   18,   6228, 748,  391,
       92,  15,   652,  265,  368,  325,   414,  283,  277, 227,  23,   33,  283,  778,  905,  73,   33,
       283, 9691, 652,  266,  2041, 76,    12913, 89,  2775, 434,  905,  92,  1327, 7755, 265,  1035},
  };
  return prompts;
}

}  // namespace runahead::test

#include <doctest/doctest.h>

#include <random>

#include "model/error.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "test_gguf_writer.h"

using namespace runahead;
using namespace runahead::test;

namespace {

using Rng = std::mt19937_64;

size_t below(Rng& rng, size_t n) { return n ? rng() % n : 0; }

// A small but complete file: every value type, a string array, tensors of each block format.
std::string valid_file() {
  GgufWriter w;
  w.str("general.architecture", "qwen2");
  w.u32("qwen2.block_count", 1);
  w.u32("qwen2.context_length", 128);
  w.u32("qwen2.embedding_length", 32);
  w.u32("qwen2.feed_forward_length", 256);
  w.u32("qwen2.attention.head_count", 2);
  w.f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
  w.scalar<double>("general.f64", GgufWriter::F64, 2.5);
  w.scalar<uint8_t>("general.flag", GgufWriter::BOOL, 1);
  w.strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
  w.i32s("tokenizer.ggml.token_type", {1, 1, 1, 3});
  w.tensor("token_embd.weight", 8, {32, 4}, gguf_pattern(4 * 34, 1));
  w.tensor("output_norm.weight", kGgmlF32, {32}, gguf_pattern(128, 2));
  w.tensor("blk.0.ffn_down.weight", 12, {256, 32}, gguf_pattern(32 * 144, 3));
  w.tensor("blk.0.ffn_up.weight", 14, {256, 1}, gguf_pattern(210, 4));
  w.tensor("blk.0.attn_norm.weight", kGgmlBF16, {32}, gguf_pattern(64, 5));
  return w.bytes();
}

std::string mutate(Rng& rng, const std::string& valid, size_t header_end) {
  std::string s = valid;
  switch (below(rng, 6)) {
    case 0:  // byte flips, mostly before the data
      for (size_t i = 1 + below(rng, 6); i > 0; --i) s[below(rng, below(rng, 4) ? header_end : s.size())] ^= char(1 + below(rng, 255));
      return s;
    case 1:  // truncation
      return s.substr(0, below(rng, s.size()));
    case 2: {  // a count, length, type or offset replaced by an edge value
      const size_t at = below(rng, header_end - 8);
      static const uint64_t edges[] = {0, 1, 2, 3, 8, 9, 12, 13, 14, 31, 32, 33, 255, 1ull << 31, 1ull << 32, 1ull << 63, ~0ull};
      const uint64_t v = below(rng, 2) ? edges[below(rng, std::size(edges))] : rng();
      std::memcpy(s.data() + at, &v, below(rng, 2) ? 8 : 4);
      return s;
    }
    case 3:  // a byte inserted or removed: everything after it shifts
      if (below(rng, 2)) return s.insert(below(rng, header_end), 1, char(rng()));
      return s.erase(below(rng, header_end), 1 + below(rng, 4));
    case 4:  // random bytes after a valid magic and version
      s = s.substr(0, 8);
      for (size_t i = below(rng, 200); i > 0; --i) s += char(below(rng, 3) ? below(rng, 4) : rng());
      return s;
    default: {  // random bytes
      std::string r(below(rng, 64), '\0');
      for (char& c : r) c = char(rng());
      return r;
    }
  }
}

}  // namespace

TEST_CASE("gguf fuzz: malformed files parse or throw model_error, and views stay in the file") {
  const std::string valid = valid_file();
  const size_t header_end = GgufFile::parse(reinterpret_cast<const uint8_t*>(valid.data()), valid.size(), "f")->data_offset();
  Rng rng(20261212);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 6000; ++i) {
    const std::string s = mutate(rng, valid, header_end);
    // An exact-size heap copy, so a read past the end is a real out-of-bounds read.
    const std::vector<uint8_t> bytes(s.begin(), s.end());
    const uint8_t* end = bytes.data() + bytes.size();
    try {
      const auto g = GgufFile::parse(bytes.data(), bytes.size(), "fuzz.gguf");
      for (const GgufTensor& t : g->tensors()) {
        REQUIRE(t.data >= bytes.data() + g->data_offset());
        REQUIRE(t.data + t.nbytes <= end);
      }
      for (const auto& [key, v] : g->metadata()) {
        if (v.type == GgufValueType::String) REQUIRE(reinterpret_cast<const uint8_t*>(v.str.data()) + v.str.size() <= end);
        if (v.type == GgufValueType::Array && v.elem_type == GgufValueType::String)
          for (std::string_view e : g->strings(key)) REQUIRE(reinterpret_cast<const uint8_t*>(e.data()) + e.size() <= end);
      }
      // The model reading on top must refuse or succeed the same way.
      try {
        const ModelConfig c = gguf_config(*g);
        gguf_weights(*g, c);
      } catch (const EngineError& e) {
        REQUIRE(e.code == "model_error");
      }
      ++parsed;
    } catch (const EngineError& e) {
      REQUIRE(e.code == "model_error");
      REQUIRE(e.file == "fuzz.gguf");
      REQUIRE(std::string(e.what()).rfind("fuzz.gguf: ", 0) == 0);
      ++refused;
    }  // anything else escapes and fails the test
  }
  MESSAGE(parsed << " parsed, " << refused << " refused");
  CHECK(parsed + refused == 6000);
  CHECK(parsed > 100);
  CHECK(refused > 3000);
}

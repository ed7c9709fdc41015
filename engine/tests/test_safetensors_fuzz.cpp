#include <doctest/doctest.h>

#include <random>

#include "model/safetensors.h"
#include "model_writer.h"

using namespace runahead;
using namespace runahead::test;

namespace {

using Rng = std::mt19937_64;

size_t below(Rng& rng, size_t n) { return n ? rng() % n : 0; }

// A number that is often near the edges the parser must check.
json edgy_number(Rng& rng) {
  switch (below(rng, 7)) {
    case 0: return below(rng, 64);
    case 1: return -int64_t(below(rng, 5));
    case 2: return 0.5 * double(below(rng, 9));
    case 3: return uint64_t(rng());
    case 4: return uint64_t(1) << below(rng, 64);
    case 5: return "7";
    default: return nullptr;
  }
}

json random_json(Rng& rng, int depth) {
  switch (depth > 3 ? below(rng, 3) : below(rng, 6)) {
    case 0: return edgy_number(rng);
    case 1: return std::string(below(rng, 4), char('A' + below(rng, 26)));
    case 2: return below(rng, 2) == 0;
    case 3: {
      json a = json::array();
      for (size_t i = below(rng, 4); i > 0; --i) a.push_back(random_json(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (size_t i = below(rng, 4); i > 0; --i)
        o[std::string(1, char('a' + below(rng, 4)))] = random_json(rng, depth + 1);
      return o;
    }
  }
}

// A header shaped like a real one, with fields drawn near their valid values.
json random_header(Rng& rng) {
  static const char* dtypes[] = {"BF16", "F16", "F32", "I64", "bf16", ""};
  json h = json::object();
  for (size_t i = below(rng, 5); i > 0; --i) {
    json shape = json::array();
    for (size_t d = below(rng, 4); d > 0; --d) shape.push_back(below(rng, 6) ? json(below(rng, 8)) : edgy_number(rng));
    const json begin = below(rng, 6) ? json(below(rng, 64)) : edgy_number(rng);
    const json end = below(rng, 6) ? json(below(rng, 64)) : edgy_number(rng);
    json entry = {{"dtype", dtypes[below(rng, 6)]}, {"shape", shape}, {"data_offsets", {begin, end}}};
    if (below(rng, 8) == 0) entry.erase(entry.begin());
    h[below(rng, 10) ? "t" + std::to_string(i) : "__metadata__"] = below(rng, 10) ? entry : random_json(rng, 1);
  }
  return h;
}

std::string mutate(Rng& rng, const std::string& valid) {
  std::string s = valid;
  switch (below(rng, 7)) {
    case 0:  // byte flips, mostly in the header
      for (size_t i = 1 + below(rng, 8); i > 0; --i) s[below(rng, below(rng, 2) ? std::min<size_t>(120, s.size()) : s.size())] ^= char(1 + below(rng, 255));
      return s;
    case 1:  // truncation
      return s.substr(0, below(rng, s.size()));
    case 2:  // a random header length
      for (int i = 0; i < 8; ++i) s[i] = char(below(rng, 2) ? rng() : 0);
      return s;
    case 3:  // a random JSON header before a random amount of data
      return safetensors_raw(random_json(rng, 0).dump(), std::string(below(rng, 80), '\x3f'));
    case 4:  // a header-shaped header
      return safetensors_raw(random_header(rng).dump(), std::string(below(rng, 80), '\x01'));
    case 5: {  // digits of the header changed: offsets and shapes move
      for (char& c : s)
        if (&c - s.data() >= 8 && c >= '0' && c <= '9' && below(rng, 4) == 0) c = char('0' + below(rng, 10));
      return s;
    }
    default: {  // random bytes of a random length
      std::string r(below(rng, 64), '\0');
      for (char& c : r) c = char(rng());
      return r;
    }
  }
}

}  // namespace

TEST_CASE("safetensors fuzz: malformed files parse or throw EngineError, and views stay in the file") {
  const std::string valid = safetensors_file(
      {{"model.embed_tokens.weight", "BF16", {8, 4}}, {"model.norm.weight", "F32", {4}}, {"lm_head.weight", "F16", {2, 4}}},
      {{"format", "pt"}});
  Rng rng(20261129);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string s = mutate(rng, valid);
    // An exact-size heap copy, so a read past the end is a real out-of-bounds read.
    const std::vector<uint8_t> bytes(s.begin(), s.end());
    try {
      for (const Tensor& t : parse_safetensors(bytes.data(), bytes.size(), "fuzz.safetensors")) {
        const auto* p = static_cast<const uint8_t*>(t.data);
        REQUIRE(p >= bytes.data() + 8);
        REQUIRE(p + t.nbytes() <= bytes.data() + bytes.size());
      }
      ++parsed;
    } catch (const EngineError& e) {
      REQUIRE(e.code == "model_error");
      REQUIRE(e.file == "fuzz.safetensors");
      REQUIRE(std::string(e.what()).rfind("fuzz.safetensors: ", 0) == 0);
      ++refused;
    }  // anything else escapes and fails the test
  }
  MESSAGE(parsed << " parsed, " << refused << " refused");
  CHECK(parsed + refused == 4000);
  CHECK(parsed > 20);    // the mutations do not only produce garbage...
  CHECK(refused > 2000); // ...nor only valid files
}

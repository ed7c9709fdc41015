// Thousands of malformed lines through the request parser in-process, and a batch
// through the real engine: nothing crashes, every line gets a valid message or a
// structured error.
#include <doctest/doctest.h>

#include <atomic>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine_process.h"
#include "protocol/messages.h"
#include "protocol/requests.h"

using nlohmann::json;
using namespace runahead;

namespace {

class JunkMaker {
 public:
  explicit JunkMaker(uint64_t seed) : rng_(seed) {}

  int below(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  // Numbers a parser or a cast may choke on, as text.
  std::string odd_number() {
    static const char* kNumbers[] = {"1e400", "-1e400", "99999999999999999999999999", "18446744073709551616",
                                     "18446744073709551615", "-9223372036854775809", "2147483648", "-1",
                                     "1.5", "-0", "0e0", "1E-400", "3.0", "NaN", "Infinity", "0x10", "01"};
    return kNumbers[below(std::size(kNumbers))];
  }

  json value(int depth = 0) {
    switch (below(depth > 3 ? 5 : 8)) {
      case 0: return nullptr;
      case 1: return below(2) == 0;
      case 2: return static_cast<int64_t>(rng_()) >> below(64);
      case 3: return std::ldexp(static_cast<double>(rng_() % 1000) - 500, below(200) - 100);
      case 4: return random_string();
      case 5: {
        json a = json::array();
        for (int i = below(5); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int i = below(5); i > 0; --i) o[field_name()] = value(depth + 1);
        return o;
      }
    }
  }

  std::string field_name() {
    static const char* kNames[] = {"type", "id", "prompt", "params", "model", "options", "max_tokens",
                                   "temperature", "top_k", "top_p", "seed", "stop", "deadline_ms",
                                   "hard_deadline_ms", "backend", "threads", "context_length", "newline_tokens", "x"};
    return kNames[below(std::size(kNames))];
  }

  std::string random_string() {
    std::string s;
    for (int i = below(12); i > 0; --i) s += static_cast<char>(32 + below(95));
    return s;
  }

  // A request of a known type whose fields hold random values.
  json request_shaped() {
    static const char* kTypes[] = {"hello", "ping", "load", "generate", "cancel", "stats", "unload"};
    json r = {{"type", kTypes[below(std::size(kTypes))]}};
    if (below(4) != 0) r["id"] = value(2);
    for (int i = below(4); i > 0; --i) r[field_name()] = value(1);
    if (below(2) == 0) {
      json params = json::object();
      for (int i = below(5); i > 0; --i) params[field_name()] = value(2);
      r[below(2) == 0 ? "params" : "options"] = params;
    }
    return r;
  }

  std::string line() {
    switch (below(9)) {
      case 0: return value().dump();
      case 1: return request_shaped().dump();
      case 2: {  // truncated
        const std::string s = request_shaped().dump();
        return s.substr(0, below(static_cast<int>(s.size())));
      }
      case 3: {  // random bytes, no newline
        std::string s;
        for (int i = 1 + below(64); i > 0; --i) {
          char c = static_cast<char>(rng_());
          s += c == '\n' ? ' ' : c;
        }
        return s;
      }
      case 4: {  // odd numbers where ids and counts go
        return R"({"type":"generate","id":)" + odd_number() + R"(,"prompt":[)" + odd_number() + R"(],"params":{"max_tokens":)" +
               odd_number() + R"(,"seed":)" + odd_number() + R"(,"temperature":)" + odd_number() + "}}";
      }
      case 5: {  // deep nesting
        const int depth = 1 + below(20000);
        const bool arrays = below(2) == 0;
        std::string s;
        for (int i = 0; i < depth; ++i) s += arrays ? "[" : R"({"a":)";
        for (int i = 0; i < depth; ++i) s += arrays ? "]" : "}";
        return s;
      }
      case 6: {  // one byte of a valid request changed
        std::string s = R"({"type":"generate","id":"g","prompt":[1,2,3],"params":{"max_tokens":4,"stop":[0]}})";
        s[below(static_cast<int>(s.size()))] = static_cast<char>(32 + below(95));
        return s;
      }
      case 7: {  // a valid request with a junk field value
        json r = {{"type", "generate"}, {"id", "g"}, {"prompt", {1, 2, 3}}, {"params", {{"max_tokens", 4}}}};
        r["params"][field_name()] = value(2);
        return r.dump();
      }
      default: {  // junk types for the main fields
        return json{{"type", value(3)}, {"id", value(3)}, {"prompt", value(3)}}.dump();
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// Parses `line` in-process; returns the parsed type, or checks the error is structured.
std::optional<RequestType> parse_checked(const std::string& line) {
  try {
    return parse_request(line).type;
  } catch (const RequestError& e) {
    CHECK((e.code == "bad_json" || e.code == "bad_request"));
    CHECK(std::string(e.what()).size() > 0);
    const json m = error_message(e, e.id);
    const json back = json::parse(m.dump(-1, ' ', false, json::error_handler_t::replace));
    CHECK(back["type"] == "error");
    if (e.code == "bad_request") CHECK(back.contains("expected"));
  }
  return std::nullopt;
}

const std::set<std::string> kMessageTypes = {"hello", "pong", "stats", "error", "loaded", "load_progress",
                                             "tokens", "done", "unloaded", "bye"};

}  // namespace

TEST_CASE("fuzz: 5,000 malformed lines through the request parser never throw anything unstructured") {
  JunkMaker junk(20261129);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::string line = junk.line();
    CAPTURE(line.substr(0, 200));
    try {
      (parse_checked(line) ? parsed : refused)++;
    } catch (const std::exception& e) {
      FAIL("unstructured exception: " << e.what());
    }
  }
  MESSAGE(parsed << " parsed, " << refused << " refused");
  CHECK(refused > 4000);  // the junk is mostly junk
  CHECK(parsed + refused == 5000);
}

TEST_CASE("fuzz: a batch of malformed lines through the real engine, one answer each, then bye") {
  JunkMaker junk(7);
  std::string batch;
  int lines = 0;
  while (lines < 400) {
    std::string line = junk.line();
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines get no answer
    if (line.back() == '\r') continue;
    // A load of something real would take the engine's time, not test its parser.
    const auto type = parse_checked(line);
    if (type == RequestType::Load || type == RequestType::Shutdown) continue;
    batch += line + "\n";
    ++lines;
  }
  runahead::testing::EngineProcess engine;
  // Written from another thread: the engine answers as it reads, and a reader that
  // wrote everything first would leave both sides blocked on full pipes.
  std::atomic<bool> sent{false};
  std::thread writer([&] { sent = engine.send_raw(batch) && engine.send_line(R"({"type":"shutdown"})"); });
  int answers = 0;
  for (;;) {
    const auto m = engine.read(30);
    REQUIRE(m);
    REQUIRE(m->contains("type"));
    CHECK(kMessageTypes.count((*m)["type"].get<std::string>()) == 1);
    if ((*m)["type"] == "bye") break;
    ++answers;
  }
  writer.join();
  CHECK(sent);
  CHECK(answers == lines);
  CHECK(engine.wait_exit(10) == 0);
}

#pragma once
// Writes protocol messages to a file descriptor, one whole line per message, from any
// thread. Unbuffered: each message is on its way when write() returns.
#include <atomic>
#include <mutex>

#include <nlohmann/json.hpp>

namespace runahead {

class MessageWriter {
 public:
  explicit MessageWriter(int fd) : fd_(fd) {}
  // False once the reader has gone (EPIPE or another write error); later writes are dropped.
  bool write(const nlohmann::json& message);
  bool broken() const { return broken_.load(); }

 private:
  int fd_;
  std::mutex mutex_;
  std::atomic<bool> broken_{false};
};

}  // namespace runahead

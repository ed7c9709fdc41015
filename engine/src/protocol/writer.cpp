#include "protocol/writer.h"

#include <cerrno>
#include <string>

#include <unistd.h>

namespace runahead {

bool MessageWriter::write(const nlohmann::json& message) {
  // Invalid UTF-8 (echoed from a bad request) is replaced rather than thrown on.
  std::string line = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::lock_guard lock(mutex_);
  if (broken_) return false;
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      broken_ = true;
      return false;
    }
    written += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace runahead

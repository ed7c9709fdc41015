#include "protocol/line_reader.h"

#include <cerrno>

#include <unistd.h>

namespace runahead {

LineReader::LineReader(int fd, size_t max_line_bytes) : fd_(fd), max_(max_line_bytes) {}

bool LineReader::fill() {
  // Drop what was consumed before the buffer grows.
  if (begin_ > 0) {
    buffer_.erase(0, begin_);
    begin_ = 0;
  }
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

LineReader::Status LineReader::next(std::string& line) {
  size_t scanned = begin_;
  for (;;) {
    const size_t newline = buffer_.find('\n', scanned);
    if (newline != std::string::npos) {
      const bool too_long = skipping_ || newline - begin_ > max_;
      if (!too_long) {
        line.assign(buffer_, begin_, newline - begin_);
        if (!line.empty() && line.back() == '\r') line.pop_back();
      }
      begin_ = newline + 1;
      skipping_ = false;
      return too_long ? Status::TooLong : Status::Line;
    }
    if (buffer_.size() - begin_ > max_) {
      // Too long already: forget its bytes, keep looking for its end.
      skipping_ = true;
      buffer_.clear();
      begin_ = 0;
    }
    const size_t unread = buffer_.size() - begin_;  // none of it holds a newline
    if (eof_ || !fill()) {
      eof_ = true;
      if (skipping_) {
        skipping_ = false;
        buffer_.clear();
        begin_ = 0;
        return Status::TooLong;
      }
      if (begin_ < buffer_.size()) {
        line.assign(buffer_, begin_, std::string::npos);
        buffer_.clear();
        begin_ = 0;
        return Status::Line;
      }
      return Status::Eof;
    }
    scanned = unread;  // fill() moved the unread part to the front
  }
}

}  // namespace runahead

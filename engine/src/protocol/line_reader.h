#pragma once
// Splits a file descriptor into lines of bounded length. A line over the bound is
// consumed to its end and reported, so one bad client line never ends the stream.
#include <cstddef>
#include <string>

namespace runahead {

class LineReader {
 public:
  LineReader(int fd, size_t max_line_bytes);

  enum class Status { Line, TooLong, Eof };
  // Line: `line` holds it without "\n" (or "\r\n"). TooLong: the whole line was skipped.
  // Eof: the input ended (a last line without "\n" is returned as a Line first).
  Status next(std::string& line);

 private:
  bool fill();  // reads more input; false at end of input or on an error

  int fd_;
  size_t max_;
  std::string buffer_;
  size_t begin_ = 0;      // start of the unread part of buffer_
  bool skipping_ = false; // inside a line that was already too long
  bool eof_ = false;
};

}  // namespace runahead

#include "model/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "model/model_error.h"

namespace runahead {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string open_problem(int err) {
  if (err == ENOENT) return "is missing";
  if (err == ELOOP) return "is a symbolic link loop (or a chain of more than 40 links)";
  return std::string("cannot be opened: ") + std::strerror(err);
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path, const std::string& expected) {
  const std::string file = path.string();
  fd_ = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) model_error(file, "", open_problem(errno), expected);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    model_error(file, "", std::string("cannot be read: ") + std::strerror(err), expected);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    model_error(file, "", "is " + kind_of(st.st_mode) + ", not a regular file", expected);
  }
  size_ = static_cast<size_t>(st.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

std::string read_whole_file(const std::filesystem::path& path, const std::string& expected) {
  const RegularFile f(path, expected);
  const std::string file = path.string();
  if (f.size() > kMaxWholeFileBytes)
    model_error(file, "", "is " + std::to_string(f.size()) + " bytes, more than the limit of " +
                              std::to_string(kMaxWholeFileBytes) + " bytes",
                expected);
  std::string text(f.size(), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(f.fd(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) model_error(file, "", std::string("cannot be read: ") + std::strerror(errno), expected);
    if (n == 0) break;  // shrank while read: parsing what is there names the problem
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

bool has_entry(const std::filesystem::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace runahead

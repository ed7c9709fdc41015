#pragma once
// Opening the files of a model folder safely: never blocking (a FIFO or a device named
// config.json must not hang the load), only regular files, whole-file reads with a size cap.
#include <cstddef>
#include <filesystem>
#include <string>

namespace runahead {

// The cap on a file read whole (config.json, the index, tokenizer.json, ...): far above
// any real one (Qwen's tokenizer.json is 7 MB), far below what would strain memory.
inline constexpr size_t kMaxWholeFileBytes = 64u << 20;

// An open regular file; closes it when destroyed.
class RegularFile {
 public:
  // Opens with O_NONBLOCK, then fstat. Throws EngineError{"model_error"} naming the file
  // when it is missing, a symlink loop, unreadable, or not a regular file (FIFO, device,
  // directory, socket); `expected` says what it should be.
  RegularFile(const std::filesystem::path& path, const std::string& expected);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  int fd() const { return fd_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
};

// The whole content of a regular file of at most kMaxWholeFileBytes; throws as RegularFile,
// and when the file is larger.
std::string read_whole_file(const std::filesystem::path& path, const std::string& expected);

// Whether the folder has an entry of this name, whatever it is (a dangling link or a loop
// counts, so that opening it names the problem instead of calling it missing). Never throws.
bool has_entry(const std::filesystem::path& path);

}  // namespace runahead

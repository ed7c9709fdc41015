#pragma once
// The real runahead-engine as a child process on pipes: write request lines, read
// message lines with a timeout. For tests of the protocol as a client sees it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace runahead::testing {

class EngineProcess {
 public:
  explicit EngineProcess(std::vector<std::string> args = {"serve"}) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    args.insert(args.begin(), RUNAHEAD_ENGINE_BIN);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, RUNAHEAD_ENGINE_BIN, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_engine_ = in[1];
    from_engine_ = out[0];
    if (rc != 0) throw std::runtime_error(std::string("cannot start " RUNAHEAD_ENGINE_BIN ": ") + strerror(rc));
    signal(SIGPIPE, SIG_IGN);  // an engine that died must fail a test, not kill the test binary
  }

  ~EngineProcess() {
    close_stdin();
    if (wait_exit(5.0) == kStillRunning) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(from_engine_);
  }

  EngineProcess(const EngineProcess&) = delete;
  EngineProcess& operator=(const EngineProcess&) = delete;

  // Writes bytes as they are (no newline added). False if the engine stopped reading.
  bool send_raw(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(to_engine_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool send_line(std::string_view line) { return send_raw(std::string(line) + "\n"); }
  bool send(const nlohmann::json& message) { return send_line(message.dump()); }

  // The next line, or nullopt after `timeout_s` or at end of output.
  std::optional<std::string> read_line(double timeout_s = 20.0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      const size_t newline = pending_.find('\n');
      if (newline != std::string::npos) {
        std::string line = pending_.substr(0, newline);
        pending_.erase(0, newline + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{from_engine_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[65536];
      const ssize_t n = ::read(from_engine_, buffer, sizeof buffer);
      if (n <= 0) return std::nullopt;
      pending_.append(buffer, static_cast<size_t>(n));
    }
  }

  // The next message; a line that is not a JSON object becomes {"unparsable": line}.
  std::optional<nlohmann::json> read(double timeout_s = 20.0) {
    const auto line = read_line(timeout_s);
    if (!line) return std::nullopt;
    auto j = nlohmann::json::parse(*line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return nlohmann::json{{"unparsable", *line}};
    return j;
  }

  // Reads until a message satisfies `wanted`, keeping those skipped in `skipped`.
  std::optional<nlohmann::json> read_until(const std::function<bool(const nlohmann::json&)>& wanted,
                                           std::vector<nlohmann::json>* skipped = nullptr, double timeout_s = 20.0) {
    for (;;) {
      auto m = read(timeout_s);
      if (!m || wanted(*m)) return m;
      if (skipped) skipped->push_back(*m);
    }
  }

  void close_stdin() {
    if (to_engine_ >= 0) close(to_engine_);
    to_engine_ = -1;
  }

  static constexpr int kStillRunning = -1000;
  // The exit status, -signal if killed, or kStillRunning after the timeout.
  int wait_exit(double timeout_s) {
    if (exit_status_) return *exit_status_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    do {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        return *exit_status_;
      }
      usleep(10000);
    } while (std::chrono::steady_clock::now() < deadline);
    return kStillRunning;
  }

 private:
  pid_t pid_ = -1;
  int to_engine_ = -1;
  int from_engine_ = -1;
  std::string pending_;
  std::optional<int> exit_status_;
};

}  // namespace runahead::testing

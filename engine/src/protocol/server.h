#pragma once
// The stdio protocol server (PROTOCOL.md v1). The calling thread reads requests and
// answers hello/ping/stats/cancel at once; one worker thread runs load, generate and
// unload in arrival order.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/requests.h"
#include "protocol/writer.h"
#include "runtime/session.h"

namespace runahead {

// Generations waiting behind the running one: one more is refused with queue_full, so a
// client that floods the engine learns it at once and queued prompts cannot grow without bound.
inline constexpr size_t kMaxQueuedGenerations = 8;
// Generations remembered after they end, so that a cancel which crossed their final message
// is ignored instead of answered with unknown_request.
inline constexpr size_t kRecentlyFinished = 64;

class Server {
 public:
  Server(int in_fd, int out_fd);
  // Serves until shutdown or end of input; returns the process exit status.
  int run();

 private:
  struct Job {
    Request request;
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  };

  void handle_line(std::string_view line);
  void dispatch(Request request);
  void enqueue(Request request);
  void cancel(const nlohmann::json& id);
  // Shutdown: the running and queued generations end cancelled; queued loads and unloads still run.
  void cancel_all();
  void send_cancelled(const Job& job);
  // mutex_ held: why a generation cannot be queued (queue_full, or a prompt longer than the
  // loaded model's context while no load is pending), or nothing.
  std::optional<EngineError> refuse_generation(const GenerateRequest& request) const;
  // mutex_ held: remembers a generation that ended, for cancel.
  void finished(const nlohmann::json& id);
  bool recently_finished(const nlohmann::json& id) const;
  // Removes the queued generations with this id (all of them for nullptr); mutex_ held.
  std::vector<Job> take_queued_generations(const nlohmann::json* id);
  nlohmann::json stats_message();

  void work();
  // Each returns the request's final message; work() sends it once the state is updated.
  nlohmann::json run_load(const Job& job);
  nlohmann::json run_generate(const Job& job);
  nlohmann::json run_unload(const Job& job);
  void forget_model();

  MessageWriter out_;
  int in_fd_;

  std::mutex mutex_;  // guards everything below up to the worker's own state
  std::condition_variable wake_;
  std::deque<Job> queue_;
  size_t queued_generations_ = 0;
  std::deque<nlohmann::json> finished_;  // the last kRecentlyFinished generation ids, oldest first
  std::shared_ptr<const Job> running_;
  bool closing_ = false;
  int loads_pending_ = 0;  // queued or running
  std::string model_, backend_;
  int kv_tokens_ = 0, context_length_ = 0;
  int64_t requests_ = 0, tokens_generated_ = 0;

  std::unique_ptr<Session> session_;  // the worker's alone
  std::thread worker_;
};

}  // namespace runahead

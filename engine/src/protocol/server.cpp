#include "protocol/server.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "protocol/line_reader.h"
#include "protocol/messages.h"

namespace runahead {

namespace {

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

EngineError internal_error(const std::exception& e) {
  return EngineError("internal", std::string("internal error: ") + e.what());
}

// Gives the memory of freed prompts back to the system once nothing is queued: glibc keeps
// freed heap otherwise, and cancelled megabyte prompts would stay in the RSS.
void release_free_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

Server::Server(int in_fd, int out_fd) : out_(out_fd), in_fd_(in_fd) {}

int Server::run() {
  worker_ = std::thread(&Server::work, this);
  LineReader reader(in_fd_, kMaxLineBytes);
  std::string line;
  bool shutdown = false;
  while (!shutdown && !out_.broken()) {
    const LineReader::Status status = reader.next(line);
    if (status == LineReader::Status::Eof) break;
    if (status == LineReader::Status::TooLong) {
      out_.write(error_message(EngineError("line_too_long",
                                           "line longer than " + std::to_string(kMaxLineBytes) + " bytes, skipped",
                                           {}, {}, "at most " + std::to_string(kMaxLineBytes) + " bytes per line"),
                               nullptr));
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      Request request = parse_request(line);
      shutdown = request.type == RequestType::Shutdown;
      dispatch(std::move(request));
    } catch (const RequestError& e) {
      out_.write(error_message(e, e.id));
    } catch (const std::exception& e) {
      out_.write(error_message(internal_error(e), nullptr));
    }
  }
  // Shutdown, or a client that stopped reading, cancels; end of input lets queued work finish.
  if (shutdown || out_.broken()) cancel_all();
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  worker_.join();
  out_.write({{"type", "bye"}});
  return 0;
}

void Server::dispatch(Request request) {
  switch (request.type) {
    case RequestType::Hello:
      out_.write(hello_message());
      return;
    case RequestType::Ping: {
      nlohmann::json pong = {{"type", "pong"}};
      if (!request.id.is_null()) pong["id"] = request.id;
      out_.write(pong);
      return;
    }
    case RequestType::Stats:
      out_.write(stats_message());
      return;
    case RequestType::Cancel:
      cancel(request.id);
      return;
    case RequestType::Shutdown:
      return;  // run() ends the loop
    case RequestType::Load:
    case RequestType::Generate:
    case RequestType::Unload:
      enqueue(std::move(request));
      return;
  }
}

void Server::enqueue(Request request) {
  {
    std::lock_guard lock(mutex_);
    if (request.type == RequestType::Load) {
      if (loads_pending_ > 0) {
        out_.write(error_message(
            EngineError("busy", "a load is already running or queued; wait for its loaded or error message", {}, {},
                        "one load at a time"),
            request.id));
        return;
      }
      ++loads_pending_;
    }
    if (request.type == RequestType::Generate) {
      ++requests_;
      if (const auto refused = refuse_generation(std::get<GenerateRequest>(request.body))) {
        out_.write(error_message(*refused, request.id));
        finished(request.id);
        return;
      }
      ++queued_generations_;
    }
    queue_.push_back(Job{std::move(request)});
  }
  wake_.notify_one();
}

std::optional<EngineError> Server::refuse_generation(const GenerateRequest& request) const {
  if (queued_generations_ >= kMaxQueuedGenerations)
    return EngineError("queue_full",
                       "generate: " + std::to_string(queued_generations_) +
                           " generations are already queued; cancel one or wait for its done",
                       {}, {}, "at most " + std::to_string(kMaxQueuedGenerations) + " queued generations");
  // Checked again when it runs; refusing now keeps a prompt that cannot run out of the queue.
  if (!model_.empty() && loads_pending_ == 0 && int64_t(request.prompt.size()) > context_length_)
    return EngineError("context_overflow",
                       "prompt: " + std::to_string(request.prompt.size()) + " tokens do not fit the context of " +
                           std::to_string(context_length_),
                       {}, "prompt", "at most " + std::to_string(context_length_) + " tokens");
  return std::nullopt;
}

void Server::finished(const nlohmann::json& id) {
  finished_.push_back(id);
  if (finished_.size() > kRecentlyFinished) finished_.pop_front();
}

bool Server::recently_finished(const nlohmann::json& id) const {
  return std::find(finished_.begin(), finished_.end(), id) != finished_.end();
}

void Server::send_cancelled(const Job& job) {
  GenerateStats stats;
  stats.prompt_tokens = static_cast<int>(std::get<GenerateRequest>(job.request.body).prompt.size());
  out_.write(done_message(job.request.id, FinishReason::Cancelled, stats));
}

std::vector<Server::Job> Server::take_queued_generations(const nlohmann::json* id) {
  std::vector<Job> taken;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->request.type == RequestType::Generate && (!id || it->request.id == *id)) {
      finished(it->request.id);
      --queued_generations_;
      taken.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

void Server::cancel(const nlohmann::json& id) {
  std::vector<Job> removed;
  bool found = false, ended = false, idle = false;
  {
    std::lock_guard lock(mutex_);
    ended = recently_finished(id);  // before taking: those taken now are recorded as ended too
    removed = take_queued_generations(&id);
    if (running_ && running_->request.type == RequestType::Generate && running_->request.id == id) {
      running_->cancel->store(true);
      found = true;
    }
    idle = queue_.empty();
  }
  for (const Job& job : removed) send_cancelled(job);
  const bool took = !removed.empty();
  if (took && idle) {
    removed.clear();
    release_free_memory();
  }
  // A cancel that crossed the generation's final message on the way is no error.
  if (!found && !took && !ended)
    out_.write(error_message(EngineError("unknown_request", "cancel: no generation " + id.dump() +
                                                                " is running or queued",
                                         {}, "id", "the id of a running or queued generate"),
                             id));
}

void Server::cancel_all() {
  std::vector<Job> removed;
  {
    std::lock_guard lock(mutex_);
    removed = take_queued_generations(nullptr);
    if (running_) running_->cancel->store(true);
  }
  for (const Job& job : removed) send_cancelled(job);
}

nlohmann::json Server::stats_message() {
  std::lock_guard lock(mutex_);
  nlohmann::json m = {{"type", "stats"},
                      {"loaded", !model_.empty()},
                      {"model", model_.empty() ? nlohmann::json() : nlohmann::json(model_)},
                      {"backend", backend_.empty() ? nlohmann::json() : nlohmann::json(backend_)},
                      {"kv_tokens", kv_tokens_},
                      {"context_length", context_length_},
                      {"rss_bytes", rss_bytes()},
                      {"requests", requests_},
                      {"tokens_generated", tokens_generated_},
                      {"busy", running_ != nullptr}};
  return m;
}

void Server::work() {
  for (;;) {
    std::shared_ptr<const Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::make_shared<const Job>(std::move(queue_.front()));
      queue_.pop_front();
      if (job->request.type == RequestType::Generate) --queued_generations_;
      running_ = job;
    }
    // The final message goes out only after the state is updated, so a client that
    // reacts to it at once (a new load, a stats request) sees the request as finished.
    nlohmann::json final;
    bool idle = false;
    try {
      switch (job->request.type) {
        case RequestType::Load: final = run_load(*job); break;
        case RequestType::Generate: final = run_generate(*job); break;
        case RequestType::Unload: final = run_unload(*job); break;
        default: break;  // the reader answers the others
      }
    } catch (const EngineError& e) {
      final = error_message(e, job->request.id);
      // A generation fails with model_error only when a weight file changed under it: that
      // model cannot be trusted any more, and the client reloads it.
      if (job->request.type == RequestType::Generate && e.code == "model_error") forget_model();
    } catch (const std::exception& e) {
      final = error_message(internal_error(e), job->request.id);
    }
    {
      std::lock_guard lock(mutex_);
      if (job->request.type == RequestType::Load) --loads_pending_;
      if (job->request.type == RequestType::Generate) finished(job->request.id);
      if (session_) {
        kv_tokens_ = static_cast<int>(session_->generator().cached_tokens().size());
        context_length_ = session_->backend().context_length();
      }
      running_.reset();
      idle = queue_.empty();
    }
    if (!final.is_null()) out_.write(final);
    job.reset();
    if (idle) release_free_memory();
  }
}

nlohmann::json Server::run_load(const Job& job) {
  const auto& load = std::get<LoadRequest>(job.request.body);
  forget_model();  // the old model goes first so two never share memory; a failed load leaves none
  std::string last_stage;
  auto last_sent = std::chrono::steady_clock::now();
  const ProgressFn progress = [&](const std::string& stage, int64_t done, int64_t total) {
    // At most ten a second, but always a stage's first and last.
    const auto now = std::chrono::steady_clock::now();
    if (stage == last_stage && done != total && now - last_sent < std::chrono::milliseconds(100)) return;
    last_stage = stage;
    last_sent = now;
    out_.write({{"type", "load_progress"}, {"id", job.request.id}, {"stage", stage}, {"done", done}, {"total", total}});
  };
  std::unique_ptr<Session> session = Session::open(load.model, load.options, progress);
  nlohmann::json loaded = {{"type", "loaded"}, {"id", job.request.id}, {"report", session->report()}};
  std::lock_guard lock(mutex_);
  session_ = std::move(session);
  model_ = load.model;
  backend_ = session_->backend().name();
  return loaded;
}

nlohmann::json Server::run_generate(const Job& job) {
  if (!session_)
    throw EngineError("not_loaded", "generate: no model is loaded; send a load request first", {}, {},
                      "a loaded model");
  const auto& request = std::get<GenerateRequest>(job.request.body);
  std::atomic<bool>& cancel = *job.cancel;
  const TokenSink sink = [&](std::span<const int32_t> tokens, std::span<const double> ms) {
    if (!out_.write(tokens_message(job.request.id, tokens, ms))) cancel.store(true);  // nobody reads
  };
  const GenerateResult result = session_->generator().generate(request, sink, cancel);
  std::lock_guard lock(mutex_);
  tokens_generated_ += result.stats.tokens;
  return done_message(job.request.id, result.finish, result.stats);
}

void Server::forget_model() {
  std::lock_guard lock(mutex_);
  session_.reset();
  model_.clear();
  backend_.clear();
  kv_tokens_ = context_length_ = 0;
}

nlohmann::json Server::run_unload(const Job& job) {
  forget_model();
  return {{"type", "unloaded"}, {"id", job.request.id}};
}

}  // namespace runahead

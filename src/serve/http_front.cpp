// The HTTP front end of `dayzero serve` on the first rank of each replica (cpp-httplib): /health, /v1/models,
// /metrics, /v1/completions and /v1/chat/completions, their JSON errors, and server-sent events.
// A handler thread submits a Request to the queue and waits for the serve loop to fill it in.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "serve/image_input.h"
#include "serve/service.h"

namespace dayzero::serve {
namespace {

// How long stop_http() waits for the open streams' last events.
constexpr std::chrono::seconds kLastEventWait{2};

using nlohmann::json;

// Generated text may hold bytes that are not UTF-8 (a byte-level token): replaced, never thrown on.
std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* endpoint_name(Endpoint e) { return e == Endpoint::kChat ? "chat_completions" : "completions"; }

json choice_json(Endpoint e, const std::string& text, const std::string& finish, const std::vector<int32_t>& ids) {
  json c = {{"index", 0}, {"finish_reason", finish.empty() ? json() : json(finish)}};
  if (e == Endpoint::kChat) {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    c["text"] = text;
    c["logprobs"] = nullptr;
  }
  c["token_ids"] = ids;  // an extension: the generated ids as `dayzero run` records them
  return c;
}

json chunk_json(Endpoint e, const std::string& id, int64_t created, const std::string& model, const std::string& delta,
                const std::string& finish, bool first) {
  json c = {{"index", 0}, {"finish_reason", finish.empty() ? json() : json(finish)}};
  if (e == Endpoint::kChat) {
    c["delta"] = json::object();
    if (first) c["delta"]["role"] = "assistant";
    if (!delta.empty() || finish.empty()) c["delta"]["content"] = delta;
  } else {
    c["text"] = delta;
    c["logprobs"] = nullptr;
  }
  return {{"id", id},
          {"object", e == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({c})}};
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

ApiError fault_error(Fault f, double timeout_s) {
  if (f == Fault::kTimeout)
    return {504, "", "the request did not finish within serve.request_timeout_s (" + seconds_text(timeout_s) + " s)"};
  return {503, "", "the server is shutting down"};
}

}  // namespace

Service::Service(std::optional<int> port_override) : port_override_(port_override) {}
Service::~Service() { stop_http(); }

void Service::on_phase(const std::string& phase) {
  std::lock_guard lock(phase_mu_);
  phase_ = phase;
}

void Service::on_abort() {
  state_ = State::kFailed;
  queue_.start_drain();
}

void Service::stop_http() {
  // The library's chunked writer (as its source reads) stops once the server stops listening, and the
  // stream of a request the loop has just ended still has its last event (the finish or the error) to
  // write: let the open streams finish first, bounded so that a client that stopped reading cannot
  // hold the job. Not after an abort: its requests are never ended, so their streams have no last event.
  const auto until = std::chrono::steady_clock::now() + kLastEventWait;
  while (state_ != State::kFailed && open_streams_.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
}

Status Service::listen(const config::RunConfig& cfg, int world_rank, int world_size) {
  // The replicas as serve plans them (parallel.dp, else 1); replica r is world ranks r * size ..
  // (r + 1) * size - 1 (the plan's rank order). A dp that does not divide the world fails the plan
  // phase; until then world rank 0 alone listens.
  replicas_ = std::max(1, cfg.parallel.dp.value_or(1));
  const int size = world_size % replicas_ == 0 ? world_size / replicas_ : world_size;
  if (world_rank % size != 0) return Status::Ok();
  listener_ = true;
  replica_ = world_rank / size;
  next_id_ = replica_ + 1;
  metrics_.set_replica(replica_, replicas_);
  serve_cfg_ = cfg.serve;
  source_name_ = cfg.source_name;
  model_id_ = std::filesystem::path(cfg.model.path).lexically_normal().filename().string();
  if (model_id_.empty()) model_id_ = std::filesystem::path(cfg.model.path).parent_path().filename().string();
  http_ = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(serve_cfg_.http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(static_cast<size_t>(serve_cfg_.max_body_bytes));
  http_->set_keep_alive_timeout(2);
  add_routes();
  // The library listens with a backlog of 5: a burst of clients (the bench's 64) overflows it and
  // connections are reset. Listening again on the same socket raises it to the system's maximum.
  auto listen_fd = std::make_shared<int>(-1);
  http_->set_socket_options([listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    *listen_fd = sock;
  });
  const int port = port_override_.value_or(serve_cfg_.port) + replica_;
  const std::string which = replicas_ > 1 ? "replica " + std::to_string(replica_) + " " : "";
  if (port > 65535)
    return Status::InvalidArgument(source_name_ + ": serve.port: " + which + "would listen on port " + std::to_string(port) +
                                   " (serve.port + replica), past 65535");
  if (!http_->bind_to_port(serve_cfg_.host, port) || *listen_fd < 0 || ::listen(*listen_fd, SOMAXCONN) != 0)
    return Status::InvalidArgument(source_name_ + ": serve.port: " + which + "cannot listen on " + serve_cfg_.host + ":" +
                                   std::to_string(port) + " (the port is in use or the address is not this machine's)");
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  std::ostringstream line;  // one write, so that the replicas' lines do not interleave
  line << "serve: listening on http://" << serve_cfg_.host << ":" << port << " (";
  if (replicas_ > 1) line << "replica " << replica_ << " of " << replicas_ << "; ";
  line << "GET /health answers 503 until the warm-up is done; pid " << getpid() << ")\n";
  std::cout << line.str() << std::flush;
  return Status::Ok();
}

void Service::answer_error(httplib::Response& res, const std::string& endpoint, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(e.to_json()), "application/json");
  metrics_.request_done(endpoint, e.status);
}

void Service::add_routes() {
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const State s = state_;
    json j;
    if (s == State::kReady) {
      j = {{"status", "ok"}};
      res.status = 200;
    } else {
      std::lock_guard lock(phase_mu_);
      j = {{"status", s == State::kStarting ? "starting" : s == State::kDraining ? "draining" : "failed"}, {"phase", phase_}};
      res.status = 503;
    }
    res.set_content(j.dump(), "application/json");
    metrics_.request_done("health", res.status);
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json j = {{"object", "list"},
                    {"data", json::array({{{"id", model_id_}, {"object", "model"}, {"created", 0}, {"owned_by", "dayzero"}}})}};
    res.set_content(j.dump(), "application/json");
    metrics_.request_done("models", 200);
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics_.set_queue_depth(static_cast<int64_t>(queue_.depth()));
    res.set_content(metrics_.render(), "text/plain; version=0.0.4");
  });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kCompletions, req, res);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kChat, req, res);
  });
  // Whatever httplib answers by itself (no route, a body over max_body_bytes) still gets a JSON error.
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, "", "no such endpoint: " + req.method + " " + req.path};
    if (res.status == 413)
      e = {413, "body", "body: over serve.max_body_bytes (" + std::to_string(serve_cfg_.max_body_bytes) + " bytes)"};
    else if (res.status != 404)
      e.message = "the request could not be read (HTTP " + std::to_string(res.status) + ")";
    answer_error(res, "other", e);
  });
}

bool Service::tokenize(const ApiRequest& api, Request& r, ApiError* err) {
  const char* field = api.endpoint == Endpoint::kChat ? "messages" : "prompt";
  {
    std::lock_guard lock(tok_mu_);
    if (api.endpoint == Endpoint::kChat) {
      if (!chat_template_) {
        *err = {400, "messages", "messages: chat completions are not served: " + chat_template_error_};
        return false;
      }
      json msgs = json::array();
      for (const ChatMessage& m : api.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
      const json vars = {{"messages", msgs}, {"add_generation_prompt", true}, {"bos_token", bos_token_},
                         {"eos_token", eos_token_}};
      Result<std::string> text = chat_template_->render(vars);
      if (!text.ok()) {
        *err = {400, "messages", "messages: the chat template refused them: " + text.status().message()};
        return false;
      }
      r.prompt_ids = tok_->encode(*text, false);  // the template writes the special tokens itself
      std::vector<image::ProcessedImage> images;
      for (const auto& [param, url] : api.images) {
        Result<std::string> bytes = image_url_bytes(url, serve_cfg_.image_dir.value_or(""));
        Result<image::ProcessedImage> img =
            bytes.ok() ? process_image_bytes(*processor_, vision_, *bytes, param, max_image_pixels_) : bytes.status();
        if (!img.ok()) {
          *err = {400, param, param + ": " + img.status().message()};
          return false;
        }
        r.image_bytes.push_back(std::move(*bytes));
        images.push_back(std::move(*img));
      }
      Result<std::vector<int32_t>> expanded = expand_images(r.prompt_ids, vision_, images);
      if (!expanded.ok()) {
        *err = {400, "messages", "messages: the rendered chat does not place the images: " + expanded.status().message()};
        return false;
      }
      r.prompt_ids = std::move(*expanded);
    } else if (api.prompt_ids) {
      r.prompt_ids = *api.prompt_ids;
      for (size_t i = 0; i < r.prompt_ids.size(); ++i)
        if (r.prompt_ids[i] >= tok_->vocab_size()) {
          *err = {400, "prompt[" + std::to_string(i) + "]", "prompt[" + std::to_string(i) + "]: token id " +
                                                                std::to_string(r.prompt_ids[i]) + " is past the vocabulary (" +
                                                                std::to_string(tok_->vocab_size()) + ")"};
          return false;
        }
    } else {
      r.prompt_ids = tok_->encode(*api.prompt_text, true);  // as `dayzero run` encodes a prompt's text
    }
  }
  const auto n_prompt = static_cast<int64_t>(r.prompt_ids.size());
  if (n_prompt == 0) {
    *err = {400, field, std::string(field) + ": no tokens"};
    return false;
  }
  r.max_tokens = api.max_tokens.value_or(default_max_tokens_);
  const int64_t total = n_prompt + r.max_tokens;
  const bool prompt_alone = n_prompt >= serve_cfg_.max_request_tokens || (context_ > 0 && n_prompt >= context_);
  const std::string what = prompt_alone ? std::string(field) : "max_tokens";
  if (total > serve_cfg_.max_request_tokens) {
    *err = {400, what, what + ": " + std::to_string(n_prompt) + " prompt tokens + max_tokens " + std::to_string(r.max_tokens) +
                           " is more than serve.max_request_tokens (" + std::to_string(serve_cfg_.max_request_tokens) + ")"};
    return false;
  }
  if (context_ > 0 && total > context_) {
    *err = {400, what, what + ": " + std::to_string(n_prompt) + " prompt tokens + max_tokens " + std::to_string(r.max_tokens) +
                           " is more than the model's context (" + std::to_string(context_) + ")"};
    return false;
  }
  return true;
}

void Service::handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const std::string ep = endpoint_name(endpoint);
  const State s = state_;
  if (s != State::kReady) {
    answer_error(res, ep, {503, "", s == State::kStarting ? "the model is not ready yet (GET /health)" : "the server is shutting down"});
    return;
  }
  ApiRequest api;
  ApiError err;
  if (!parse_request(endpoint, req.body, model_id_, image_placeholder_, &api, &err)) return answer_error(res, ep, err);
  auto r = std::make_shared<Request>();
  r->id = next_id_.fetch_add(replicas_);
  r->endpoint = endpoint;
  r->stream = api.stream;
  r->stop = api.stop;
  r->temperature = api.temperature;
  r->top_p = api.top_p;
  r->seed = api.seed.value_or(static_cast<uint64_t>(r->id));
  if (!tokenize(api, *r, &err)) return answer_error(res, ep, err);
  r->arrived_ns = monotonic_ns();
  r->deadline_ns = r->arrived_ns + static_cast<int64_t>(serve_cfg_.request_timeout_s * 1e9);
  metrics_.prompt_tokens(static_cast<int64_t>(r->prompt_ids.size()));
  if (!queue_.push(r)) return answer_error(res, ep, {503, "", "the server is shutting down"});
  const std::string id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(r->id);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  // A request still queued at its deadline is taken out here; one in a batch is ended by the loop.
  const auto wait_step = [this](const std::shared_ptr<Request>& rq, std::unique_lock<std::mutex>& lock, size_t seen) {
    const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(rq->deadline_ns));
    rq->cv.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)),
                      [&] { return rq->done || rq->text.size() > seen; });
    if (!rq->done && monotonic_ns() >= rq->deadline_ns && queue_.remove(rq)) {
      rq->done = true;
      rq->fault = Fault::kTimeout;
    }
  };
  if (!r->stream) {
    std::unique_lock lock(r->mu);
    while (!r->done) wait_step(r, lock, r->text.size());
    if (r->fault != Fault::kNone) {
      const ApiError e = fault_error(r->fault, serve_cfg_.request_timeout_s);
      lock.unlock();
      return answer_error(res, ep, e);
    }
    const json body = {{"id", id},
                       {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
                       {"created", created},
                       {"model", model_id_},
                       {"choices", json::array({choice_json(endpoint, r->text, r->finish_reason, r->generated)})},
                       {"usage", {{"prompt_tokens", r->prompt_ids.size()}, {"completion_tokens", r->generated.size()},
                                  {"total_tokens", r->prompt_ids.size() + r->generated.size()}}}};
    lock.unlock();
    res.set_content(dump_json(body), "application/json");
    metrics_.request_done(ep, 200);
    return;
  }
  metrics_.request_done(ep, 200);
  res.set_header("Cache-Control", "no-cache");
  auto sent = std::make_shared<size_t>(0);
  auto first = std::make_shared<bool>(true);
  open_streams_.fetch_add(1);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, r, sent, first, id, created, endpoint, wait_step](size_t, httplib::DataSink& sink) {
        if (!sink.is_writable()) {
          r->client_gone = true;  // the loop ends it at the next step and frees its slot
          return false;
        }
        std::unique_lock lock(r->mu);
        wait_step(r, lock, *sent);
        std::string out;
        if (r->text.size() > *sent || (*first && r->done && r->fault == Fault::kNone)) {
          out += "data: " + dump_json(chunk_json(endpoint, id, created, model_id_, r->text.substr(*sent), "", *first)) + "\n\n";
          *sent = r->text.size();
          *first = false;
        }
        const bool done = r->done;
        const Fault fault = r->fault;
        const std::string finish = r->finish_reason;
        lock.unlock();
        if (done && fault == Fault::kNone)
          out += "data: " + dump_json(chunk_json(endpoint, id, created, model_id_, "", finish, false)) + "\n\ndata: [DONE]\n\n";
        else if (done)
          out += "data: " + fault_error(fault, serve_cfg_.request_timeout_s).to_json().dump() + "\n\n";
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          r->client_gone = true;  // the loop ends it at the next step and frees its slot
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [this](bool) { open_streams_.fetch_sub(1); });
}

}  // namespace dayzero::serve

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

json choice_json(Endpoint e, size_t index, const std::string& text, const std::string& finish,
                 const std::vector<int32_t>& ids) {
  json c = {{"index", index}, {"finish_reason", finish.empty() ? json() : json(finish)}};
  if (e == Endpoint::kChat) {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    c["text"] = text;
    c["logprobs"] = nullptr;
  }
  c["token_ids"] = ids;  // an extension: the generated ids as `dayzero run` records them
  return c;
}

json usage_json(int64_t prompt, int64_t completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

json chunk_json(Endpoint e, const std::string& id, int64_t created, const std::string& model, const std::string& delta,
                const std::string& finish, bool first, bool include_usage) {
  json c = {{"index", 0}, {"finish_reason", finish.empty() ? json() : json(finish)}};
  if (e == Endpoint::kChat) {
    c["delta"] = json::object();
    if (first) c["delta"]["role"] = "assistant";
    if (!delta.empty() || finish.empty()) c["delta"]["content"] = delta;
  } else {
    c["text"] = delta;
    c["logprobs"] = nullptr;
  }
  json j = {{"id", id},
            {"object", e == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({c})}};
  if (include_usage) j["usage"] = nullptr;  // as OpenAI: null on every chunk but the last
  return j;
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
    json model = {{"id", model_id_}, {"object", "model"}, {"created", 0}, {"owned_by", "dayzero"}};
    // As vLLM: the longest request (prompt + completion) served, which clients size requests by.
    if (state_ != State::kStarting)
      model["max_model_len"] = context_ > 0 ? std::min(context_, serve_cfg_.max_request_tokens) : serve_cfg_.max_request_tokens;
    const json j = {{"object", "list"}, {"data", json::array({model})}};
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

bool Service::tokenize(const ApiRequest& api, const PromptInput* prompt, Request& r, ApiError* err) {
  const std::string field = prompt ? prompt->param : "messages";
  {
    std::lock_guard lock(tok_mu_);
    if (api.endpoint == Endpoint::kChat) {
      if (!chat_template_) {
        *err = {400, "messages", "messages: chat completions are not served: " + chat_template_error_};
        return false;
      }
      using ojson = nlohmann::ordered_json;
      ojson msgs = ojson::array();
      for (const ChatMessage& m : api.messages) {
        // Content as the template reads it: parts for a template that loops over them, else text.
        ojson msg = {{"role", m.role},
                     {"content", m.content_null ? ojson() : chat_template_->reads_content_parts() ? m.parts : ojson(m.content)}};
        for (const auto& [k, v] : m.extra.items()) msg[k] = v;
        msgs.push_back(std::move(msg));
      }
      // As apply_chat_template: the tokenizer's special tokens, then the caller's variables over them.
      ojson vars = chat::special_token_vars(*tok_);
      vars["add_generation_prompt"] = true;
      for (const auto& [k, v] : api.chat_template_kwargs.items()) vars[k] = v;
      vars["messages"] = std::move(msgs);
      if (!api.tools.is_null()) vars["tools"] = api.tools;
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
    } else if (prompt->ids) {
      r.prompt_ids = *prompt->ids;
      for (size_t i = 0; i < r.prompt_ids.size(); ++i)
        if (r.prompt_ids[i] >= tok_->vocab_size()) {
          const std::string p = field + "[" + std::to_string(i) + "]";
          *err = {400, p, p + ": token id " + std::to_string(r.prompt_ids[i]) + " is past the vocabulary (" +
                              std::to_string(tok_->vocab_size()) + ")"};
          return false;
        }
    } else {
      r.prompt_ids = tok_->encode(*prompt->text, true);  // as `dayzero run` encodes a prompt's text
    }
    if (r.echo) r.prompt_text = prompt && prompt->text ? *prompt->text : tok_->decode(r.prompt_ids, false);
  }
  const auto n_prompt = static_cast<int64_t>(r.prompt_ids.size());
  if (n_prompt == 0) {
    *err = {400, field, std::string(field) + ": no tokens"};
    return false;
  }
  r.max_tokens = api.max_tokens.value_or(default_max_tokens_);
  const int64_t total = n_prompt + r.max_tokens;
  // The request's limit is the smaller of the server's and the model's; past it, OpenAI's code and
  // message shape (clients match on context_length_exceeded), naming which limit it is.
  const bool server_limit = context_ <= 0 || serve_cfg_.max_request_tokens < context_;
  const int64_t limit = server_limit ? serve_cfg_.max_request_tokens : context_;
  if (total > limit) {
    const std::string what = n_prompt >= limit ? field : "max_tokens";
    *err = {400, what,
            what + ": this model's maximum context length is " + std::to_string(limit) + " tokens" +
                (server_limit ? " (serve.max_request_tokens)" : " (the model's context)") + ", but " +
                std::to_string(total) + " tokens were requested (" + std::to_string(n_prompt) + " in the prompt, " +
                std::to_string(r.max_tokens) + " for the completion)",
            "context_length_exceeded"};
    return false;
  }
  return true;
}

json Service::logprobs_json(const Request& r) {
  std::lock_guard lock(tok_mu_);
  const auto piece = [&](int32_t id) { return tok_->decode(std::span<const int32_t>(&id, 1), false); };
  if (r.endpoint == Endpoint::kChat) {
    // OpenAI's chat shape: per generated token its text, log-probability, UTF-8 bytes and alternatives.
    const auto entry = [&](int32_t id, double lp) {
      const std::string t = piece(id);
      std::vector<int> bytes;
      for (unsigned char c : t) bytes.push_back(c);
      return json{{"token", t}, {"logprob", lp}, {"bytes", bytes}};
    };
    json content = json::array();
    for (size_t i = 0; i < r.generated_logprobs.size() && i < r.generated.size(); ++i) {
      const TokenLogprob& lp = r.generated_logprobs[i];
      json e = entry(r.generated[i], lp.logprob);
      json top = json::array();
      for (size_t k = 0; k < lp.top_ids.size(); ++k) top.push_back(entry(lp.top_ids[k], lp.top_logprobs[k]));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}};
  }
  // The legacy completions shape (as vLLM gives it): tokens, token_logprobs, top_logprobs (the k
  // most likely and the chosen token), text_offset; with echo the prompt's tokens first, the first
  // of them with null (nothing precedes it).
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t offset = 0;
  const auto add = [&](int32_t id, const TokenLogprob* lp) {
    const std::string t = piece(id);
    tokens.push_back(t);
    offsets.push_back(offset);
    for (unsigned char c : t) offset += (c & 0xC0) != 0x80;  // characters, as Python counts them
    if (!lp) {
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    token_lps.push_back(lp->logprob);
    json top = json::object();
    for (size_t k = 0; k < lp->top_ids.size(); ++k) top[piece(lp->top_ids[k])] = lp->top_logprobs[k];
    top[t] = lp->logprob;
    tops.push_back(std::move(top));
  };
  if (r.echo)
    for (size_t p = 0; p < r.prompt_ids.size(); ++p)
      add(r.prompt_ids[p], p == 0 || p - 1 >= r.prompt_logprobs.size() ? nullptr : &r.prompt_logprobs[p - 1]);
  for (size_t i = 0; i < r.generated.size() && i < r.generated_logprobs.size(); ++i) add(r.generated[i], &r.generated_logprobs[i]);
  return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_lps)}, {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
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
  // One request per prompt (chat: one), decoded as any others: they may share a batch.
  const size_t n_choices = endpoint == Endpoint::kChat ? 1 : api.prompts.size();
  if (api.stream && n_choices > 1)
    return answer_error(res, ep, {400, "stream", "stream: a stream serves one prompt; send a list of prompts without it"});
  std::vector<std::shared_ptr<Request>> rs;
  for (size_t i = 0; i < n_choices; ++i) {
    auto r = std::make_shared<Request>();
    r->id = next_id_.fetch_add(replicas_);
    r->endpoint = endpoint;
    r->stream = api.stream;
    r->stop = api.stop;
    r->sampling = api.sampling;
    r->ignore_eos = api.ignore_eos;
    r->logprobs = api.logprobs;
    r->echo = api.echo;
    if (!api.seed_given) r->sampling.seed = static_cast<uint64_t>(r->id);
    if (!tokenize(api, endpoint == Endpoint::kChat ? nullptr : &api.prompts[i], *r, &err)) return answer_error(res, ep, err);
    for (const auto& [token, _] : r->sampling.logit_bias)
      if (token >= tok_->vocab_size()) {
        const std::string p = "logit_bias." + std::to_string(token);
        return answer_error(res, ep, {400, p, p + ": the token id is past the vocabulary (" +
                                                  std::to_string(tok_->vocab_size()) + ")"});
      }
    r->arrived_ns = monotonic_ns();
    r->deadline_ns = r->arrived_ns + static_cast<int64_t>(serve_cfg_.request_timeout_s * 1e9);
    rs.push_back(std::move(r));
  }
  switch (queue_.push(rs, static_cast<size_t>(serve_cfg_.max_queue))) {
    case RequestQueue::Push::kQueued: break;
    case RequestQueue::Push::kDraining: return answer_error(res, ep, {503, "", "the server is shutting down"});
    case RequestQueue::Push::kFull:
      return answer_error(res, ep, {429, "", "the queue is full (serve.max_queue " + std::to_string(serve_cfg_.max_queue) +
                                                 " requests waiting); retry later"});
  }
  for (const auto& r : rs) metrics_.prompt_tokens(static_cast<int64_t>(r->prompt_ids.size()));
  const std::shared_ptr<Request> r = rs[0];
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
    json choices = json::array();
    int64_t n_prompt = 0, n_generated = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      Request& q = *rs[i];
      std::unique_lock lock(q.mu);
      while (!q.done) wait_step(rs[i], lock, q.text.size());
      if (q.fault != Fault::kNone) {
        const ApiError e = fault_error(q.fault, serve_cfg_.request_timeout_s);
        lock.unlock();
        for (const auto& other : rs) other->client_gone = true;  // nobody reads the others' answers
        return answer_error(res, ep, e);
      }
      json choice = choice_json(endpoint, i, q.echo ? q.prompt_text + q.text : q.text, q.finish_reason, q.generated);
      if (q.logprobs >= 0) choice["logprobs"] = logprobs_json(q);
      choices.push_back(std::move(choice));
      n_prompt += static_cast<int64_t>(q.prompt_ids.size());
      n_generated += static_cast<int64_t>(q.generated.size());
    }
    const json body = {{"id", id},
                       {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
                       {"created", created},
                       {"model", model_id_},
                       {"choices", std::move(choices)},
                       {"usage", usage_json(n_prompt, n_generated)}};
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
      [this, r, sent, first, id, created, endpoint, wait_step, usage = api.include_usage](size_t, httplib::DataSink& sink) {
        if (!sink.is_writable()) {
          r->client_gone = true;  // the loop ends it at the next step and frees its slot
          return false;
        }
        std::unique_lock lock(r->mu);
        wait_step(r, lock, *sent);
        std::string out;
        if (r->text.size() > *sent || (*first && r->done && r->fault == Fault::kNone)) {
          out += "data: " +
                 dump_json(chunk_json(endpoint, id, created, model_id_, r->text.substr(*sent), "", *first, usage)) + "\n\n";
          *sent = r->text.size();
          *first = false;
        }
        const bool done = r->done;
        const Fault fault = r->fault;
        const std::string finish = r->finish_reason;
        const auto n_prompt = static_cast<int64_t>(r->prompt_ids.size());
        const auto n_generated = static_cast<int64_t>(r->generated.size());
        lock.unlock();
        if (done && fault == Fault::kNone) {
          out += "data: " + dump_json(chunk_json(endpoint, id, created, model_id_, "", finish, false, usage)) + "\n\n";
          if (usage) {  // stream_options.include_usage: a last chunk with the usage and no choices
            json last = chunk_json(endpoint, id, created, model_id_, "", "", false, true);
            last["choices"] = json::array();
            last["usage"] = usage_json(n_prompt, n_generated);
            out += "data: " + dump_json(last) + "\n\n";
          }
          out += "data: [DONE]\n\n";
        }
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

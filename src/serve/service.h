// `dayzero serve`: the run of `dayzero run` up to its prompts (the warm-up), then the first rank of
// every data-parallel replica answers OpenAI-style HTTP requests on serve.port + replica while the
// replica's ranks decode the batches it broadcasts. This class is the ServeHooks of that run: the
// HTTP front end (http_front.cpp) and the loop over batches (serve_loop.cpp). docs/serve.md is the
// user's side of it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "chat/chat_template.h"
#include "comm/mpi_env.h"
#include "runtime/runner.h"
#include "runtime/serve_hooks.h"
#include "image/processor.h"
#include "model/hparams.h"
#include "serve/metrics.h"
#include "serve/replica_comms.h"
#include "serve/request_queue.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dayzero::serve {

struct ServeArgs {
  runtime::RunArgs run;                 // config path, --dump-dir, --threads
  std::optional<int> port;              // --port: replaces serve.port (replica r listens on it + r)
};

// Collective over MPI_COMM_WORLD. Returns the process exit code (docs/design.md "Errors").
int serve(const comm::MpiEnv& env, const ServeArgs& args);

class Service final : public runtime::ServeHooks {
 public:
  explicit Service(std::optional<int> port_override);
  ~Service() override;

  void on_phase(const std::string& phase) override;
  Status listen(const config::RunConfig& cfg, int world_rank, int world_size) override;
  Status serve(runtime::ServeContext& ctx) override;
  void on_abort() override;

 private:
  enum class State { kStarting, kReady, kDraining, kFailed };
  // http_front.cpp
  void add_routes();
  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // The token ids of one prompt of a completions request (prompt), or of the chat (prompt null),
  // after the chat template or the tokenizer, checked against the limits.
  bool tokenize(const ApiRequest& api, const PromptInput* prompt, Request& r, ApiError* err);
  void answer_error(httplib::Response& res, const std::string& endpoint, const ApiError& e);
  // A finished request's log-probabilities in its endpoint's shape. REQUIRES: r.mu held.
  nlohmann::json logprobs_json(const Request& r);
  void stop_http();
  // serve_loop.cpp (every rank of a replica): one batch prefilled and decoded together, tokens
  // handed to the requests on the replica's first rank as each step produces them. msg: per request
  // [prompt ids, max_tokens, sampling params, images (base64), dump id], as that rank broadcast it.
  void run_batch(runtime::ServeContext& ctx, const std::vector<std::shared_ptr<Request>>& batch,
                 const nlohmann::json& msg);
  // A replica's first rank, main thread: once the job drains (SIGTERM to any rank, decided by world
  // rank 0), refuse new requests (503) and start the drain clock. Other ranks: report their SIGTERM.
  void drain_on_sigterm();
  // A replica's first rank: what one step's token means for request r; true when r ends now.
  bool take_token(Request& r, int32_t token, bool eos, int64_t now_ns);

  std::optional<int> port_override_;
  // Set in listen() (every rank): whether this rank listens (the first of its replica), its
  // replica and the job's replicas, as parallel.dp gives them (serve plans dp = 1 without it).
  bool listener_ = false;
  int replica_ = 0, replicas_ = 1;
  std::unique_ptr<ReplicaComms> comms_;  // the serve phase's: made when it begins
  std::atomic<State> state_{State::kStarting};
  std::mutex phase_mu_;
  std::string phase_ = "starting";
  config::ServeConfig serve_cfg_;  // copied in listen(): the HTTP threads may outlive the run's config
  std::string source_name_;
  std::string model_id_;
  // Set when the serve phase begins (listeners), read by HTTP threads once state_ is kReady.
  const tokenizer::Tokenizer* tok_ = nullptr;
  std::mutex tok_mu_;  // the tokenizer is used by the HTTP threads and the loop
  std::unique_ptr<chat::ChatTemplate> chat_template_;
  // Multimodal models, every rank (set when the serve phase begins): the model's processor.
  std::unique_ptr<image::ImageProcessor> processor_;
  model::VisionParams vision_;
  std::string image_placeholder_;  // listeners: the image token's text; empty when images are refused
  int64_t max_image_pixels_ = 0;
  std::string chat_template_error_;  // why chat completions are refused, when they are
  int64_t context_ = 0;             // the model's context (0: unbounded)
  int default_max_tokens_ = 16;
  std::vector<int32_t> eos_ids_;
  bool stop_at_eos_ = true;
  double drain_s_ = 30;
  int64_t drain_deadline_ns_ = 0;    // set when the drain begins
  // Request numbers (cmpl-N, req-N), unique over the job: replica r numbers r + 1, r + 1 + dp, ...
  std::atomic<int64_t> next_id_{1};
  Status dump_status_;  // the first failed write of a request's dump, returned by serve()
  RequestQueue queue_;
  Metrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  // Streamed responses not yet released by the library: stop_http() lets them write their last event.
  std::atomic<int> open_streams_{0};
};

}  // namespace dayzero::serve

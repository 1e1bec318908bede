// `dayzero serve`: the run of `dayzero run` up to its prompts (the warm-up), then rank 0 answers
// OpenAI-style HTTP requests while every rank decodes the batches rank 0 broadcasts. This class is
// the ServeHooks of that run: the HTTP front end (http_front.cpp) and the loop over batches
// (serve_loop.cpp). docs/serve.md is the user's side of it.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/mpi_env.h"
#include "runtime/runner.h"
#include "runtime/serve_hooks.h"
#include "image/processor.h"
#include "model/hparams.h"
#include "serve/chat_template.h"
#include "serve/metrics.h"
#include "serve/request_queue.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dayzero::serve {

struct ServeArgs {
  runtime::RunArgs run;                 // config path, --dump-dir, --threads
  std::optional<int> port;              // --port: replaces serve.port
};

// Collective over MPI_COMM_WORLD. Returns the process exit code (docs/design.md "Errors").
int serve(const comm::MpiEnv& env, const ServeArgs& args);

class Service final : public runtime::ServeHooks {
 public:
  explicit Service(std::optional<int> port_override);
  ~Service() override;

  void on_phase(const std::string& phase) override;
  Status listen(const config::RunConfig& cfg) override;
  Status serve(runtime::ServeContext& ctx) override;
  void on_abort() override;

 private:
  enum class State { kStarting, kReady, kDraining, kFailed };
  // http_front.cpp
  void add_routes();
  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // The prompt's token ids after the chat template or the tokenizer, checked against the limits.
  bool tokenize(const ApiRequest& api, Request& r, ApiError* err);
  void answer_error(httplib::Response& res, const std::string& endpoint, const ApiError& e);
  void stop_http();
  // serve_loop.cpp (every rank): one batch prefilled and decoded together, tokens handed to the
  // requests on rank 0 as each step produces them. msg: per request [prompt ids, max_tokens,
  // temperature, top_p, seed, images (base64), dump id], as rank 0 broadcast it.
  void run_batch(runtime::ServeContext& ctx, const std::vector<std::shared_ptr<Request>>& batch,
                 const nlohmann::json& msg);
  // Rank 0, main thread: after SIGTERM, refuse new requests (503) and start the drain clock.
  void drain_on_sigterm();
  // Rank 0: what one step's token means for request r; true when r ends now.
  bool take_token(Request& r, int32_t token, bool eos, int64_t now_ns);

  std::optional<int> port_override_;
  std::atomic<State> state_{State::kStarting};
  std::mutex phase_mu_;
  std::string phase_ = "starting";
  config::ServeConfig serve_cfg_;  // copied in listen(): the HTTP threads may outlive the run's config
  std::string source_name_;
  std::string model_id_;
  // Set when the serve phase begins (rank 0), read by HTTP threads once state_ is kReady.
  const tokenizer::Tokenizer* tok_ = nullptr;
  std::mutex tok_mu_;  // the tokenizer is used by the HTTP threads and the loop
  std::unique_ptr<ChatTemplate> chat_template_;
  // Multimodal models, every rank (set when the serve phase begins): the model's processor.
  std::unique_ptr<image::ImageProcessor> processor_;
  model::VisionParams vision_;
  std::string image_placeholder_;  // rank 0: the image token's text; empty when images are refused
  int64_t max_image_pixels_ = 0;
  std::string chat_template_error_;  // why chat completions are refused, when they are
  std::string bos_token_, eos_token_;
  int64_t context_ = 0;             // the model's context (0: unbounded)
  int default_max_tokens_ = 16;
  std::vector<int32_t> eos_ids_;
  bool stop_at_eos_ = true;
  double drain_s_ = 30;
  int64_t drain_deadline_ns_ = 0;    // set when the drain begins
  std::atomic<int64_t> next_id_{1};
  Status dump_status_;  // the first failed write of a request's dump, returned by serve()
  RequestQueue queue_;
  Metrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
};

}  // namespace dayzero::serve

// A request in flight and the queue between the HTTP threads (which submit and wait) and the
// serve loop on rank 0's main thread (which takes batches and fills in tokens). Not HTTP and not
// MPI: the front end (http_front.h) and the loop (serve_loop.h) use it from their sides.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/logprobs.h"
#include "serve/request.h"

namespace dayzero::serve {

// How a request ended when it did not finish: past serve.request_timeout_s (504), the service
// shutting down (503), or the client gone (nothing to answer).
enum class Fault { kNone, kTimeout, kShutdown, kClientGone };

struct Request {
  int64_t id = 0;
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  std::vector<int32_t> prompt_ids;  // [n_prompt]
  int max_tokens = 16;
  std::vector<std::string> stop;
  SamplingParams sampling;  // temperature 0: greedy
  bool ignore_eos = false;  // EOS does not end it
  int logprobs = -1;        // -1: none; else alternatives per token (0..20)
  bool echo = false;        // completions: the prompt (and, with logprobs, its log-probabilities) comes back
  std::string prompt_text;  // what echo shows: the prompt as sent, or its ids decoded
  std::vector<std::string> image_bytes;  // the images' file bytes, in placeholder order
  int64_t arrived_ns = 0;   // monotonic
  int64_t deadline_ns = 0;  // monotonic; arrived + serve.request_timeout_s
  std::atomic<bool> client_gone{false};

  // Written by the serve loop under mu, read by the HTTP thread.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> generated;  // every token generated, EOS included (as `dayzero run` records it)
  std::vector<TokenLogprob> generated_logprobs;  // with logprobs: one per generated token
  std::vector<TokenLogprob> prompt_logprobs;     // with echo and logprobs: prompt tokens 1.. (the first has none)
  std::string text;                // the completion that may be shown: stop string cut, complete UTF-8
  bool done = false;               // finished or faulted: nothing more will come
  std::string finish_reason;       // "stop" | "length" once finished
  Fault fault = Fault::kNone;
  int64_t first_token_ns = 0, last_token_ns = 0;
};

class RequestQueue {
 public:
  enum class Push { kQueued, kDraining, kFull };
  // All of rs, or none: kDraining (the caller answers 503) or kFull, when more than max_queue
  // requests would wait (429).
  Push push(const std::vector<std::shared_ptr<Request>>& rs, size_t max_queue);
  // Removes r if it is still waiting; true when it was.
  bool remove(const std::shared_ptr<Request>& r);
  // Up to n waiting requests, oldest first, waiting at most wait_ms for the first.
  std::vector<std::shared_ptr<Request>> take(size_t n, int wait_ms);
  // From now on push() refuses; returns what was waiting, which the caller ends.
  void start_drain();
  bool draining() const { return draining_; }
  size_t depth() const;
  std::vector<std::shared_ptr<Request>> take_all();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> q_;
  std::atomic<bool> draining_{false};
};

// Ends r with a fault (or as finished when fault is kNone) and wakes its HTTP thread.
void end_request(Request& r, Fault fault);

}  // namespace dayzero::serve

// The serve phase on every rank: each data-parallel replica serves on its own. The replica's first
// rank takes up to generate.max_batch waiting requests, every rank of the replica learns the batch
// (a polled, unwatched wake-up while idle, so waiting for work neither spins nor looks like a hung
// collective; then a watched broadcast), prefills and decodes it together; the first rank hands
// each step's tokens to the requests and decides which leave, which the replica's ranks learn in
// one broadcast per step. New requests join at the next batch. SIGTERM to any rank drains every
// replica (replica_comms.h), and the ranks leave the phase together once every replica has drained.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "comm/comm.h"
#include "comm/mpi_env.h"
#include "core/clock.h"
#include "core/check.h"
#include "core/log.h"
#include "dump/schema.h"
#include "runtime/dump_sink.h"
#include "serve/image_input.h"
#include "serve/sampler.h"
#include "serve/service.h"

namespace dayzero::serve {
namespace {

// How many bytes at the end of s are an incomplete UTF-8 sequence (a token may end mid-character).
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// The last stage's n doubles in *v on every rank of the replica's pipeline (one pp broadcast;
// nothing to do without pp, where every rank is the last stage). Collective over pp.
void share_from_last_stage(runtime::Forward& fwd, size_t n, std::vector<double>* v) {
  comm::Comm* pp = fwd.partition().pp;
  if (!pp) return;
  v->resize(n);
  if (n == 0) return;
  Tensor t = Tensor::host(DType::kF32, {static_cast<int64_t>(2 * n)});  // a double as two floats' bytes
  std::memcpy(t.data(), v->data(), n * sizeof(double));
  const Status s = pp->broadcast(t, pp->size() - 1);
  DZ_CHECK(s.ok(), "pipeline broadcast of log-probabilities: " << s.message());
  std::memcpy(v->data(), t.data(), n * sizeof(double));
}

}  // namespace

int serve(const comm::MpiEnv& env, const ServeArgs& args) {
  Service service(args.port);
  runtime::RunArgs run_args = args.run;
  run_args.serve = &service;
  return runtime::run(env, run_args);
}

void Service::drain_on_sigterm() {
  const bool drain = comms_->drain_decided();  // on every rank: reports its own SIGTERM
  if (!listener_ || !drain || state_ != State::kReady) return;
  state_ = State::kDraining;
  queue_.start_drain();
  drain_deadline_ns_ = monotonic_ns() + static_cast<int64_t>(drain_s_ * 1e9);
  std::ostringstream line;
  line << "serve: SIGTERM: draining" << (replicas_ > 1 ? " replica " + std::to_string(replica_) : "") << " ("
       << queue_.depth() << " queued; in-flight requests may finish for " << drain_s_ << " s)\n";
  std::cout << line.str() << std::flush;
}

bool Service::take_token(Request& r, int32_t token, bool eos, int64_t now) {
  {
    std::lock_guard lock(r.mu);
    if (r.done) return true;
    r.generated.push_back(token);
    if (r.first_token_ns == 0) {
      r.first_token_ns = now;
      metrics_.time_to_first_token(static_cast<double>(now - r.arrived_ns) * 1e-9);
    } else {
      metrics_.inter_token_latency(static_cast<double>(now - r.last_token_ns) * 1e-9);
    }
    r.last_token_ns = now;
    metrics_.generated_tokens(1);
    std::string full;
    {
      std::lock_guard tl(tok_mu_);
      full = tok_->decode(r.generated, true);
    }
    size_t cut = std::string::npos, longest_stop = 0;
    for (const std::string& s : r.stop) {
      cut = std::min(cut, full.find(s));
      longest_stop = std::max(longest_stop, s.size());
    }
    bool end = true;
    if (cut != std::string::npos) {
      full.resize(cut);
      r.finish_reason = "stop";
    } else if (eos && stop_at_eos_ && !r.ignore_eos) {
      r.finish_reason = "stop";
    } else if (static_cast<int>(r.generated.size()) >= r.max_tokens) {
      r.finish_reason = "length";
    } else {
      end = false;
      // Held back: a character still incomplete, and what could be the start of a stop string.
      full.resize(full.size() - incomplete_utf8_tail(full));
      if (longest_stop > 1) full.resize(full.size() - std::min(full.size(), longest_stop - 1));
    }
    if (full.size() >= r.text.size() && full.compare(0, r.text.size(), r.text) == 0) r.text = std::move(full);
    if (!end) {
      if (now >= r.deadline_ns) r.fault = Fault::kTimeout;
      else if (r.client_gone) r.fault = Fault::kClientGone;
      else if (state_ == State::kDraining && now >= drain_deadline_ns_) r.fault = Fault::kShutdown;
    }
    r.done = end || r.fault != Fault::kNone;
  }
  r.cv.notify_all();
  return r.done;
}

void Service::run_batch(runtime::ServeContext& ctx, const std::vector<std::shared_ptr<Request>>& batch,
                        const nlohmann::json& msg) {
  const bool root = listener_;
  // serve.dump_requests: the request's activations and outputs as a prompt's, under "req-N".
  const bool dumping = ctx.cfg.serve.dump_requests && ctx.writer != nullptr;
  const config::DumpSelection& sel = ctx.cfg.dump.activations;
  const auto make_sink = [&](const std::string& id, const char* phase, bool wanted) -> std::unique_ptr<runtime::DumpSink> {
    if (!dumping || !ctx.writes_activations || !wanted) return nullptr;
    return std::make_unique<runtime::DumpSink>(*ctx.writer, *ctx.be, sel, id, phase);
  };
  const auto keep = [&](const Status& s) {
    if (dump_status_.ok() && !s.ok()) dump_status_ = s;
  };
  // Requests with max_tokens 0 (echo) are prefilled only; the others are decoded together, decode
  // index d being batch index batch_of[d].
  std::vector<runtime::Sequence> seqs;
  std::vector<Sampler> samplers;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<runtime::DumpSink>> decode_sinks;
  std::vector<model::ActivationSink*> sink_ptrs;
  std::vector<size_t> batch_of;
  std::vector<int> top_k_of;  // per decode index: -1 no log-probabilities, else the alternatives
  const bool last_stage = ctx.fwd.partition().last_stage;
  const int64_t n_vocab = ctx.hp.n_vocab;
  int max_new = 1;
  for (size_t i = 0; i < msg.size(); ++i) {
    const auto& e = msg[i];
    const std::vector<int32_t>& prompt = prompts.emplace_back(e[0].get<std::vector<int32_t>>());
    const std::string id = e[4].get<std::string>();
    const int top_k = std::min<int>(e[5].get<int>(), static_cast<int>(n_vocab));
    const bool echo = e[6].get<bool>();
    runtime::GenerateOptions go = ctx.go;
    go.max_new_tokens = e[1].get<int>();
    // Every rank makes the pixels from the same bytes; rank 0 already did once, so this succeeds.
    std::vector<image::ProcessedImage> images;
    for (const auto& b64 : e[3]) {
      Result<std::string> bytes = base64_decode(b64.get<std::string>());
      DZ_CHECK(bytes.ok() && processor_, "a served image did not arrive intact");
      Result<image::ProcessedImage> img = process_image_bytes(*processor_, vision_, *bytes, "served image", max_image_pixels_);
      DZ_CHECK(img.ok(), img.status().message());
      images.push_back(std::move(*img));
    }
    auto sink = make_sink(id, dump::kPhasePrefill, sel.wants_prefill());
    runtime::Sequence seq = [&] {
      if (!(echo && top_k >= 0)) return runtime::prefill(ctx.fwd, ctx.hp, prompt, go, sink.get(), images);
      // The prompt's own log-probabilities: the prefill keeps every position's logits (one forward,
      // as a teacher-forced pass), and its last row is the first generated token's.
      const auto n = static_cast<int64_t>(prompt.size());
      runtime::Sequence sq{ctx.fwd.new_cache(n + std::max(go.max_new_tokens, 1)), {}, n, {}};
      const Tensor all = ctx.fwd.run(prompt, 0, sq.cache, sink.get(), true, images);  // [n, n_vocab] on the last stage
      std::vector<double> flat;
      if (last_stage) {
        sq.logits = all.rows(n - 1, n);
        sq.gen.logits_last.assign(sq.logits.f32(), sq.logits.f32() + n_vocab);
        for (int64_t p = 1; p < n; ++p)
          append_flat(token_logprob(all.f32() + (p - 1) * n_vocab, n_vocab, prompt[p], top_k), &flat);
      }
      share_from_last_stage(ctx.fwd, static_cast<size_t>(n - 1) * flat_size(top_k), &flat);
      if (root) {
        std::lock_guard lock(batch[i]->mu);
        for (int64_t p = 1; p < n; ++p)
          batch[i]->prompt_logprobs.push_back(read_flat(flat.data() + (p - 1) * flat_size(top_k), top_k));
      }
      return sq;
    }();
    if (sink) keep(sink->status());
    if (go.max_new_tokens == 0) {
      seq.cache.release();
      if (root) {
        std::lock_guard lock(batch[i]->mu);
        batch[i]->finish_reason = "length";
      }
      continue;
    }
    max_new = std::max(max_new, go.max_new_tokens);
    batch_of.push_back(i);
    top_k_of.push_back(top_k);
    samplers.emplace_back(e[2].get<SamplingParams>(), prompt, ctx.go.eos_ids);
    seqs.push_back(std::move(seq));
    decode_sinks.push_back(make_sink(id, dump::kPhaseDecode, sel.wants_decode()));
    sink_ptrs.push_back(decode_sinks.back().get());
  }
  const bool any_logprobs = std::any_of(top_k_of.begin(), top_k_of.end(), [](int k) { return k >= 0; });
  std::vector<TokenLogprob> step_logprobs(seqs.size());  // last stage: this step's, per decode index
  runtime::GenerateOptions go = ctx.go;
  go.max_new_tokens = max_new;
  go.stop_at_eos = false;  // whether an EOS ends a request is take_token's (ignore_eos), told through step_end
  go.pick = [&](size_t d, const float* logits) {
    const int32_t token = samplers[d].pick(logits, n_vocab);
    if (top_k_of[d] >= 0) step_logprobs[d] = token_logprob(logits, n_vocab, token, top_k_of[d]);
    return token;
  };
  go.step_end = [&](std::span<const size_t> live, std::span<const int32_t> tokens) {
    std::string flags(live.size(), '0');
    drain_on_sigterm();
    if (any_logprobs) {  // this step's log-probabilities, from the last stage to the replica's first rank
      std::vector<double> flat;
      size_t n = 0;
      for (size_t d : live) {
        if (top_k_of[d] < 0) continue;
        n += flat_size(top_k_of[d]);
        if (last_stage) append_flat(step_logprobs[d], &flat);
      }
      share_from_last_stage(ctx.fwd, n, &flat);
      size_t at = 0;
      for (size_t j = 0; root && j < live.size(); ++j) {
        const int k = top_k_of[live[j]];
        if (k < 0) continue;
        Request& r = *batch[batch_of[live[j]]];
        std::lock_guard lock(r.mu);
        r.generated_logprobs.push_back(read_flat(flat.data() + at, k));
        at += flat_size(k);
      }
    }
    if (root) {
      const int64_t now = monotonic_ns();
      for (size_t j = 0; j < live.size(); ++j) {
        const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), tokens[j]) != eos_ids_.end();
        if (take_token(*batch[batch_of[live[j]]], tokens[j], eos, now)) flags[j] = '1';
      }
    }
    flags = comms_->broadcast(flags);
    std::vector<char> ended(live.size());
    for (size_t j = 0; j < live.size(); ++j) ended[j] = flags[j] == '1';
    return ended;
  };
  if (dumping) go.top_k = ctx.cfg.generate.top_k_record;
  std::vector<runtime::Generation> gens;
  if (!seqs.empty()) gens = runtime::decode_batch(ctx.fwd, ctx.hp, std::move(seqs), go, sink_ptrs);
  for (const auto& sink : decode_sinks)
    if (sink) keep(sink->status());
  for (size_t d = 0; dumping && ctx.writes_outputs && d < gens.size(); ++d) {
    dump::OutputRecord out;
    out.prompt_id = msg[batch_of[d]][4].get<std::string>();
    out.prompt_ids = prompts[batch_of[d]];
    out.generated_ids = gens[d].generated_ids;
    out.text = ctx.tok.decode(gens[d].generated_ids, true);
    out.logits_last = gens[d].logits_last;
    out.topk = std::min<int64_t>(go.top_k, ctx.hp.n_vocab);
    out.step_topk_ids = gens[d].step_topk_ids;
    out.step_topk_logits = gens[d].step_topk_logits;
    keep(ctx.writer->write_output(out));
    keep(ctx.writer->flush());
  }
  if (root)
    for (const auto& r : batch) end_request(*r, Fault::kNone);  // every one has left the batch
}

Status Service::serve(runtime::ServeContext& ctx) {
  comms_ = std::make_unique<ReplicaComms>(ctx.world_rank, ctx.replica, ctx.replicas, ctx.replica_size);
  const bool root = listener_;
  drain_s_ = ctx.cfg.serve.drain_s;
  Status setup;
  if (listener_ != comms_->first_of_replica() || replicas_ != ctx.replicas || (listener_ && replica_ != ctx.replica))
    setup = Status::Internal("serve: the replicas of the plan (dp " + std::to_string(ctx.replicas) +
                             ") are not those the listening sockets were bound for (" + std::to_string(replicas_) + ")");
  // Multimodal models: the processor on every rank (each makes the pixels of a served image).
  vision_ = ctx.hp.vision;
  max_image_pixels_ = ctx.cfg.limits.max_image_pixels;
  std::string no_images;
  if (vision_.enabled) {
    auto made = image::load_image_processor(ctx.model_dir);
    if (made.ok()) processor_ = std::move(*made);
    else no_images = made.status().message();
  }
  if (root) {
    if (processor_) image_placeholder_ = ctx.tok.id_to_token(vision_.image_token_id);
    else if (vision_.enabled) std::cout << "serve: image inputs refused: " << no_images << std::endl;
    tok_ = &ctx.tok;
    context_ = ctx.hp.max_position;
    default_max_tokens_ = std::max(1, ctx.cfg.generate.max_new_tokens);
    eos_ids_ = ctx.go.eos_ids;
    stop_at_eos_ = ctx.go.stop_at_eos;
    std::string source = serve_cfg_.chat_template ? *serve_cfg_.chat_template : ctx.model_dir;
    Result<std::string> text = Status::NotFound("");
    if (serve_cfg_.chat_template) {
      std::ifstream in(*serve_cfg_.chat_template);
      std::stringstream ss;
      ss << in.rdbuf();
      text = in ? Result<std::string>(ss.str())
                : Result<std::string>(Status::InvalidArgument(source_name_ + ": serve.chat_template: cannot read " +
                                                              *serve_cfg_.chat_template));
    } else {
      text = chat::find_model_chat_template(ctx.model_dir, &source);
    }
    if (text.ok()) {
      auto t = chat::ChatTemplate::compile(*text, source);
      if (t.ok()) chat_template_ = std::move(*t);
      else setup = t.status();
    } else if (text.status().code() == StatusCode::kNotFound) {
      chat_template_error_ = text.status().message() + "; give one with serve.chat_template";
      std::cout << "serve: chat completions refused: " << chat_template_error_ << std::endl;
    } else {
      setup = text.status();
    }
    metrics_.set_startup(ctx.phase_seconds, ctx.load_seconds);
  }
  if (const Status agreed = comm::agree(setup); !agreed.ok()) {
    comms_->leave();  // nothing left pending on the communicators before they are freed
    comms_.reset();
    return agreed;
  }
  if (root) {
    state_ = State::kReady;
    double startup = 0;
    for (const auto& [_, s] : ctx.phase_seconds) startup += s;
    std::ostringstream line;
    line << "serve: " << (replicas_ > 1 ? "replica " + std::to_string(replica_) + " " : "") << "ready after " << startup
         << " s (warm-up included); serving model '" << model_id_ << "'\n";
    std::cout << line.str() << std::flush;
  }
  const size_t max_batch = static_cast<size_t>(std::max(1, ctx.cfg.generate.max_batch));
  for (int64_t n_batch = 1;; ++n_batch) {
    std::vector<std::shared_ptr<Request>> batch;
    int64_t signal = 0;  // > 0: a batch of that many; -1: stop
    ctx.watchdog.arm("serve: waiting for requests", 0);  // no deadline: waiting for work is not a hang
    if (root) {
      while (batch.empty()) {
        drain_on_sigterm();
        const int64_t now = monotonic_ns();
        for (auto& r : queue_.take(max_batch, 50)) {
          if (now >= r->deadline_ns) end_request(*r, Fault::kTimeout);
          else if (r->client_gone) end_request(*r, Fault::kClientGone);
          else if (state_ == State::kDraining && now >= drain_deadline_ns_) end_request(*r, Fault::kShutdown);
          else batch.push_back(r);
        }
        if (batch.empty() && state_ != State::kReady && queue_.depth() == 0) break;
      }
      metrics_.set_queue_depth(static_cast<int64_t>(queue_.depth()));
      signal = batch.empty() ? -1 : static_cast<int64_t>(batch.size());
    }
    comms_->idle_broadcast(&signal);
    if (signal < 0) break;
    ctx.watchdog.arm("serve: batch #" + std::to_string(n_batch), ctx.cfg.watchdog.phase_timeout_s);
    nlohmann::json msg = nlohmann::json::array();
    for (const auto& r : batch) {
      nlohmann::json images = nlohmann::json::array();
      for (const std::string& b : r->image_bytes) images.push_back(base64_encode(b));
      msg.push_back({r->prompt_ids, r->max_tokens, r->sampling, images, "req-" + std::to_string(r->id), r->logprobs, r->echo});
    }
    msg = nlohmann::json::parse(comms_->broadcast(root ? msg.dump() : std::string()));
    if (ctx.heartbeat) ctx.heartbeat->set_phase("serve batch #" + std::to_string(n_batch));
    metrics_.set_running(static_cast<int64_t>(msg.size()));
    run_batch(ctx, batch, msg);
    metrics_.set_running(0);
  }
  if (root) {
    for (auto& r : queue_.take_all()) end_request(*r, Fault::kShutdown);
    stop_http();
    if (replicas_ > 1) std::cout << ("serve: replica " + std::to_string(replica_) + " drained\n") << std::flush;
  }
  // Every replica drains within serve.drain_s and the step it is in; the ranks leave together.
  const double wait_s = ctx.cfg.watchdog.phase_timeout_s > 0 ? ctx.cfg.watchdog.phase_timeout_s + drain_s_ : 0;
  ctx.watchdog.arm("serve: waiting for every replica to drain", wait_s);
  comms_->leave();
  comms_.reset();
  if (ctx.world_rank == 0) std::cout << "serve: drained; closing the dump" << std::endl;
  return dump_status_;
}

}  // namespace dayzero::serve

// Prometheus text exposition format 0.0.4: HELP and TYPE lines, then samples.
#include "serve/metrics.h"

#include <cstdio>

namespace dayzero::serve {
namespace {
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
std::string head(const std::string& name, const char* type, const std::string& help) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}
}  // namespace

void Histogram::observe(double v) {
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;
  if (b < bounds_.size()) ++counts_[b];
  ++count_;
  sum_ += v;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = head(name, "histogram", help);
  uint64_t cum = 0;
  for (size_t b = 0; b < bounds_.size(); ++b) {
    cum += counts_[b];
    out += name + "_bucket{le=\"" + num(bounds_[b]) + "\"} " + std::to_string(cum) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::request_done(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
}
void Metrics::prompt_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += n;
}
void Metrics::generated_tokens(int64_t n) {
  std::lock_guard lock(mu_);
  generated_tokens_ += n;
}
void Metrics::time_to_first_token(double s) {
  std::lock_guard lock(mu_);
  ttft_.observe(s);
}
void Metrics::inter_token_latency(double s) {
  std::lock_guard lock(mu_);
  itl_.observe(s);
}
void Metrics::set_queue_depth(int64_t n) {
  std::lock_guard lock(mu_);
  queue_depth_ = n;
}
void Metrics::set_running(int64_t n) {
  std::lock_guard lock(mu_);
  running_ = n;
}
void Metrics::set_startup(std::vector<std::pair<std::string, double>> phases, std::vector<double> load_seconds) {
  std::lock_guard lock(mu_);
  phases_ = std::move(phases);
  load_seconds_ = std::move(load_seconds);
}

void Metrics::set_replica(int replica, int replicas) {
  std::lock_guard lock(mu_);
  replica_ = replica;
  replicas_ = replicas;
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  std::string out = head("dayzero_replica", "gauge", "The data-parallel replica this server belongs to (serve.port + replica)");
  out += "dayzero_replica " + std::to_string(replica_) + "\n";
  out += head("dayzero_replicas", "gauge", "The job's data-parallel replicas, each with its own server");
  out += "dayzero_replicas " + std::to_string(replicas_) + "\n";
  out += head("dayzero_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  for (const auto& [k, n] : requests_)
    out += "dayzero_requests_total{endpoint=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(n) + "\n";
  out += head("dayzero_prompt_tokens_total", "counter", "Prompt tokens of the requests decoded");
  out += "dayzero_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  out += head("dayzero_generated_tokens_total", "counter", "Tokens generated for requests");
  out += "dayzero_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
  out += head("dayzero_queue_depth", "gauge", "Requests waiting for a batch");
  out += "dayzero_queue_depth " + std::to_string(queue_depth_) + "\n";
  out += head("dayzero_running_requests", "gauge", "Requests in the batch being decoded");
  out += "dayzero_running_requests " + std::to_string(running_) + "\n";
  out += ttft_.render("dayzero_time_to_first_token_seconds", "From a request's arrival to its first token");
  out += itl_.render("dayzero_inter_token_latency_seconds", "Between consecutive tokens of a request");
  out += head("dayzero_startup_phase_seconds", "gauge", "Wall time of each start-up phase of the job");
  for (const auto& [p, s] : phases_) out += "dayzero_startup_phase_seconds{phase=\"" + p + "\"} " + num(s) + "\n";
  out += head("dayzero_load_seconds", "gauge", "Checkpoint load time of each rank");
  for (size_t r = 0; r < load_seconds_.size(); ++r)
    out += "dayzero_load_seconds{rank=\"" + std::to_string(r) + "\"} " + num(load_seconds_[r]) + "\n";
  return out;
}

}  // namespace dayzero::serve

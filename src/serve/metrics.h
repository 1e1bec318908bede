// The service's counters, gauges and histograms, rendered as Prometheus text (GET /metrics).
// Thread-safe: HTTP threads and the serve loop update it. Names in docs/serve.md "Metrics".
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dayzero::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double v);
  // "# TYPE name histogram" and its _bucket/_sum/_count lines.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();
  void request_done(const std::string& endpoint, int status);
  void prompt_tokens(int64_t n);
  void generated_tokens(int64_t n);
  void time_to_first_token(double s);
  void inter_token_latency(double s);
  void set_queue_depth(int64_t n);
  void set_running(int64_t n);
  // Start-up figures, set once: each phase's wall time and each rank's checkpoint load time.
  void set_startup(std::vector<std::pair<std::string, double>> phases, std::vector<double> load_seconds);
  // Which replica's server this is (its dp index) and the job's replicas: gauges dayzero_replica
  // and dayzero_replicas.
  void set_replica(int replica, int replicas);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  int replica_ = 0, replicas_ = 1;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, queue_depth_ = 0, running_ = 0;
  Histogram ttft_, itl_;
  std::vector<std::pair<std::string, double>> phases_;
  std::vector<double> load_seconds_;
};

}  // namespace dayzero::serve

// HangWatch: the op observer (comm/op_watch.h) of a run. Every communication op arms the
// watchdog's op deadline (watchdog.collective_timeout_s) and shows in the heartbeat's
// "current"; when a deadline expires, hang_report() gives this rank's view for the hang
// report. It also carries out debug.stall (tests only). Not the watchdog thread itself
// (watchdog.h) and not the report file (diag/hang_report.h).
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/op_watch.h"
#include "config/run_config.h"
#include "diag/hang_report.h"
#include "dump/heartbeat.h"
#include "runtime/watchdog.h"

namespace dayzero::runtime {

class HangWatch final : public comm::OpObserver {
 public:
  // watchdog must outlive this object. world_rank: this rank, for debug.stall.
  HangWatch(Watchdog& watchdog, int world_rank) : watchdog_(watchdog), rank_(world_rank) {}

  // Thread-safe setters, used by the run as it learns them; 0 disables the op deadline.
  void set_timeout(double collective_timeout_s);
  void set_heartbeat(dump::Heartbeat* heartbeat);  // not owned; nullptr detaches
  void set_stall(const std::optional<config::StallConfig>& stall);
  void set_phase(const std::string& phase);
  // The rank's placement for the hang report (diag::HangSelf::placement).
  void set_placement(const nlohmann::ordered_json& placement);

  void op_begin(const comm::OpInfo& info) override;
  void op_end(const comm::OpInfo& info) override;

  // This rank's view now (the op in flight, if any), callable from the watchdog thread.
  diag::HangSelf view() const;

 private:
  Watchdog& watchdog_;
  const int rank_;
  mutable std::mutex mu_;
  double timeout_s_ = 300;
  dump::Heartbeat* heartbeat_ = nullptr;
  std::optional<config::StallConfig> stall_;
  std::string phase_;
  nlohmann::ordered_json placement_;
  bool in_op_ = false;
  std::string stalled_before_;  // set when debug.stall stopped this rank
  std::string op_, group_, label_;
  int64_t seq_ = -1, bytes_ = 0;
  int peer_ = -1;
  const std::vector<int>* members_ = nullptr;  // the group's, valid while its op is in flight
  std::chrono::steady_clock::time_point op_start_;
};

// "all_reduce #40 of tp@pp1.dp0": how an op is named in messages, heartbeats and reports.
std::string describe_op(const comm::OpInfo& info);

}  // namespace dayzero::runtime

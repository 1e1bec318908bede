// HangWatch: per-op watchdog deadlines, heartbeat "current", and the debug stall.
#include "runtime/hang_watch.h"

#include <thread>

#include "core/log.h"

namespace dayzero::runtime {

std::string describe_op(const comm::OpInfo& info) {
  std::string s = std::string(info.op) + " #" + std::to_string(info.seq) + " of " +
                  (info.label != nullptr ? *info.label : std::string(info.group));
  if (info.peer >= 0) s += (std::string(info.op) == "send" ? " to " : " from ") + std::to_string(info.peer);
  return s;
}

void HangWatch::set_timeout(double collective_timeout_s) {
  std::lock_guard lock(mu_);
  timeout_s_ = collective_timeout_s;
}

void HangWatch::set_heartbeat(dump::Heartbeat* heartbeat) {
  std::lock_guard lock(mu_);
  heartbeat_ = heartbeat;
}

void HangWatch::set_stall(const std::optional<config::StallConfig>& stall) {
  std::lock_guard lock(mu_);
  stall_ = stall;
}

void HangWatch::set_phase(const std::string& phase) {
  std::lock_guard lock(mu_);
  phase_ = phase;
}

void HangWatch::set_placement(const nlohmann::ordered_json& placement) {
  std::lock_guard lock(mu_);
  placement_ = placement;
}

void HangWatch::op_begin(const comm::OpInfo& info) {
  const std::string what = describe_op(info);
  bool stall = false;
  std::optional<double> stall_seconds;
  double timeout = 0;
  dump::Heartbeat* hb = nullptr;
  {
    std::lock_guard lock(mu_);
    stall = stall_ && stall_->rank == rank_ && stall_->group == info.group && stall_->op == info.op &&
            stall_->seq == info.seq;
    timeout = timeout_s_;
    hb = heartbeat_;
    if (stall) stalled_before_ = what, stall_seconds = stall_->seconds;
    in_op_ = !stall;
    op_ = info.op;
    group_ = info.group;
    label_ = info.label != nullptr ? *info.label : "";
    seq_ = info.seq;
    bytes_ = info.bytes;
    peer_ = info.peer;
    members_ = info.members;
    op_start_ = std::chrono::steady_clock::now();
  }
  if (stall) {
    // The op is not entered (nor armed) while stalled: only the peers' watchdogs see this
    // hang, as they would see a rank stuck in a kernel. The heartbeat thread keeps beating.
    DZ_LOG_WARN("debug.stall: rank {} stalls before {}", rank_, what);
    if (hb != nullptr) hb->set_current("debug.stall before " + what);
    if (!stall_seconds) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(*stall_seconds));
    std::lock_guard lock(mu_);
    stalled_before_.clear();
    in_op_ = true;
  }
  if (hb != nullptr) hb->set_current(what);
  watchdog_.arm_op(what, timeout);
}

void HangWatch::op_end(const comm::OpInfo&) {
  watchdog_.disarm_op();
  std::lock_guard lock(mu_);
  in_op_ = false;
  if (heartbeat_ != nullptr) heartbeat_->set_current("");
}

diag::HangSelf HangWatch::view() const {
  std::lock_guard lock(mu_);
  diag::HangSelf s;
  s.rank = rank_;
  s.phase = phase_;
  s.stalled_before = stalled_before_;
  s.placement = placement_;
  if (in_op_) {
    s.op = op_;
    s.group = group_;
    s.label = label_;
    s.seq = seq_;
    s.bytes = bytes_;
    s.peer = peer_;
    if (members_ != nullptr) s.members = *members_;
    s.waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - op_start_).count();
  }
  return s;
}

}  // namespace dayzero::runtime

// OpObserver: the hook every communication op of this process reports to before it enters
// the transport and after it leaves, so one place can watch them (the run's watchdog, the
// heartbeat's "current", the debug stall). Process-wide, at most one observer. Not the
// timeline (MpiComm records its own events); not a profiler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dayzero::comm {

// One op as the observer sees it. Pointers are valid for the duration of the call only.
struct OpInfo {
  const char* kind = "";   // "collective" or "p2p"
  const char* op = "";     // "all_reduce", "send", "agree", ...
  const char* group = "";  // the group kind: "tp", "pp", "world", ...
  const std::string* label = nullptr;  // the group instance, "tp@pp1.dp0"
  int64_t seq = -1;        // per-group (per-label) sequence number of this call
  int64_t bytes = 0;
  int peer = -1;           // p2p: the group rank of the other side; -1 otherwise
  // The world ranks of the group, in group-rank order; nullptr means every rank of the world.
  const std::vector<int>* members = nullptr;
};

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // Called on the calling thread before the op is recorded and before the transport is
  // entered; may block (a debug stall does).
  virtual void op_begin(const OpInfo& info) = 0;
  // Called after the transport returned, whatever its status.
  virtual void op_end(const OpInfo& info) = 0;
};

// Installs the observer (nullptr removes it); not owned, must outlive its installation.
// Not thread-safe against ops in flight: install before the first op, remove after the last.
void set_op_observer(OpObserver* observer);
OpObserver* op_observer();

// Reports one op to the installed observer for a scope (begin at construction, end at
// destruction); does nothing when none is installed.
class WatchedOp {
 public:
  explicit WatchedOp(const OpInfo& info) : info_(info), obs_(op_observer()) {
    if (obs_ != nullptr) obs_->op_begin(info_);
  }
  ~WatchedOp() {
    if (obs_ != nullptr) obs_->op_end(info_);
  }
  WatchedOp(const WatchedOp&) = delete;
  WatchedOp& operator=(const WatchedOp&) = delete;

 private:
  OpInfo info_;
  OpObserver* obs_;
};

}  // namespace dayzero::comm

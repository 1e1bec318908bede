// The wait loop and group bracket of NcclComm, as host logic (completion_wait.h).
#include "comm/completion_wait.h"

#include <algorithm>

namespace dayzero::comm {

Status wait_for_completion(const CompletionProbe& probe, double timeout_s, const std::string& what, bool* aborted) {
  *aborted = false;
  for (int spins = 0;; ++spins) {
    std::string error;
    const EventPoll q = probe.query(&error);
    if (q == EventPoll::kDone) return Status::Ok();
    if (q == EventPoll::kFailed) return Status::Internal("cuda " + what + ": " + error);
    // Not ready: the runtime may have kept that as the thread's last error; take it back now.
    const std::string other = probe.take_last_error();
    if (!other.empty()) return Status::Internal("cuda " + what + ": " + other + " (found while polling)");
    const Status async = probe.async_error();
    if (!async.ok()) {
      probe.abort();
      *aborted = true;
      return Status(async.code(), async.message() + " (" + what + "; communicator aborted)");
    }
    if (timeout_s > 0 && probe.seconds() > timeout_s) {
      probe.abort();
      *aborted = true;
      return Status::Timeout("nccl " + what + " not complete after " + std::to_string(timeout_s) +
                             " s; communicator aborted");
    }
    probe.pause(spins);
  }
}

Status run_group(const std::function<Status()>& start, const std::function<Status()>& body,
                 const std::function<Status()>& end) {
  DZ_RETURN_IF_ERROR(start());
  const Status inside = body();
  const Status closed = end();
  return inside.ok() ? closed : inside;
}

double nccl_wait_timeout_s(double collective_timeout_s) {
  if (collective_timeout_s <= 0) return 0;
  return collective_timeout_s + std::max(5.0, collective_timeout_s / 10);
}

}  // namespace dayzero::comm

// The host logic of a device collective's wait and of an NCCL group, apart from CUDA and NCCL
// so that a CPU test can drive it: what each poll of the completion event and of the
// communicator's asynchronous error means, that a "not ready" answer is taken back out of the
// CUDA runtime's last-error slot before anything else runs (else the next kernel launch's check
// reads it and fails as "device not ready"), when the wait gives up, and that a group opened is
// closed on every path. Not the NCCL calls themselves (nccl_comm.cpp).
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace dayzero::comm {

// One poll of the completion event (cudaEventQuery).
enum class EventPoll { kDone, kNotReady, kFailed };

// The operations a wait needs, each one call of the CUDA runtime or NCCL in NcclComm.
struct CompletionProbe {
  // Polls the event; on kFailed, *error names what failed.
  std::function<EventPoll(std::string* error)> query;
  // Reads and clears the thread's last CUDA error (cudaGetLastError) after a kNotReady poll; returns
  // an empty string when that was nothing or the not-ready code itself, else the error's name.
  std::function<std::string()> take_last_error;
  // The communicator's asynchronous error (ncclCommGetAsyncError): Ok while none.
  std::function<Status()> async_error;
  // Aborts the communicator (ncclCommAbort).
  std::function<void()> abort;
  // Seconds since the wait began.
  std::function<double()> seconds;
  // Called between polls; spins is the polls so far (NcclComm sleeps 50 us after 1000 of them).
  std::function<void(int spins)> pause;
};

// Polls until the event is done (Ok), the event query fails (Internal, naming `what`), the
// communicator reports an asynchronous error (its status, "(communicator aborted)" added; the
// communicator is aborted) or timeout_s passes with timeout_s > 0 (Timeout naming `what` and the
// limit; aborted). *aborted is set when abort() was called. Every kNotReady is followed by
// take_last_error() before any other probe call, so no path returns with "not ready" left as
// the last error; a different error found there is returned as Internal.
Status wait_for_completion(const CompletionProbe& probe, double timeout_s, const std::string& what, bool* aborted);

// Runs body between start() and end() (ncclGroupStart / ncclGroupEnd): end() is called whenever
// start() succeeded, whatever body returned, so no failure leaves the group open (later NCCL
// calls of the thread would be collected into it and never launched). Returns the first error
// of start, body and end.
Status run_group(const std::function<Status()>& start, const std::function<Status()>& body,
                 const std::function<Status()>& end);

// How long an NCCL wait lasts before it aborts its communicator, for watchdog.collective_timeout_s
// = t: t plus max(5 s, t / 10), so the run's watchdog (armed with t on the same op) always fires
// first and writes its hang report; the NCCL abort is the backstop. 0 (no limit) stays 0.
double nccl_wait_timeout_s(double collective_timeout_s);

}  // namespace dayzero::comm

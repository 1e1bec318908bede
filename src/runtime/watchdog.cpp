// Watchdog thread: two deadlines (phase, op), the SIGTERM flag, and a bounded abort.
#include "runtime/watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace dayzero::runtime {
namespace {
volatile std::sig_atomic_t g_sigterm = 0;
std::atomic<bool> g_sigterm_deferred{false};
void on_sigterm(int) { g_sigterm = 1; }
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

void Watchdog::install_sigterm_handler() { std::signal(SIGTERM, on_sigterm); }
void Watchdog::defer_sigterm() { g_sigterm_deferred = true; }
bool Watchdog::sigterm_received() { return g_sigterm != 0; }

Watchdog::Watchdog(int rank, std::function<void(const std::string&)> on_expire)
    : rank_(rank), on_expire_(std::move(on_expire)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::set_abort_mode(bool mpi_abort, double grace_s) {
  std::lock_guard lock(mu_);
  mpi_abort_ = mpi_abort;
  grace_s_ = grace_s;
}

void Watchdog::set(Slot& s, const std::string& what, double timeout_s) {
  s.armed = timeout_s > 0;
  s.what = what;
  s.timeout_s = timeout_s;
  s.deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
}

void Watchdog::arm(const std::string& what, double timeout_s) {
  {
    std::lock_guard lock(mu_);
    set(phase_, what, timeout_s);
  }
  cv_.notify_all();
}

void Watchdog::disarm() {
  std::lock_guard lock(mu_);
  phase_.armed = false;
}

// No notify on the op path: the thread wakes at most every poll interval or at a deadline,
// and an op that ends early only makes one wake-up find nothing to do.
void Watchdog::arm_op(const std::string& what, double timeout_s) {
  std::lock_guard lock(mu_);
  set(op_, what, timeout_s);
}

void Watchdog::disarm_op() {
  std::lock_guard lock(mu_);
  op_.armed = false;
}

// Once the rank has decided to end, nothing may wait on the network for long: writing the hang
// report (a shared filesystem) and MPI_Abort (a peer or daemon that no longer answers) both run
// under this deadline, after which the process exits with 3 whatever they are doing.
void Watchdog::bound_exit() const {
  const double grace = grace_s_;
  std::thread([grace] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    _exit(3);
  }).detach();
}

void Watchdog::expire(const Slot& s) {
  const std::string msg = "rank " + std::to_string(rank_) + ": watchdog: " + s.what + " did not finish within " +
                          seconds_text(s.timeout_s) + " s";
  std::fprintf(stderr, "dayzero: error: %s; aborting the job\n", msg.c_str());
  std::fflush(stderr);
  bound_exit();
  if (on_expire_) on_expire_(msg);
  if (mpi_abort_) MPI_Abort(MPI_COMM_WORLD, 3);
  _exit(3);
}

void Watchdog::run() {
  std::unique_lock lock(mu_);
  constexpr auto kPoll = std::chrono::milliseconds(100);  // how soon SIGTERM is acted on
  while (!stop_) {
    if (g_sigterm && !g_sigterm_deferred) {
      const std::string msg = "rank " + std::to_string(rank_) + ": terminated by SIGTERM during " +
                              (op_.armed ? op_.what : phase_.armed ? phase_.what : std::string("shutdown"));
      std::fprintf(stderr, "dayzero: error: %s\n", msg.c_str());
      std::fflush(stderr);
      bound_exit();
      if (on_expire_) on_expire_(msg);
      std::_Exit(3);
    }
    auto wake = std::chrono::steady_clock::now() + kPoll;
    if (phase_.armed) wake = std::min(wake, phase_.deadline);
    if (op_.armed) wake = std::min(wake, op_.deadline);
    cv_.wait_until(lock, wake);
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    if (op_.armed && now >= op_.deadline) expire(op_);
    if (phase_.armed && now >= phase_.deadline) expire(phase_);
  }
}

}  // namespace dayzero::runtime

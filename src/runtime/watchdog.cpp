// Watchdog thread.
#include "runtime/watchdog.h"

#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace dayzero::runtime {
namespace {
volatile std::sig_atomic_t g_sigterm = 0;
void on_sigterm(int) { g_sigterm = 1; }
}  // namespace

void Watchdog::install_sigterm_handler() { std::signal(SIGTERM, on_sigterm); }

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

void Watchdog::arm(const std::string& what, double timeout_s) {
  {
    std::lock_guard lock(mu_);
    armed_ = timeout_s > 0;
    what_ = what;
    timeout_s_ = timeout_s;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  }
  cv_.notify_all();
}

void Watchdog::disarm() {
  {
    std::lock_guard lock(mu_);
    armed_ = false;
  }
  cv_.notify_all();
}

void Watchdog::run() {
  std::unique_lock lock(mu_);
  constexpr auto kPoll = std::chrono::milliseconds(100);  // how soon SIGTERM is acted on
  while (!stop_) {
    if (g_sigterm) {
      const std::string msg = "rank " + std::to_string(rank_) + ": terminated by SIGTERM during " +
                              (armed_ ? what_ : std::string("shutdown"));
      std::fprintf(stderr, "dayzero: error: %s\n", msg.c_str());
      std::fflush(stderr);
      if (on_expire_) on_expire_(msg);
      std::_Exit(3);
    }
    const auto wake = armed_ ? std::min(deadline_, std::chrono::steady_clock::now() + kPoll)
                             : std::chrono::steady_clock::now() + kPoll;
    cv_.wait_until(lock, wake);
    if (armed_ && !stop_ && std::chrono::steady_clock::now() >= deadline_) {
      const std::string msg = "rank " + std::to_string(rank_) + ": watchdog: " + what_ + " did not finish within " +
                              std::to_string(timeout_s_) + " s";
      std::fprintf(stderr, "dayzero: error: %s; aborting the job\n", msg.c_str());
      std::fflush(stderr);
      if (on_expire_) on_expire_(msg);
      MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);
    }
  }
}

}  // namespace dayzero::runtime

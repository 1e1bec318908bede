// Watchdog: a thread that ends the whole job (MPI_Abort, exit 3) when the current phase or
// collective runs past its deadline, naming the rank and what it was doing, so a stuck peer
// never turns into a silent hang. It also turns SIGTERM (sent by mpirun to the survivors when
// a rank dies) into an orderly exit 3 after recording it. Watches one deadline at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dayzero::runtime {

class Watchdog {
 public:
  // Installs the SIGTERM handler whose flag every Watchdog polls.
  static void install_sigterm_handler();

  // on_expire runs on the watchdog thread before the abort (flush logs, write the event log).
  Watchdog(int rank, std::function<void(const std::string&)> on_expire = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches `what` for timeout_s seconds (0 disables); replaces the previous deadline.
  void arm(const std::string& what, double timeout_s);
  void disarm();

 private:
  void run();

  int rank_;
  std::function<void(const std::string&)> on_expire_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  std::string what_;
  double timeout_s_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

// Arms a watchdog for a scope and restores the outer deadline's state (disarmed) after it.
class WatchdogScope {
 public:
  WatchdogScope(Watchdog& w, const std::string& what, double timeout_s) : w_(w) { w_.arm(what, timeout_s); }
  ~WatchdogScope() { w_.disarm(); }

 private:
  Watchdog& w_;
};

}  // namespace dayzero::runtime

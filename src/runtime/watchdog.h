// Watchdog: a thread that ends the whole job (exit 3) when the current phase or the current
// communication op runs past its deadline, naming the rank and what it was doing, so a stuck
// peer never turns into a silent hang. It also turns SIGTERM (sent by mpirun to the survivors
// when a rank dies) into an orderly exit 3 after recording it. Two deadlines at a time: the
// phase's and the op's inside it (each op, collective or point-to-point, is armed on its own).
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
  // From now on SIGTERM no longer ends the job here: the caller polls sigterm_received() and
  // ends in order itself (`dayzero serve` drains). Process-wide, never undone.
  static void defer_sigterm();
  static bool sigterm_received();

  // on_expire runs on the watchdog thread before the job ends (flush logs, write the hang
  // report); it gets the one-line reason.
  Watchdog(int rank, std::function<void(const std::string&)> on_expire = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // How an expiry ends the job. A timer started first _exit(3)s this process grace_s later
  // whatever the rest is doing (on_expire writing to a filesystem that went with the network,
  // MPI_Abort waiting on an unreachable peer); the SIGTERM path runs under the same timer. With
  // mpi_abort (only where MPI provides MPI_THREAD_MULTIPLE: this thread is not the main one),
  // MPI_Abort(MPI_COMM_WORLD, 3) is called after on_expire; without it the process _exit(3)s
  // and the launcher ends the others (Open MPI's mpirun does when a rank exits without
  // MPI_Finalize). Default: no MPI_Abort, 5 s.
  void set_abort_mode(bool mpi_abort, double grace_s);

  // The phase deadline: watches `what` for timeout_s seconds (0 disables); replaces the
  // previous phase deadline.
  void arm(const std::string& what, double timeout_s);
  void disarm();
  // The op deadline, inside the phase: whichever of the two expires first ends the job.
  void arm_op(const std::string& what, double timeout_s);
  void disarm_op();

 private:
  struct Slot {
    bool armed = false;
    std::string what;
    double timeout_s = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  static void set(Slot& s, const std::string& what, double timeout_s);
  void run();
  [[noreturn]] void expire(const Slot& s);  // holds mu_
  void bound_exit() const;                   // holds mu_: the grace_s timer to _exit(3)

  int rank_;
  std::function<void(const std::string&)> on_expire_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool mpi_abort_ = false;
  double grace_s_ = 5;
  Slot phase_, op_;
  std::thread thread_;
};

// Arms the phase deadline for a scope and disarms it after.
class WatchdogScope {
 public:
  WatchdogScope(Watchdog& w, const std::string& what, double timeout_s) : w_(w) { w_.arm(what, timeout_s); }
  ~WatchdogScope() { w_.disarm(); }

 private:
  Watchdog& w_;
};

}  // namespace dayzero::runtime

// VerifyProgress: byte counts sent to rank 0 point to point, printed there as one line.
#include "verify/progress.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/clock.h"

namespace dayzero::verify {
namespace {
constexpr int kTag = 7;
constexpr int64_t kSendEveryNs = 1'000'000'000;
}  // namespace

VerifyProgress::VerifyProgress(uint64_t total) : total_(total) {
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_);
  last_ns_ = monotonic_ns();
  if (rank_ == 0) {
    done_of_.assign(static_cast<size_t>(world_), 0);
    final_of_.assign(static_cast<size_t>(world_), false);
    heard_of_.assign(static_cast<size_t>(world_), false);
    heard_of_[0] = true;
  }
}

VerifyProgress::~VerifyProgress() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void VerifyProgress::add(uint64_t n) {
  done_ += n;
  const int64_t now = monotonic_ns();
  if (rank_ == 0) {
    done_of_[0] = done_;
    poll();
    return;
  }
  if (now - last_ns_ < kSendEveryNs) return;
  last_ns_ = now;
  send(false);
}

void VerifyProgress::send(bool final_count) {
  if (pending_ != MPI_REQUEST_NULL) {
    int complete = 0;
    if (final_count) MPI_Wait(&pending_, MPI_STATUS_IGNORE);
    else MPI_Test(&pending_, &complete, MPI_STATUS_IGNORE);
    if (pending_ != MPI_REQUEST_NULL) return;  // the last count is still on its way: skip this one
  }
  message_[0] = done_;
  message_[1] = final_count ? 1 : 0;
  MPI_Isend(message_, 2, MPI_UINT64_T, 0, kTag, comm_, &pending_);
  if (final_count) MPI_Wait(&pending_, MPI_STATUS_IGNORE);
}

void VerifyProgress::poll() {
  for (;;) {
    int waiting = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm_, &waiting, &st);
    if (!waiting) break;
    uint64_t m[2];
    MPI_Recv(m, 2, MPI_UINT64_T, st.MPI_SOURCE, kTag, comm_, MPI_STATUS_IGNORE);
    const size_t r = static_cast<size_t>(st.MPI_SOURCE);
    done_of_[r] = m[0];
    heard_of_[r] = true;
    final_of_[r] = final_of_[r] || m[1] == 1;
  }
  uint64_t done = 0;
  for (uint64_t d : done_of_) done += d;
  const int heard = static_cast<int>(std::count(heard_of_.begin(), heard_of_.end(), true));
  line_.update(static_cast<int64_t>(std::min(done, total_)), static_cast<int64_t>(total_), heard, world_);
}

void VerifyProgress::finish() {
  if (finished_) return;
  finished_ = true;
  if (rank_ != 0) {
    send(true);
  } else {
    done_of_[0] = done_;
    final_of_[0] = true;
    // The other ranks' final counts, printing while the slowest still reads.
    while (std::count(final_of_.begin(), final_of_.end(), true) < world_) {
      poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (line_.finish()) line_.update(static_cast<int64_t>(total_), static_cast<int64_t>(total_), world_, world_, true);
  }
  MPI_Barrier(comm_);
}

}  // namespace dayzero::verify

// The replica's communicator and the job-wide drain decision (replica_comms.h).
#include "serve/replica_comms.h"

#include <chrono>
#include <thread>

#include "comm/mpi_env.h"
#include "comm/op_watch.h"
#include "runtime/watchdog.h"

namespace dayzero::serve {
namespace {

constexpr int kSigtermTag = 7;  // on ctl_: "this rank got SIGTERM", to world rank 0

// Completes *req by polling every 2 ms, so the calling rank sleeps and holds no watched op.
void poll_until_done(MPI_Request* req, ReplicaComms* also_poll) {
  int done = 0;
  for (;;) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (also_poll) also_poll->drain_decided();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

ReplicaComms::ReplicaComms(int world_rank, int replica, int replicas, int replica_size)
    : world_rank_(world_rank), replicas_(replicas), replica_(replica) {
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  label_ = "replica@dp" + std::to_string(replica);
  for (int r = 0; r < replica_size; ++r) members_.push_back(replica * replica_size + r);
  if (replicas_ > 1) {
    MPI_Comm_split(MPI_COMM_WORLD, replica, world_rank, &replica_comm_);
    const bool first = world_rank % replica_size == 0;
    MPI_Comm_split(MPI_COMM_WORLD, first ? 0 : MPI_UNDEFINED, world_rank, &roots_);
  } else {
    replica_comm_ = MPI_COMM_WORLD;
  }
  MPI_Comm_rank(replica_comm_, &replica_rank_);
  MPI_Comm_dup(MPI_COMM_WORLD, &ctl_);
  if (world_rank_ == 0 && world_size_ > 1)
    MPI_Irecv(&heard_value_, 1, MPI_INT, MPI_ANY_SOURCE, kSigtermTag, ctl_, &heard_);
  // The other replicas' first ranks wait for world rank 0's decision from the start.
  if (roots_ != MPI_COMM_NULL && world_rank_ != 0) {
    MPI_Ibcast(&decision_, 1, MPI_INT, 0, roots_, &decision_req_);
    decision_posted_ = true;
  }
}

ReplicaComms::~ReplicaComms() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (replica_comm_ != MPI_COMM_WORLD && replica_comm_ != MPI_COMM_NULL) MPI_Comm_free(&replica_comm_);
  if (roots_ != MPI_COMM_NULL) MPI_Comm_free(&roots_);
  if (ctl_ != MPI_COMM_NULL) MPI_Comm_free(&ctl_);
}

std::string ReplicaComms::broadcast(const std::string& s) {
  if (replicas_ == 1) return comm::broadcast_string(s);
  comm::OpInfo info;
  info.kind = "collective";
  info.op = "broadcast_string";
  info.group = "replica";
  info.label = &label_;
  info.seq = seq_++;
  info.bytes = static_cast<int64_t>(s.size());
  info.members = &members_;
  comm::WatchedOp watched(info);
  int64_t n = static_cast<int64_t>(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, replica_comm_);
  std::string out = replica_rank_ == 0 ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, replica_comm_);
  return out;
}

void ReplicaComms::idle_broadcast(int64_t* v) {
  MPI_Request req;
  MPI_Ibcast(v, 1, MPI_INT64_T, 0, replica_comm_, &req);
  poll_until_done(&req, this);
}

bool ReplicaComms::drain_decided() {
  const bool sigterm = runtime::Watchdog::sigterm_received();
  if (sigterm && world_rank_ != 0 && !reported_) {
    MPI_Isend(&report_value_, 1, MPI_INT, 0, kSigtermTag, ctl_, &report_);
    reported_ = true;
  }
  if (decided_) return true;
  if (world_rank_ == 0) {
    if (heard_ != MPI_REQUEST_NULL && !heard_done_) {
      int done = 0;
      MPI_Test(&heard_, &done, MPI_STATUS_IGNORE);
      heard_done_ = done != 0;
    }
    if (sigterm || heard_done_) {
      decided_ = true;
      if (roots_ != MPI_COMM_NULL) {
        decision_ = 1;
        MPI_Ibcast(&decision_, 1, MPI_INT, 0, roots_, &decision_req_);
        decision_posted_ = true;
      }
    }
  } else if (decision_posted_ && !decision_done_) {
    int done = 0;
    MPI_Test(&decision_req_, &done, MPI_STATUS_IGNORE);
    decision_done_ = done != 0;
    decided_ = decision_done_ && decision_ == 1;
  }
  return decided_;
}

void ReplicaComms::leave() {
  int64_t reported = reported_ ? 1 : 0, total = 0;
  MPI_Request req;
  MPI_Iallreduce(&reported, &total, 1, MPI_INT64_T, MPI_SUM, ctl_, &req);
  poll_until_done(&req, nullptr);
  // Every report is received (world rank 0) and every send completes, so nothing is left pending.
  if (world_rank_ == 0 && heard_ != MPI_REQUEST_NULL) {
    int64_t received = 0;
    if (heard_done_) {
      received = 1;
    } else if (total > 0) {
      MPI_Wait(&heard_, MPI_STATUS_IGNORE);
      received = 1;
    } else {
      MPI_Cancel(&heard_);
      MPI_Wait(&heard_, MPI_STATUS_IGNORE);
    }
    for (; received < total; ++received) {
      int v = 0;
      MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, kSigtermTag, ctl_, MPI_STATUS_IGNORE);
    }
  }
  if (reported_) MPI_Wait(&report_, MPI_STATUS_IGNORE);
  // The decision's broadcast: posted by every first rank of a replica, world rank 0 included.
  if (roots_ != MPI_COMM_NULL) {
    if (!decision_posted_) {  // world rank 0 left without deciding (the job is ending on a fault)
      MPI_Ibcast(&decision_, 1, MPI_INT, 0, roots_, &decision_req_);
      decision_posted_ = true;
    }
    if (!decision_done_) MPI_Wait(&decision_req_, MPI_STATUS_IGNORE);
    decision_done_ = true;
  }
}

}  // namespace dayzero::serve

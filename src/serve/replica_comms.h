// The MPI side of the serve phase beyond the run's groups: the communicator of this rank's
// data-parallel replica (the ranks that decode that replica's batches, its first rank the one
// that listens), and the job-wide decision to drain. World rank 0 decides the drain, on its own
// SIGTERM or on one any other rank reports to it; the first ranks of the replicas learn it from a
// non-blocking broadcast they poll, so every replica drains and no rank is left in a collective the
// others have left. With one replica the replica's communicator is the world, and the broadcasts
// are comm::broadcast_string (watched as group "env"), as before replicas existed.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dayzero::serve {

class ReplicaComms {
 public:
  // Collective over MPI_COMM_WORLD (every rank, with the same replicas and replica_size). Replica
  // r is world ranks r * replica_size .. (r + 1) * replica_size - 1.
  ReplicaComms(int world_rank, int replica, int replicas, int replica_size);
  ~ReplicaComms();
  ReplicaComms(const ReplicaComms&) = delete;
  ReplicaComms& operator=(const ReplicaComms&) = delete;

  bool first_of_replica() const { return replica_rank_ == 0; }

  // The replica's first rank's s on every rank of the replica; reported to the op observer, so
  // the watchdog covers it.
  std::string broadcast(const std::string& s);
  // The replica's first rank's *v on every rank of the replica, completed by polling every 2 ms
  // (also calling drain_decided()): a rank waiting here for the next batch sleeps between polls
  // and is inside no watched op.
  void idle_broadcast(int64_t* v);
  // Every rank, often (each step, each idle poll): reports this rank's SIGTERM to world rank 0,
  // once. True once the job drains: on world rank 0 as soon as it decides, on the first rank of
  // every other replica once the decision reached it; never on the other ranks (they follow their
  // replica's first rank).
  bool drain_decided();
  // Collective over MPI_COMM_WORLD, after this rank's replica left its loop over batches: polls
  // until every rank has come here (a replica that drained first waits for the others, inside
  // no watched op: the caller arms the phase deadline), then settles the drain's messages.
  void leave();

 private:
  int world_rank_ = 0, replicas_ = 1, replica_ = 0, replica_rank_ = 0, world_size_ = 1;
  MPI_Comm replica_comm_ = MPI_COMM_NULL;  // MPI_COMM_WORLD itself with one replica (not freed)
  MPI_Comm roots_ = MPI_COMM_NULL;         // the replicas' first ranks (more than one replica only)
  MPI_Comm ctl_ = MPI_COMM_NULL;           // a duplicate of the world for the SIGTERM reports
  std::string label_;                 // "replica@dp1": the broadcasts' group label
  std::vector<int> members_;          // the replica's world ranks
  int64_t seq_ = 0;
  bool decided_ = false;
  bool reported_ = false;             // this rank sent its SIGTERM to rank 0
  MPI_Request report_ = MPI_REQUEST_NULL;
  int report_value_ = 1, heard_value_ = 0;
  MPI_Request heard_ = MPI_REQUEST_NULL;  // rank 0: the first report of another rank's SIGTERM
  bool heard_done_ = false;
  int decision_ = 0;
  MPI_Request decision_req_ = MPI_REQUEST_NULL;  // the roots' broadcast of the decision
  bool decision_posted_ = false, decision_done_ = false;
};

}  // namespace dayzero::serve

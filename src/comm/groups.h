// ProcessGroups: this rank's communicators for every parallel axis of the plan (world, tp,
// pp, dp, ep, etp), cut from one Cartesian decomposition of MPI_COMM_WORLD, each a Comm
// that records its calls on the rank's timeline. Not the plan (plan/plan.h decides sizes and
// coordinates; this checks that MPI agrees with it) and not device communicators (an NCCL
// set, bootstrapped from these, comes later).
#pragma once

#include <functional>
#include <memory>

#include "comm/comm.h"
#include "comm/device_comm.h"
#include "comm/mpi_comm.h"
#include "core/status.h"
#include "plan/plan.h"

namespace dayzero::dump {
class Timeline;
}

namespace dayzero::comm {

// The axes, slowest first: world = dp x pp x tp and tp = ep x etp, so
//   world rank = ((dp_rank * pp + pp_rank) * tp) + tp_rank,   tp_rank = ep_rank * etp + etp_rank
// (the plan's rank order; a tp group is consecutive ranks, an etp group consecutive tp ranks).
// Group members are ordered by their coordinate on the group's axis: tp().rank() == tp_rank,
// pp().rank() == pp_rank, ep().rank() == ep_rank, and so on; world().rank() == world rank.
//   tp:  the ranks of one stage of one replica (same dp, pp)         label "tp@pp1.dp0"
//   pp:  the stages of one replica, same tp_rank (same dp, tp)       label "pp@dp0.tp1"
//   dp:  the replicas, same stage and tp_rank (same pp, tp)          label "dp@pp0.tp1"
//   ep:  the ranks of a tp group with the same etp_rank              label "ep@pp1.dp0.etp0"
//        (wide expert parallelism, plan.ep_dp > 1: the ranks of ep_dp consecutive replicas of
//        one stage, ep_rank = (dp_rank % ep_dp) * tp + tp_rank;       label "ep@pp0.dp0-3.etp0")
//   etp: the ranks of a tp group with the same ep_rank               label "etp@pp1.dp0.ep1"
//   world: every rank                                                label "world"
class ProcessGroups {
 public:
  // Collective over MPI_COMM_WORLD: every rank calls with the same plan and its own world
  // rank. Checks the plan's sizes (dp * pp * tp == world size == MPI's, ep * etp == tp, one
  // RankCoord per rank), builds the Cartesian communicator with dims {dp / ep_dp, ep_dp, pp, tp / etp, etp}
  // (no reordering, no periodicity) and its sub-communicators, then checks on every rank that
  // the Cartesian coordinates and group ranks equal the plan's RankCoord, and agrees (all
  // ranks return the same verdict). InvalidArgument names the first failing rank and the
  // mismatch. timeline may be null; it is not owned and must outlive the groups.
  static Result<ProcessGroups> create(const plan::Plan& plan, int world_rank,
                                      dump::Timeline* timeline);

  ProcessGroups(ProcessGroups&&) noexcept = default;
  ProcessGroups& operator=(ProcessGroups&&) noexcept = default;

  // The Comm of each group: the MPI one, or what wrap() put in front of it.
  Comm& world() { return front_[0] ? *front_[0] : *world_; }
  Comm& tp() { return front_[1] ? *front_[1] : *tp_; }
  Comm& pp() { return front_[2] ? *front_[2] : *pp_; }
  Comm& dp() { return front_[3] ? *front_[3] : *dp_; }
  Comm& ep() { return front_[4] ? *front_[4] : *ep_; }
  Comm& etp() { return front_[5] ? *front_[5] : *etp_; }
  // Puts make(mpi comm) in front of every group's MPI Comm (e.g. a StagedComm for device
  // buffers); the MPI Comms stay reachable through mpi_*() and must outlive the fronts, which
  // they do (both are owned here). Comm references taken before the call still name the MPI Comms.
  void wrap(const std::function<std::unique_ptr<Comm>(MpiComm&)>& make) {
    MpiComm* inner[6] = {world_.get(), tp_.get(), pp_.get(), dp_.get(), ep_.get(), etp_.get()};
    for (int i = 0; i < 6; ++i) front_[i] = make(*inner[i]);
  }
  // As wrap(), with the group's kind (device_comm.h: world, tp, pp, dp, ep, etp in that order);
  // a null result leaves the MPI Comm itself in front of that group.
  void wrap_each(const std::function<std::unique_ptr<Comm>(MpiComm&, GroupKind)>& make) {
    MpiComm* inner[6] = {world_.get(), tp_.get(), pp_.get(), dp_.get(), ep_.get(), etp_.get()};
    for (int i = 0; i < 6; ++i) front_[i] = make(*inner[i], kGroupKinds[static_cast<size_t>(i)]);
  }
  // The MPI communicators behind them (e.g. to bootstrap NCCL over the same groups).
  MpiComm& mpi_world() { return *world_; }
  MpiComm& mpi_tp() { return *tp_; }
  MpiComm& mpi_pp() { return *pp_; }
  MpiComm& mpi_dp() { return *dp_; }
  MpiComm& mpi_ep() { return *ep_; }
  MpiComm& mpi_etp() { return *etp_; }

  const plan::RankCoord& coord() const { return coord_; }  // this rank's, from the plan

 private:
  ProcessGroups() = default;

  plan::RankCoord coord_;
  // world_ owns the Cartesian communicator; the others own their sub-communicators.
  std::unique_ptr<MpiComm> world_, tp_, pp_, dp_, ep_, etp_;
  std::unique_ptr<Comm> front_[6];  // world, tp, pp, dp, ep, etp; null: the MPI Comm itself
};

}  // namespace dayzero::comm

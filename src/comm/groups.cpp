// ProcessGroups: the plan's axes as MPI communicators, from MPI_Cart_create over the world
// and one MPI_Cart_sub per axis, checked against the plan on every rank.
#include "comm/groups.h"

#include <mpi.h>

#include <string>

#include "comm/mpi_env.h"
#include "comm/op_watch.h"

namespace dayzero::comm {
namespace {

// The communicator set-up calls are collective over the world and block until every rank
// arrives, so they report to the op observer like every other op (group "setup", label
// "world.setup", one sequence per process: cart_create #0, then cart_sub #1..#5 in the order
// tp, pp, dp, ep, etp), and a peer that never arrives ends the job within the op deadline.
const std::string kSetupLabel = "world.setup";
int64_t g_setup_seq = 0;

OpInfo setup_op(const char* name) {
  OpInfo info;
  info.kind = "collective";
  info.op = name;
  info.group = "setup";
  info.label = &kSetupLabel;
  info.seq = g_setup_seq++;
  return info;
}

std::string coord_str(int dp, int pp, int tp, int ep, int etp) {
  return "(dp " + std::to_string(dp) + ", pp " + std::to_string(pp) + ", tp " + std::to_string(tp) +
         ", ep " + std::to_string(ep) + ", etp " + std::to_string(etp) + ")";
}

// Checks that need no communication and give the same answer on every rank with the same
// plan (except world_rank, which is this rank's own).
Status check_plan(const plan::Plan& plan, int world_rank, int mpi_rank, int mpi_size) {
  const std::string sizes = "dp " + std::to_string(plan.dp) + " x pp " + std::to_string(plan.pp) +
                            " x tp " + std::to_string(plan.tp);
  if (plan.dp < 1 || plan.pp < 1 || plan.tp < 1 || plan.ep < 1 || plan.etp < 1)
    return Status::InvalidArgument("plan: every parallel size must be at least 1, got " + sizes +
                                   ", ep " + std::to_string(plan.ep) + ", etp " +
                                   std::to_string(plan.etp));
  if (int64_t{plan.dp} * plan.pp * plan.tp != plan.world_size)
    return Status::InvalidArgument("plan: " + sizes + " is not its world size " +
                                   std::to_string(plan.world_size));
  if (plan.world_size != mpi_size)
    return Status::InvalidArgument("plan: " + sizes + " = " + std::to_string(plan.world_size) +
                                   " ranks, but MPI started " + std::to_string(mpi_size));
  if (plan.ep_dp < 1 || plan.dp % plan.ep_dp != 0 || (plan.ep_dp > 1 && plan.etp != 1))
    return Status::InvalidArgument("plan: an expert group over ep_dp " + std::to_string(plan.ep_dp) +
                                   " replicas needs dp " + std::to_string(plan.dp) +
                                   " a multiple of it and etp 1, got etp " + std::to_string(plan.etp));
  if (plan.ep * plan.etp != plan.tp * plan.ep_dp)
    return Status::InvalidArgument("plan: ep " + std::to_string(plan.ep) + " x etp " +
                                   std::to_string(plan.etp) + " must equal tp " +
                                   std::to_string(plan.tp) +
                                   (plan.ep_dp > 1 ? " x ep_dp " + std::to_string(plan.ep_dp) : ""));
  if (static_cast<int>(plan.ranks.size()) != plan.world_size)
    return Status::InvalidArgument("plan: " + std::to_string(plan.ranks.size()) +
                                   " rank coordinates for a world of " +
                                   std::to_string(plan.world_size));
  if (world_rank != mpi_rank)
    return Status::InvalidArgument("asked for world rank " +
                                   std::to_string(world_rank) + " on MPI rank " +
                                   std::to_string(mpi_rank));
  return Status::Ok();
}

}  // namespace

Result<ProcessGroups> ProcessGroups::create(const plan::Plan& plan, int world_rank,
                                            dump::Timeline* timeline) {
  int mpi_rank = 0, mpi_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  DZ_RETURN_IF_ERROR(
      agree(check_plan(plan, world_rank, mpi_rank, mpi_size)).with_context("process groups"));

  // Row-major Cartesian order with dims {dp / ep_dp, ep_dp, pp, tp / etp, etp} is the plan's
  // rank order: dp_rank = outer * ep_dp + inner and tp_rank = a * etp + etp_rank; the expert
  // group keeps {inner, a}, so ep_rank = inner * (tp / etp) + a (= tp_rank / etp when ep_dp is
  // 1). reorder = 0 keeps world ranks as they are.
  const int ep_dp = plan.ep_dp;
  int dims[5] = {plan.dp / ep_dp, ep_dp, plan.pp, plan.tp / plan.etp, plan.etp};
  int periods[5] = {0, 0, 0, 0, 0};
  MPI_Comm cart = MPI_COMM_NULL;
  int created = MPI_SUCCESS;
  {
    WatchedOp watched(setup_op("cart_create"));
    created = MPI_Cart_create(MPI_COMM_WORLD, 5, dims, periods, 0, &cart);
  }
  if (created != MPI_SUCCESS || cart == MPI_COMM_NULL)
    return Status::Internal("process groups: MPI_Cart_create failed");
  int c[5] = {0, 0, 0, 0, 0};  // dp outer, dp inner, pp, tp / etp, etp
  MPI_Cart_coords(cart, mpi_rank, 5, c);
  const int dp = c[0] * ep_dp + c[1], pp = c[2], etp = c[4], tp = c[3] * plan.etp + etp,
            ep = c[1] * (plan.tp / plan.etp) + c[3];
  const std::string s_dp = "dp" + std::to_string(dp), s_pp = "pp" + std::to_string(pp),
                    s_tp = "tp" + std::to_string(tp), s_ep = "ep" + std::to_string(ep),
                    s_etp = "etp" + std::to_string(etp);
  // A wide expert group spans the replicas dp first..first + ep_dp - 1.
  const std::string s_ep_dp = ep_dp > 1 ? "dp" + std::to_string(c[0] * ep_dp) + "-" +
                                              std::to_string(c[0] * ep_dp + ep_dp - 1)
                                        : s_dp;

  ProcessGroups g;
  g.coord_ = plan.ranks[static_cast<size_t>(mpi_rank)];
  g.world_ = std::make_unique<MpiComm>(cart, true, "world", "world", timeline);
  auto sub = [&](const int (&keep)[5], const char* name, const std::string& where) {
    MPI_Comm sub_comm = MPI_COMM_NULL;
    int subbed = MPI_SUCCESS;
    {
      WatchedOp watched(setup_op("cart_sub"));
      subbed = MPI_Cart_sub(cart, keep, &sub_comm);
    }
    DZ_CHECK(subbed == MPI_SUCCESS, "MPI_Cart_sub for " << name);
    return std::make_unique<MpiComm>(sub_comm, true, name, std::string(name) + "@" + where,
                                     timeline);
  };
  g.tp_ = sub({0, 0, 0, 1, 1}, "tp", s_pp + "." + s_dp);
  g.pp_ = sub({0, 0, 1, 0, 0}, "pp", s_dp + "." + s_tp);
  g.dp_ = sub({1, 1, 0, 0, 0}, "dp", s_pp + "." + s_tp);
  g.ep_ = sub({0, 1, 0, 1, 0}, "ep", s_pp + "." + s_ep_dp + "." + s_etp);
  g.etp_ = sub({0, 0, 0, 0, 1}, "etp", s_pp + "." + s_dp + "." + s_ep);

  // Every rank checks that MPI placed it where the plan says, then all agree.
  const plan::RankCoord& want = g.coord_;
  Status local;
  if (want.rank != mpi_rank || want.dp_rank != dp || want.pp_rank != pp || want.tp_rank != tp ||
      want.ep_rank != ep || want.etp_rank != etp) {
    local = Status::InvalidArgument(
        "plan coordinates of rank " + std::to_string(want.rank) + " " +
        coord_str(want.dp_rank, want.pp_rank, want.tp_rank, want.ep_rank, want.etp_rank) +
        " differ from MPI's Cartesian coordinates " + coord_str(dp, pp, tp, ep, etp) +
        " of rank " + std::to_string(mpi_rank) +
        "; the plan must order ranks as rank = ((dp*pp)+pp)*tp + tp, (dp % ep_dp)*tp + tp = ep*etp + etp");
  } else if (g.tp_->rank() != tp || g.pp_->rank() != pp || g.dp_->rank() != dp ||
             g.ep_->rank() != ep || g.etp_->rank() != etp || g.world_->rank() != mpi_rank ||
             g.tp_->size() != plan.tp || g.pp_->size() != plan.pp || g.dp_->size() != plan.dp ||
             g.ep_->size() != plan.ep || g.etp_->size() != plan.etp) {
    local = Status::Internal("MPI_Cart_sub group ranks/sizes differ from the Cartesian "
                             "coordinates " + coord_str(dp, pp, tp, ep, etp));
  }
  DZ_RETURN_IF_ERROR(agree(local).with_context("process groups"));
  return g;
}

}  // namespace dayzero::comm

// Wide expert parallelism in the planner: plans whose routed experts are split ep ways across
// ep_dp data-parallel replicas (plan.h ep_dp; ep = ep_dp x tp, etp = 1), the expert group's
// all-to-all traffic in the cost model, and the expert placement of the plan. Requested with a
// fixed parallel.ep beyond tp; for other MoE requests the candidates are listed beside the
// ep x etp = tp ones (planner.h). docs/planner.md "Wide expert parallelism".
#pragma once

#include <vector>

#include "core/status.h"
#include "plan/planner.h"

namespace dayzero::plan {

// A fixed ep, no fixed etp, and tp not fixed or smaller than ep.
bool wide_ep_requested(const PlanRequest& req);

// The plan of the lowest cost among the wide candidates of the fixed sizes (tp 1 when not
// fixed; pp and dp as fixed or enumerated). Errors (InvalidArgument): a model without routed
// experts, n_expert % ep != 0, ep not a multiple of tp, an expert group that does not tile the
// world, a tp that does not fit (check_layout), or nothing that fits in memory.
Result<Plan> choose_wide_ep_plan(const PlanRequest& req, int world, std::vector<Candidate>* considered);

// Every wide candidate of an unfixed MoE request: tp dividing a node, ep a divisor of
// n_expert wider than a node (each expert group of ep ranks spanning nodes), pp a divisor of
// the world; the ones whose expert group does not tile the world are listed with the reason.
std::vector<Candidate> wide_ep_candidates(const PlanRequest& req, int world);

// Every rank's estimate of a wide plan (ep_dp > 1) from per-layer tables instead of one
// slice_for per spec and rank: the same figures as rank_memory (a test holds them equal), in
// time independent of the number of experts times ranks.
std::vector<RankMemory> wide_ep_memory(const PlanRequest& req, const Plan& plan);

}  // namespace dayzero::plan

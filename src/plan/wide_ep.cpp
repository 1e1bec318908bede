// Wide expert parallelism in the planner (wide_ep.h): per-layer byte tables built once per tp
// (non-expert tensors per tp rank, routed experts per expert), from which every candidate's
// stages, per-rank memory, all-to-all traffic and cost follow without touching the specs again.
#include "plan/wide_ep.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/check.h"

namespace dayzero::plan {
// Named, not anonymous: the unity build puts this file beside planner.cpp.
namespace wide_internal {

bool routed(const model::TensorSpec& s) { return s.rule == model::ShardRule::kExpertOwned && s.expert >= 0; }

// Routed expert specs, each one expert of hp.n_expert (the tables index them by expert).
bool has_routed(const PlanRequest& req) {
  bool any = false;
  for (const auto& s : req.specs)
    if (routed(s)) {
      if (s.n_expert != req.hp.n_expert || s.expert >= s.n_expert) return false;
      any = true;
    }
  return any;
}

// Stage kinds of the tensors outside the decoder layers, as the planner probes them.
enum Edge { kFirst = 0, kLast = 1, kBoth = 2 };
Edge edge_of(int s, int pp) { return pp == 1 ? kBoth : s == 0 ? kFirst : kLast; }

struct Tables {
  int tp = 1, n_layer = 0, n_expert = 0;
  std::vector<std::vector<int64_t>> dense;        // [tp][n_layer]: non-expert bytes per layer
  std::array<std::vector<int64_t>, 3> edge;       // [Edge][tp]: tensors outside the layers
  std::vector<int64_t> lm_head;                   // [tp]
  std::vector<std::vector<int64_t>> expert;       // [n_layer][n_expert]: one routed expert's bytes
  std::array<std::vector<int64_t>, 3> edge_expert;  // [Edge][n_expert]: routed experts outside the layers
  std::vector<bool> moe_layer;                    // [n_layer]
};

Tables build(const PlanRequest& req, const MemoryParams& mp, int tp) {
  Tables t;
  t.tp = tp;
  t.n_layer = static_cast<int>(req.hp.n_layer);
  t.n_expert = static_cast<int>(req.hp.n_expert);
  t.dense.assign(tp, std::vector<int64_t>(t.n_layer, 0));
  for (auto& e : t.edge) e.assign(tp, 0);
  for (auto& e : t.edge_expert) e.assign(std::max(1, t.n_expert), 0);
  t.lm_head.assign(tp, 0);
  t.expert.assign(t.n_layer, std::vector<int64_t>(std::max(1, t.n_expert), 0));
  t.moe_layer.assign(t.n_layer, false);
  const std::array<Stage, 3> probes = {Stage{0, 0, 0, true, false}, Stage{0, 0, 0, false, true},
                                       Stage{0, 0, 0, true, true}};
  for (size_t i = 0; i < req.specs.size(); ++i) {
    const model::TensorSpec& s = req.specs[i];
    if (s.skip_load) continue;
    const bool in_layers = s.layer >= 0 && s.layer < t.n_layer;
    std::array<bool, 3> held{};
    if (!in_layers)
      for (int k = 0; k < 3; ++k) held[k] = stage_holds(s, req.hp, probes[k], req.names);
    if (routed(s)) {
      const int64_t b = held_bytes(s, i, Slice{true, -1, 0, 0}, mp);
      if (in_layers) {
        t.expert[s.layer][s.expert] += b;
        t.moe_layer[s.layer] = true;
      }
      for (int k = 0; k < 3 && !in_layers; ++k)
        if (held[k]) t.edge_expert[k][s.expert] += b;
      continue;
    }
    for (int r = 0; r < tp; ++r) {
      const int64_t b = held_bytes(s, i, rank_slice(s, tp, 1, 1, r), mp);
      if (in_layers) {
        t.dense[r][s.layer] += b;
        continue;
      }
      for (int k = 0; k < 3; ++k)
        if (held[k]) t.edge[k][r] += b;
      if (s.name == req.names.lm_head) t.lm_head[r] += b;
    }
  }
  return t;
}

// Routed-expert bytes ep rank e holds of layers [b, end) (and of the edge tensors of its stage).
int64_t expert_bytes(const Tables& t, int ep, int e, int b, int end, int edge) {
  const int per = t.n_expert / ep;
  int64_t sum = 0;
  for (int l = b; l < end; ++l)
    for (int x = e * per; x < (e + 1) * per; ++x) sum += t.expert[l][x];
  if (edge >= 0)
    for (int x = e * per; x < (e + 1) * per; ++x) sum += t.edge_expert[edge][x];
  return sum;
}

int64_t dense_bytes(const Tables& t, int r, int b, int end, int edge) {
  int64_t sum = edge >= 0 ? t.edge[edge][r] : 0;
  for (int l = b; l < end; ++l) sum += t.dense[r][l];
  return sum;
}

RankMemory memory_of(const Tables& t, const PlanRequest& req, const MemoryParams& mp, const Plan& p, int rank) {
  const RankCoord& c = p.coord(rank);
  const Stage& st = p.stage_of(rank);
  const int edge = st.has_embedding || st.has_lm_head ? edge_of(c.pp_rank, p.pp) : -1;
  RankMemory m;
  m.weights = dense_bytes(t, c.tp_rank, st.layer_begin, st.layer_end, edge) +
              expert_bytes(t, p.ep, c.ep_rank, st.layer_begin, st.layer_end, edge);
  const StageCache sc = stage_cache(st.layer_begin, st.layer_end, p.tp, mp);
  m.kv_cache = sc.kv;
  m.state = sc.state;
  m.activations = activation_bytes(req.hp, p.tp, st.has_lm_head, mp);
  m.headroom = mp.headroom_bytes;
  return m;
}

// The world ranks of expert group 0 (replicas 0 .. ep_dp - 1, stage 0), in ep_rank order.
std::vector<int> group_members(int ep, int tp, int pp) {
  std::vector<int> m;
  for (int e = 0; e < ep; ++e) m.push_back((e / tp) * pp * tp + e % tp);
  return m;
}

struct Traffic {
  int64_t bytes = 0;     // per token per MoE layer, leaving or reaching the rank
  double inter = 0;      // share of it between nodes
  double seconds = 0;    // per token per MoE layer
};

Traffic all_to_all(const PlanRequest& req, int ep, int tp, int pp) {
  const topology::Topology& topo = req.topo;
  const double whole = 2.0 * static_cast<double>(req.hp.n_expert_used) * static_cast<double>(req.hp.n_embd) *
                       static_cast<double>(req.bytes_per_activation);
  const std::vector<int> m = group_members(ep, tp, pp);
  int same = 0;
  for (int r : m) same += r / topo.gpus_per_node == m[0] / topo.gpus_per_node;
  Traffic t;
  const double intra = whole * (same - 1) / ep, inter = whole * (ep - same) / ep;
  t.bytes = static_cast<int64_t>(std::llround(intra + inter));
  t.inter = intra + inter > 0 ? inter / (intra + inter) : 0;
  t.seconds = 2 * (same < ep ? topo.inter_node_latency_us : topo.intra_node_latency_us) * 1e-6 +
              intra / (topo.intra_node_gbps * 1e9) + inter / (topo.inter_node_gbps * 1e9);
  return t;
}

struct Built {
  Candidate c;
  Plan plan;
};

std::string gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  return buf;
}

// One candidate: the layout checks, then stages, ranks, memory and cost. c.reason says why not.
Built evaluate(const PlanRequest& req, const Status& lay, const Tables& t, const MemoryParams& mp,
               double bytes_per_param, int world, int tp, int ep, int pp) {
  Built out;
  Candidate& c = out.c;
  c.tp = tp;
  c.pp = pp;
  c.ep = ep;
  c.etp = 1;
  c.ep_dp = ep / tp;
  c.dp = world % (pp * tp) == 0 ? world / (pp * tp) : 0;
  c.cost = std::numeric_limits<double>::infinity();
  const auto reject = [&](const std::string& why) {
    c.reason = why;
    return out;
  };
  if (!lay.ok()) return reject(lay.message());
  if (ep % tp != 0) return reject("ep=" + std::to_string(ep) + " is not a multiple of tp=" + std::to_string(tp));
  if (t.n_expert % ep != 0)
    return reject(std::to_string(t.n_expert) + " experts are not divisible by ep=" + std::to_string(ep));
  if (world % (ep * pp) != 0)
    return reject("an expert group of ep=" + std::to_string(ep) + " x pp=" + std::to_string(pp) +
                  " stages does not tile the world of " + std::to_string(world) + " ranks");
  if (req.dp && *req.dp != c.dp) return reject("dp is fixed to " + std::to_string(*req.dp));

  const int n = t.n_layer;
  std::vector<int64_t> w(n);
  for (int l = 0; l < n; ++l) {
    int64_t d = 0, e = 0;
    for (int r = 0; r < tp; ++r) d = std::max(d, t.dense[r][l]);
    for (int x = 0; x < ep; ++x) e = std::max(e, expert_bytes(t, ep, x, l, l + 1, -1));
    const StageCache sc = stage_cache(l, l + 1, tp, mp);
    w[l] = d + e + sc.kv + sc.state;
  }
  const auto edge_max = [&](Edge k) {
    int64_t m = 0;
    for (int r = 0; r < tp; ++r) m = std::max(m, t.edge[k][r]);
    return m;
  };
  const int64_t logits = activation_bytes(req.hp, tp, true, mp) - activation_bytes(req.hp, tp, false, mp);
  const std::vector<int> bounds = balance_layers(req.layer_descs, w, pp, edge_max(pp == 1 ? kBoth : kFirst),
                                                 pp == 1 ? 0 : edge_max(kLast) + logits);

  Plan& p = out.plan;
  p.world_size = world;
  p.dp = c.dp;
  p.pp = pp;
  p.tp = tp;
  p.ep = ep;
  p.etp = 1;
  p.ep_dp = c.ep_dp;
  lay_out_ranks(p, bounds, true, req.topo);
  // An expert group spans ep_dp replicas: its ranks are those replicas' tp ranks in turn.
  for (RankCoord& rc : p.ranks) rc.ep_rank = (rc.dp_rank % c.ep_dp) * tp + rc.tp_rank;
  // Replicas ep_dp and later repeat the first group of ep_dp replicas.
  const int group = c.ep_dp * pp * tp;
  p.memory.resize(world);
  for (int r = 0; r < group; ++r) p.memory[r] = memory_of(t, req, mp, p, r);
  for (int r = group; r < world; ++r) p.memory[r] = p.memory[r % group];
  p.memory_cap_bytes = req.topo.memory_cap_bytes();
  const Fit fit = check_fit(p.memory, p.memory_cap_bytes);
  c.max_rank_bytes = fit.worst_bytes;
  c.worst_rank = fit.worst_rank;

  // Cost per generated token (docs/planner.md "Wide expert parallelism"): each stage reads its
  // weights (the rank's attention/dense share and its experts), plus tp all-reduces and the
  // expert group's dispatch and combine per MoE layer; every attention group (dp of them) its
  // own tokens.
  const topology::Topology& topo = req.topo;
  const Traffic a2a = all_to_all(req, ep, tp, pp);
  c.all_to_all_bytes_per_token = a2a.bytes;
  c.inter_node_share = a2a.inter;
  c.expert_bytes_per_rank = expert_bytes(t, ep, 0, 0, n, -1);
  const double d = static_cast<double>(req.hp.n_embd), a = static_cast<double>(req.bytes_per_activation);
  const double intra_lat = topo.intra_node_latency_us * 1e-6;
  const double all_reduce = tp > 1 ? intra_lat + 2.0 * (tp - 1) / tp * d * a / (topo.intra_node_gbps * 1e9) : 0.0;
  const double ctx_avg = static_cast<double>(req.max_context_tokens) / 2;
  const double attn_flops_layer = 4.0 * ctx_avg * static_cast<double>(req.hp.n_head / tp) * req.hp.head_dim;
  double total = 0, t_max = 0;
  for (int s = 0; s < pp; ++s) {
    const int b = bounds[s], e = bounds[s + 1];
    const int edge = pp == 1 ? kBoth : s == 0 ? kFirst : s == pp - 1 ? kLast : -1;
    double wbytes = 0;
    for (int r = 0; r < tp; ++r)
      wbytes = std::max(wbytes, static_cast<double>(dense_bytes(t, r, b, e, -1) + (s == pp - 1 ? t.lm_head[r] : 0)));
    int64_t eb = 0;
    for (int x = 0; x < ep; ++x) eb = std::max(eb, expert_bytes(t, ep, x, b, e, edge));
    wbytes += static_cast<double>(eb);
    const double flops = 2.0 * wbytes / bytes_per_param + (e - b) * attn_flops_layer;
    double stage = std::max(flops / (topo.device_tflops * 1e12), wbytes / (topo.device_hbm_gbps * 1e9));
    int moe_layers = 0;
    for (int l = b; l < e; ++l) moe_layers += t.moe_layer[l];
    stage += 2.0 * (e - b) * all_reduce + moe_layers * a2a.seconds;
    if (s != pp - 1) stage += topo.inter_node_latency_us * 1e-6 + d * a / (topo.inter_node_gbps * 1e9);
    total += stage;
    t_max = std::max(t_max, stage);
  }
  const double m = std::max(1, req.batch);
  c.cost = (total + (m - 1) * t_max) / (m * c.dp);
  c.feasible = fit.fits();
  if (!c.feasible) c.reason = describe_fit(fit);

  // The placement: block e on ep_rank e, the ranks of the first expert group that hold it.
  ExpertPlacement& ex = p.experts;
  ex.present = true;
  ex.n_expert = t.n_expert;
  ex.top_k = static_cast<int>(req.hp.n_expert_used);
  ex.all_to_all_bytes_per_token = a2a.bytes;
  ex.inter_node_share = a2a.inter;
  const int per = t.n_expert / ep;
  for (int e = 0; e < ep; ++e) {
    ExpertBlock blk;
    blk.ep_rank = e;
    blk.expert_begin = e * per;
    blk.expert_end = (e + 1) * per;
    for (int s = 0; s < pp; ++s) {
      const int edge = pp == 1 ? kBoth : s == 0 ? kFirst : s == pp - 1 ? kLast : -1;
      blk.bytes += expert_bytes(t, ep, e, bounds[s], bounds[s + 1], edge);
      blk.ranks.push_back(((e / tp) * pp + s) * tp + e % tp);
    }
    ex.blocks.push_back(std::move(blk));
  }
  char why[320];
  std::snprintf(why, sizeof why,
                "ep=%d: %d of %d experts per rank (%s of routed experts), dispatch + combine %lld bytes per token and "
                "MoE layer, %.0f%% of it between nodes; attention replicated over %d dp-attention group(s) of tp=%d",
                ep, per, t.n_expert, gib(c.expert_bytes_per_rank).c_str(),
                static_cast<long long>(a2a.bytes), 100 * a2a.inter, c.dp, tp);
  ex.reason = why;
  return out;
}

double average_bytes_per_param(const PlanRequest& req, const MemoryParams& mp) {
  double bytes_per_param = static_cast<double>(req.bytes_per_weight);
  if (mp.stored_bytes.empty()) return bytes_per_param;
  double bytes = 0, elems = 0;
  for (size_t i = 0; i < req.specs.size(); ++i) {
    if (req.specs[i].skip_load) continue;
    bytes += static_cast<double>(held_bytes(req.specs[i], i, Slice{true, -1, 0, 0}, mp));
    elems += static_cast<double>(shape_numel(req.specs[i].shape));
  }
  return elems > 0 && bytes > 0 ? bytes / elems : bytes_per_param;
}

// The layout checks of planner.h check_layout that do not depend on ep: the model splits over
// tp and a tp group stays on one node; pp stages each start at a layer that may start one.
Status check_tp_layout(const PlanRequest& req, int tp) {
  DZ_RETURN_IF_ERROR(check_tp(req.specs, req.hp, req.layer_descs, tp));
  const int g = req.topo.gpus_per_node;
  if (tp > g || g % tp != 0)
    return Status::InvalidArgument(std::to_string(tp) + " does not divide the " + std::to_string(g) +
                                   " GPUs of a node (a tp group would span nodes)");
  return Status::Ok();
}

Status check_pp(const PlanRequest& req, int pp) {
  int starts = 0;
  for (size_t l = 0; l < req.layer_descs.size(); ++l) starts += l == 0 || req.layer_descs[l].stage_start();
  if (pp > starts)
    return Status::InvalidArgument(std::to_string(pp) + " stages, but only " + std::to_string(starts) + " of the " +
                                   std::to_string(req.hp.n_layer) + " layers can start one");
  return Status::Ok();
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Every (tp, ep, pp) the request allows, each evaluated; keep_plans keeps the plans too.
std::vector<Built> enumerate(const PlanRequest& req, int world, bool keep_plans) {
  const MemoryParams mp = req.memory_params();
  const double bpp = average_bytes_per_param(req, mp);
  std::vector<Built> out;
  std::map<std::pair<int, int>, Status> layout;  // check_layout of each (tp, pp), once
  const int n_expert = static_cast<int>(req.hp.n_expert);
  for (int tp : divisors(req.topo.gpus_per_node)) {
    if (req.tp && *req.tp != tp) continue;
    if (!req.tp && req.ep && tp != 1) continue;  // a fixed ep without tp: attention whole on every rank
    const Status tp_ok = check_tp_layout(req, tp);
    const Tables t = build(req, mp, tp);
    for (int ep : req.ep ? std::vector<int>{*req.ep} : divisors(n_expert)) {
      if (ep <= tp || ep > world) continue;
      // Unasked, only expert groups wider than a node are listed: narrower ones fit inside tp.
      if (!req.ep && ep <= req.topo.gpus_per_node) continue;
      for (int pp : divisors(world)) {
        if (req.pp && *req.pp != pp) continue;
        if (!req.pp && world % (ep * pp) != 0 && pp != 1) continue;  // list the untileable ep once, at pp 1
        auto [it, added] = layout.try_emplace({tp, pp});
        if (added) it->second = tp_ok.ok() ? check_pp(req, pp) : tp_ok;
        Built b = evaluate(req, it->second, t, mp, bpp, world, tp, ep, pp);
        if (!keep_plans) b.plan = Plan{};
        out.push_back(std::move(b));
      }
    }
  }
  return out;
}

}  // namespace wide_internal

using wide_internal::build;
using wide_internal::Built;
using wide_internal::enumerate;
using wide_internal::has_routed;
using wide_internal::memory_of;

bool wide_ep_requested(const PlanRequest& req) { return req.ep && !req.etp && (!req.tp || *req.ep > *req.tp); }

std::vector<Candidate> wide_ep_candidates(const PlanRequest& req, int world) {
  std::vector<Candidate> out;
  if (!validate(req.topo).ok() || req.hp.n_expert <= 0 || !has_routed(req)) return out;
  for (Built& b : enumerate(req, world, false)) out.push_back(b.c);
  return out;
}

Result<Plan> choose_wide_ep_plan(const PlanRequest& req, int world, std::vector<Candidate>* considered) {
  DZ_RETURN_IF_ERROR(validate(req.topo));
  const std::string what = "parallel.ep=" + std::to_string(*req.ep);
  if (!has_routed(req) || req.hp.n_expert <= 0) return Status::InvalidArgument(what + ": the model has no routed experts");
  if (req.layers) return Status::InvalidArgument(what + ": a replay runs without wide expert parallelism; fix tp to ep or leave ep out");
  if (world < 1 || world > req.topo.world_size())
    return Status::InvalidArgument("a world of " + std::to_string(world) + " ranks does not fit " +
                                   std::to_string(req.topo.nodes) + " node(s) x " +
                                   std::to_string(req.topo.gpus_per_node) + " GPUs");
  const int tp = req.tp.value_or(1);
  if (*req.ep % tp != 0)
    return Status::InvalidArgument(what + ": wide expert parallelism needs ep a multiple of tp=" + std::to_string(tp));
  if (req.hp.n_expert % *req.ep != 0)
    return Status::InvalidArgument(what + ": " + std::to_string(req.hp.n_expert) + " experts are not divisible by " +
                                   std::to_string(*req.ep));
  if (world % *req.ep != 0)
    return Status::InvalidArgument(what + ": an expert group of " + std::to_string(*req.ep) +
                                   " ranks does not tile the world of " + std::to_string(world) + " ranks");
  std::vector<Built> all = enumerate(req, world, true);
  if (considered) {
    considered->clear();
    for (const Built& b : all) considered->push_back(b.c);
  }
  int best = -1, least_short = -1;
  for (int i = 0; i < static_cast<int>(all.size()); ++i) {
    const Candidate& c = all[i].c;
    if (c.feasible) {
      if (best < 0 || c.cost < all[best].c.cost) best = i;
    } else if (c.max_rank_bytes > 0 && (least_short < 0 || c.max_rank_bytes < all[least_short].c.max_rank_bytes)) {
      least_short = i;
    }
  }
  if (best < 0) {
    if (least_short >= 0)
      return Status::InvalidArgument("no plan fits: best candidate dp=" + std::to_string(all[least_short].c.dp) +
                                     " pp=" + std::to_string(all[least_short].c.pp) + " tp=" + std::to_string(tp) +
                                     " ep=" + std::to_string(*req.ep) + " " + all[least_short].c.reason);
    return Status::InvalidArgument(what + ": " + (all.empty() ? std::string("no layout matches the fixed sizes")
                                                               : all.front().c.reason));
  }
  Plan p = std::move(all[best].plan);
  p.cost_per_token_s = all[best].c.cost;
  p.caveats = req.caveats;
  p.vision = vision_placement(req.specs, req.hp, p, req.memory_params(), req.names);
  return p;
}

std::vector<RankMemory> wide_ep_memory(const PlanRequest& req, const Plan& plan) {
  const MemoryParams mp = req.memory_params();
  const wide_internal::Tables t = build(req, mp, plan.tp);
  std::vector<RankMemory> out(plan.world_size);
  const int group = plan.ep_dp * plan.pp * plan.tp;
  for (int r = 0; r < plan.world_size; ++r) out[r] = r < group ? memory_of(t, req, mp, plan, r) : out[r % group];
  return out;
}

}  // namespace dayzero::plan

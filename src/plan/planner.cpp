// The planner (planner.h): enumerate dp x pp x tp (and, for MoE models, the ep x etp splits of
// tp), reject by layout constraints and by memory, rank by the cost model, lay out stages and
// ranks. Candidates are evaluated from per-layer byte tables built once per tp size and ep
// split with rank_slice and held_bytes, so a world of 1024 ranks takes
// milliseconds; the chosen plan's memory is then recounted with slice_for (the loader's rule)
// and must agree.
#include "plan/planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "plan/wide_ep.h"

namespace dayzero::plan {

MemoryParams PlanRequest::memory_params() const {
  MemoryParams p;
  p.bytes_per_weight = bytes_per_weight;
  p.bytes_per_activation = bytes_per_activation;
  p.max_context_tokens = max_context_tokens;
  p.batch = batch;
  p.headroom_bytes = headroom_bytes;
  p.stored_bytes = stored_bytes;
  p.cache = layer_caches(layer_descs);
  return p;
}

namespace {

struct EpSplit {
  int ep = 1, etp = 1;
};

Result<EpSplit> ep_split(const PlanRequest& req, int tp) {
  const std::string t = std::to_string(tp);
  if (req.ep && req.etp) {
    if (*req.ep * *req.etp != tp)
      return Status::InvalidArgument("ep=" + std::to_string(*req.ep) + " x etp=" + std::to_string(*req.etp) +
                                     " is not tp=" + t);
    return EpSplit{*req.ep, *req.etp};
  }
  if (req.ep) {
    if (tp % *req.ep != 0) return Status::InvalidArgument("ep=" + std::to_string(*req.ep) + " does not divide tp=" + t);
    return EpSplit{*req.ep, tp / *req.ep};
  }
  if (req.etp) {
    if (tp % *req.etp != 0)
      return Status::InvalidArgument("etp=" + std::to_string(*req.etp) + " does not divide tp=" + t);
    return EpSplit{tp / *req.etp, *req.etp};
  }
  return EpSplit{1, tp};
}

bool has_routed_experts(const PlanRequest& req) {
  for (const auto& s : req.specs)
    if (s.rule == model::ShardRule::kExpertOwned && s.expert >= 0) return true;
  return false;
}

Status experts_fit(const PlanRequest& req, const EpSplit& e) {
  for (const auto& s : req.specs) DZ_RETURN_IF_ERROR(check_experts(s, e.ep, e.etp));
  return Status::Ok();
}

// The ep x etp splits of tp to evaluate: the one the fixed sizes give (ep_split); with none
// fixed, ep=1 etp=tp for a dense model, and for a MoE model every ep | tp whose split fits the
// experts (check_experts), ep ascending. Error: the fixed split is inconsistent or does not fit
// the experts, or (none fixed) no split fits them (the reason of ep=1, etp=tp).
Result<std::vector<EpSplit>> ep_splits(const PlanRequest& req, int tp, bool moe) {
  DZ_ASSIGN_OR_RETURN(EpSplit fixed, ep_split(req, tp));
  if (req.ep || req.etp || !moe) {
    DZ_RETURN_IF_ERROR(experts_fit(req, fixed));
    return std::vector<EpSplit>{fixed};
  }
  std::vector<EpSplit> out;
  Status first = Status::Ok();
  for (int ep = 1; ep <= tp; ++ep) {
    if (tp % ep != 0) continue;
    const EpSplit e{ep, tp / ep};
    const Status ok = experts_fit(req, e);
    if (ok.ok()) out.push_back(e);
    else if (first.ok()) first = ok;
  }
  if (out.empty()) return first;
  return out;
}

// Stage kinds for the tensors outside the decoder layers.
enum EdgeKind { kFirstOnly = 0, kLastOnly = 1, kBoth = 2 };

EdgeKind edge_kind(int s, int pp) {
  if (pp == 1) return kBoth;
  return s == 0 ? kFirstOnly : kLastOnly;
}

bool stage_has_edge(int s, int pp) { return s == 0 || s == pp - 1; }

// What every tp rank of a tp group of `tp` holds, in bytes: of each decoder layer (prefix sums
// per rank) and of the tensors outside the layers, for each kind of edge stage.
struct Tables {
  int tp = 1;
  std::vector<std::vector<int64_t>> prefix;  // [tp][n_layer + 1]
  std::vector<int64_t> layer_max;            // [n_layer] max over tp ranks
  std::array<std::vector<int64_t>, 3> edge;  // [EdgeKind][tp]
  std::vector<int64_t> lm_head;              // [tp] the lm_head slice (for flops)

  int64_t layers(int t, int b, int e) const { return prefix[t][e] - prefix[t][b]; }
  int64_t edge_max(EdgeKind k) const { return *std::max_element(edge[k].begin(), edge[k].end()); }
};

Tables build_tables(const PlanRequest& req, const MemoryParams& mp, int tp, EpSplit eps) {
  const int n = static_cast<int>(req.hp.n_layer);
  Tables tb;
  tb.tp = tp;
  std::vector<std::vector<int64_t>> per_layer(tp, std::vector<int64_t>(n, 0));
  for (auto& e : tb.edge) e.assign(tp, 0);
  tb.lm_head.assign(tp, 0);
  // Probe stages with no decoder layers: stage_holds decides where each edge tensor goes.
  const std::array<Stage, 3> probes = {Stage{0, 0, 0, true, false}, Stage{0, 0, 0, false, true},
                                       Stage{0, 0, 0, true, true}};
  for (size_t i = 0; i < req.specs.size(); ++i) {
    const model::TensorSpec& s = req.specs[i];
    if (s.skip_load) continue;  // held_bytes: nothing
    const bool in_layers = s.layer >= 0 && s.layer < n;
    std::array<bool, 3> held{};
    if (!in_layers)
      for (int k = 0; k < 3; ++k) held[k] = stage_holds(s, req.hp, probes[k], req.names);
    for (int t = 0; t < tp; ++t) {
      const int64_t b = held_bytes(s, i, rank_slice(s, tp, eps.ep, eps.etp, t), mp);
      if (in_layers) {
        per_layer[t][s.layer] += b;
        continue;
      }
      for (int k = 0; k < 3; ++k)
        if (held[k]) tb.edge[k][t] += b;
      if (s.name == req.names.lm_head) tb.lm_head[t] += b;
    }
  }
  tb.prefix.assign(tp, std::vector<int64_t>(n + 1, 0));
  tb.layer_max.assign(n, 0);
  for (int t = 0; t < tp; ++t)
    for (int l = 0; l < n; ++l) {
      tb.prefix[t][l + 1] = tb.prefix[t][l] + per_layer[t][l];
      tb.layer_max[l] = std::max(tb.layer_max[l], per_layer[t][l]);
    }
  return tb;
}

// Contiguous layer ranges for pp stages, each with at least one layer, minimising the largest
// stage load (fixed costs of the first and last stage included). Greedy packing decides
// whether a cap is reachable; a binary search finds the smallest. Returns [pp + 1] bounds.
std::vector<int> balance(const std::vector<int64_t>& w, int pp, int64_t fixed_first, int64_t fixed_last) {
  const int n = static_cast<int>(w.size());
  if (pp == 1) return {0, n};
  std::vector<int64_t> prefix(n + 1, 0);
  for (int l = 0; l < n; ++l) prefix[l + 1] = prefix[l] + w[l];
  auto pack = [&](int64_t cap, std::vector<int>* bounds) {
    int i = 0;
    if (bounds) bounds->assign(1, 0);
    for (int s = 0; s < pp; ++s) {
      int64_t load = s == 0 ? fixed_first : 0;
      if (s == pp - 1) {
        if (fixed_last + prefix[n] - prefix[i] > cap) return false;
        i = n;
      } else {
        const int limit = n - (pp - 1 - s);  // leave one layer for every later stage
        int j = i;
        while (j < limit && load + w[j] <= cap) load += w[j++];
        if (j == i) return false;
        i = j;
      }
      if (bounds) bounds->push_back(i);
    }
    return true;
  };
  int64_t lo = 0, hi = fixed_first + fixed_last + prefix[n];
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (pack(mid, nullptr)) hi = mid;
    else lo = mid + 1;
  }
  std::vector<int> bounds;
  DZ_CHECK(pack(lo, &bounds), "stage balancing failed at its own bound");
  return bounds;
}

// The layers a pipeline stage may start at (the descriptors' stage_start; layer 0 always).
std::vector<int> stage_starts(const std::vector<model::LayerDesc>& layers) {
  std::vector<int> out;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l)
    if (l == 0 || layers[l].stage_start()) out.push_back(l);
  return out;
}

}  // namespace

// balance over runs of layers that stay together (each starts at a stage_starts layer).
std::vector<int> balance_layers(const std::vector<model::LayerDesc>& layers, const std::vector<int64_t>& w, int pp,
                                int64_t fixed_first, int64_t fixed_last) {
  std::vector<int> starts = stage_starts(layers);
  if (starts.size() == layers.size()) return balance(w, pp, fixed_first, fixed_last);
  const int n = static_cast<int>(w.size());
  std::vector<int64_t> unit_w;
  for (size_t u = 0; u < starts.size(); ++u) {
    const int end = u + 1 < starts.size() ? starts[u + 1] : n;
    int64_t sum = 0;
    for (int l = starts[u]; l < end; ++l) sum += w[l];
    unit_w.push_back(sum);
  }
  std::vector<int> bounds = balance(unit_w, pp, fixed_first, fixed_last);
  for (int& b : bounds) b = b < static_cast<int>(starts.size()) ? starts[b] : n;
  return bounds;
}

namespace {

struct Evaluation {
  std::vector<int> bounds;  // [pp + 1]
  int64_t max_bytes = 0;
  int worst_rank = -1;
  double cost = 0;
};

double seconds_for(double bytes, double gbps) { return bytes / (gbps * 1e9); }

// mp: req.memory_params(); bytes_per_param: the average bytes of a held weight element (flops).
Evaluation evaluate(const PlanRequest& req, const MemoryParams& mp, double bytes_per_param, const Tables& tb, int dp,
                    int pp) {
  const model::HParams& hp = req.hp;
  const int tp = tb.tp;
  const topology::Topology& topo = req.topo;
  const int n = static_cast<int>(hp.n_layer);
  const int64_t logits = activation_bytes(hp, tp, true, mp) - activation_bytes(hp, tp, false, mp);

  Evaluation ev;
  // A replay holds its layers only: no edge tensors, no logits (check_request: pp is 1).
  const bool edges = !req.layers;
  if (edges) {
    std::vector<int64_t> w(n);
    for (int l = 0; l < n; ++l) {
      const StageCache c = stage_cache(l, l + 1, tp, mp);
      w[l] = tb.layer_max[l] + c.kv + c.state;
    }
    ev.bounds = balance_layers(req.layer_descs, w, pp, tb.edge_max(pp == 1 ? kBoth : kFirstOnly),
                               pp == 1 ? 0 : tb.edge_max(kLastOnly) + logits);
  } else {
    ev.bounds = {req.layers->first, req.layers->second};
  }

  // Memory of replica 0, rank by rank (the same arithmetic as rank_memory).
  for (int s = 0; s < pp; ++s) {
    const int b = ev.bounds[s], e = ev.bounds[s + 1];
    const bool last = s == pp - 1 && edges;
    for (int t = 0; t < tp; ++t) {
      int64_t bytes = tb.layers(t, b, e) + (edges && stage_has_edge(s, pp) ? tb.edge[edge_kind(s, pp)][t] : 0);
      const StageCache c = stage_cache(b, e, tp, mp);
      bytes += c.kv + c.state + activation_bytes(hp, tp, last, mp) + mp.headroom_bytes;
      if (bytes > ev.max_bytes || ev.worst_rank < 0) {
        ev.max_bytes = bytes;
        ev.worst_rank = s * tp + t;
      }
    }
  }

  // Cost per generated token (docs/planner.md "Cost model").
  const double a = static_cast<double>(req.bytes_per_activation);
  const double d = static_cast<double>(hp.n_embd);
  const double ctx_avg = static_cast<double>(req.max_context_tokens) / 2;
  const double intra_lat = topo.intra_node_latency_us * 1e-6, inter_lat = topo.inter_node_latency_us * 1e-6;
  const double all_reduce =
      tp > 1 ? intra_lat + seconds_for(2.0 * (tp - 1) / tp * d * a, topo.intra_node_gbps) : 0.0;
  const double logits_gather =
      tp > 1 ? intra_lat + seconds_for(1.0 * (tp - 1) / tp * hp.n_vocab * 4.0, topo.intra_node_gbps) : 0.0;
  const double attn_flops_layer = 4.0 * ctx_avg * static_cast<double>(hp.n_head / tp) * hp.head_dim;
  double total = 0, t_max = 0;
  for (int s = 0; s < pp; ++s) {
    const int b = ev.bounds[s], e = ev.bounds[s + 1];
    const bool last = s == pp - 1 && edges;
    double compute = 0;
    // Cache read per token: the stage's caches at half the context and its state, as held.
    MemoryParams half = mp;
    half.max_context_tokens = std::max<int64_t>(1, req.max_context_tokens / 2);
    half.batch = 1;
    const StageCache c = stage_cache(b, e, tp, half);
    const double cache_read = static_cast<double>(c.kv + c.state);
    for (int t = 0; t < tp; ++t) {
      const double wbytes = static_cast<double>(tb.layers(t, b, e) + (last ? tb.lm_head[t] : 0));
      const double flops = 2.0 * wbytes / bytes_per_param + (e - b) * attn_flops_layer;
      const double traffic = wbytes + cache_read;
      compute = std::max(compute, std::max(flops / (topo.device_tflops * 1e12), seconds_for(traffic, topo.device_hbm_gbps)));
    }
    double stage = compute + 2.0 * (e - b) * all_reduce;
    if (s == 0 && edges) stage += all_reduce;  // vocabulary-parallel embedding
    if (last) stage += logits_gather;
    if (s != pp - 1) {
      const int here = s * tp / topo.gpus_per_node, next = (s + 1) * tp / topo.gpus_per_node;
      stage += here == next ? intra_lat + seconds_for(d * a, topo.intra_node_gbps)
                            : inter_lat + seconds_for(d * a, topo.inter_node_gbps);
    }
    total += stage;
    t_max = std::max(t_max, stage);
  }
  const double m = std::max(1, req.batch);
  ev.cost = (total + (m - 1) * t_max) / (m * dp);
  return ev;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool same_cost(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

// Lower cost first; ties: fewer stages, then smaller tp.
bool better(const Candidate& x, const Candidate& y) {
  if (!same_cost(x.cost, y.cost)) return x.cost < y.cost;
  if (x.pp != y.pp) return x.pp < y.pp;
  return x.tp < y.tp;
}

// Smaller need first; ties as above.
bool less_short(const Candidate& x, const Candidate& y) {
  if (x.max_rank_bytes != y.max_rank_bytes) return x.max_rank_bytes < y.max_rank_bytes;
  if (x.pp != y.pp) return x.pp < y.pp;
  return x.tp < y.tp;
}

std::string sizes(const Candidate& c) {
  return "dp=" + std::to_string(c.dp) + " pp=" + std::to_string(c.pp) + " tp=" + std::to_string(c.tp);
}

Status check_stages(const PlanRequest& req, int pp);

Status check_request(const PlanRequest& req, int world) {
  DZ_RETURN_IF_ERROR(validate(req.topo));
  if (req.hp.n_layer < 1) return Status::InvalidArgument("the model has no decoder layers");
  if (static_cast<int64_t>(req.layer_descs.size()) != req.hp.n_layer)
    return Status::InvalidArgument("layer descriptors: " + std::to_string(req.layer_descs.size()) + " for " +
                                   std::to_string(req.hp.n_layer) + " layers");
  if (req.bytes_per_weight < 1 || req.bytes_per_activation < 1)
    return Status::InvalidArgument("element sizes must be >= 1 byte");
  if (req.max_context_tokens < 1) return Status::InvalidArgument("max_context_tokens must be >= 1");
  if (req.batch < 1) return Status::InvalidArgument("batch must be >= 1");
  if (world < 1 || world > req.topo.world_size())
    return Status::InvalidArgument("a world of " + std::to_string(world) + " ranks does not fit " +
                                   std::to_string(req.topo.nodes) + " node(s) x " +
                                   std::to_string(req.topo.gpus_per_node) + " GPUs");
  const std::pair<const char*, const std::optional<int>*> fixed[] = {
      {"dp", &req.dp}, {"pp", &req.pp}, {"tp", &req.tp}, {"ep", &req.ep}, {"etp", &req.etp}};
  for (const auto& [name, v] : fixed)
    if (*v && **v < 1)
      return Status::InvalidArgument(std::string("parallel.") + name + "=" + std::to_string(**v) + ": must be >= 1");
  if (req.tp) {
    const Status s = check_layout(req, 1, *req.tp);
    if (!s.ok()) return s.with_context("parallel.tp=" + std::to_string(*req.tp));
  } else if (req.ep && req.etp) {
    const int tp = *req.ep * *req.etp;
    const Status s = check_layout(req, 1, tp);
    if (!s.ok())
      return s.with_context("parallel.ep=" + std::to_string(*req.ep) + " x etp=" + std::to_string(*req.etp) +
                            " (tp=" + std::to_string(tp) + ")");
  }
  if (req.layers) {
    const auto [first, end] = *req.layers;
    if (first < 0 || end <= first || end > req.hp.n_layer)
      return Status::InvalidArgument("layers " + std::to_string(first) + ":" + std::to_string(end) +
                                     ": not a non-empty range of the model's " + std::to_string(req.hp.n_layer) +
                                     " layers");
    if (req.pp && *req.pp != 1)
      return Status::InvalidArgument("parallel.pp=" + std::to_string(*req.pp) +
                                     ": a replay runs its layers on one pipeline stage; set parallel.pp to 1 or leave it out");
    if (first > 0 && !req.layer_descs[first].stage_start())
      return Status::InvalidArgument("layers " + std::to_string(first) + ":" + std::to_string(end) + ": layer " +
                                     std::to_string(first) + " " + req.layer_descs[first].stays_with_previous +
                                     ", so a range cannot start there");
  }
  if (req.pp && *req.pp > req.hp.n_layer)
    return Status::InvalidArgument("parallel.pp=" + std::to_string(*req.pp) + ": " + std::to_string(*req.pp) +
                                   " stages for " + std::to_string(req.hp.n_layer) + " layers (every stage needs one)");
  if (req.pp) DZ_RETURN_IF_ERROR(check_stages(req, *req.pp).with_context("parallel.pp=" + std::to_string(*req.pp)));
  for (const auto& [name, v] : fixed) {
    const std::string n = name;
    if (*v && (n == "dp" || n == "pp" || n == "tp") && world % **v != 0)
      return Status::InvalidArgument("parallel." + n + "=" + std::to_string(**v) + ": does not divide the world of " +
                                     std::to_string(world) + " ranks");
  }
  const int fixed_product = req.dp.value_or(1) * req.pp.value_or(1) * req.tp.value_or(req.ep && req.etp ? *req.ep * *req.etp : 1);
  if (req.dp && req.pp && req.tp && fixed_product != world)
    return Status::InvalidArgument("parallel: dp=" + std::to_string(*req.dp) + " x pp=" + std::to_string(*req.pp) +
                                   " x tp=" + std::to_string(*req.tp) + " = " + std::to_string(fixed_product) +
                                   " is not the world of " + std::to_string(world) + " ranks");
  if (world % fixed_product != 0)
    return Status::InvalidArgument("parallel: the fixed sizes multiply to " + std::to_string(fixed_product) +
                                   ", which does not divide the world of " + std::to_string(world) + " ranks");
  return Status::Ok();
}

Status check_stages(const PlanRequest& req, int pp) {
  if (pp > req.hp.n_layer)
    return Status::InvalidArgument(std::to_string(pp) + " stages for " + std::to_string(req.hp.n_layer) +
                                   " layers (every stage needs one)");
  const std::vector<int> starts = stage_starts(req.layer_descs);
  if (pp > static_cast<int>(starts.size())) {
    std::string why;  // the first layer that cannot start one, and why
    for (int l = 1; l < static_cast<int>(req.layer_descs.size()) && why.empty(); ++l)
      if (!req.layer_descs[l].stage_start())
        why = " (layer " + std::to_string(l) + " " + req.layer_descs[l].stays_with_previous + ": it stays on its stage)";
    return Status::InvalidArgument(std::to_string(pp) + " stages, but only " + std::to_string(starts.size()) +
                                   " of the " + std::to_string(req.hp.n_layer) + " layers can start one" + why);
  }
  return Status::Ok();
}

}  // namespace

Status check_layout(const PlanRequest& req, int pp, int tp) {
  DZ_RETURN_IF_ERROR(check_tp(req.specs, req.hp, req.layer_descs, tp));
  const int g = req.topo.gpus_per_node;
  if (tp > g)
    return Status::InvalidArgument("a tp group of " + std::to_string(tp) + " does not fit on a node of " +
                                   std::to_string(g) + " GPUs");
  if (g % tp != 0)
    return Status::InvalidArgument(std::to_string(tp) + " does not divide the " + std::to_string(g) +
                                   " GPUs of a node (a tp group would span nodes)");
  auto ep = ep_splits(req, tp, has_routed_experts(req));
  if (!ep.ok()) return ep.status();
  return check_stages(req, pp);
}

Result<Plan> choose_plan(const PlanRequest& req, std::vector<Candidate>* considered) {
  const int world = req.world_size > 0 ? req.world_size : req.topo.world_size();
  if (wide_ep_requested(req)) return choose_wide_ep_plan(req, world, considered);
  DZ_RETURN_IF_ERROR(check_request(req, world));
  if (req.ep && req.etp && !req.tp) {
    PlanRequest fixed = req;
    fixed.tp = *req.ep * *req.etp;
    return choose_plan(fixed, considered);
  }

  if (!req.stored_bytes.empty() && req.stored_bytes.size() != req.specs.size())
    return Status::InvalidArgument("stored element sizes: " + std::to_string(req.stored_bytes.size()) + " for " +
                                   std::to_string(req.specs.size()) + " tensors");
  const MemoryParams mp = req.memory_params();
  // Average bytes of a held weight element, for the flops of the cost model.
  double bytes_per_param = static_cast<double>(req.bytes_per_weight);
  if (!mp.stored_bytes.empty()) {
    double bytes = 0, elems = 0;
    for (size_t i = 0; i < req.specs.size(); ++i) {
      if (req.specs[i].skip_load) continue;
      bytes += static_cast<double>(held_bytes(req.specs[i], i, Slice{true, -1, 0, 0}, mp));
      elems += static_cast<double>(shape_numel(req.specs[i].shape));
    }
    if (elems > 0 && bytes > 0) bytes_per_param = bytes / elems;
  }
  const bool moe = has_routed_experts(req);

  std::vector<Candidate> all;
  std::vector<Tables> tables;  // per feasible tp and ep split, in enumeration order
  std::vector<Evaluation> evals;
  std::vector<int> eval_of;    // [all.size()]: index into evals or -1
  for (int tp : divisors(world)) {
    if (req.tp && *req.tp != tp) continue;
    const Status tp_ok = check_layout(req, 1, tp);
    std::vector<EpSplit> splits;
    const size_t first_table = tables.size();
    if (tp_ok.ok()) {
      splits = *ep_splits(req, tp, moe);
      for (const EpSplit& e : splits) tables.push_back(build_tables(req, mp, tp, e));
    }
    for (int pp : divisors(world / tp)) {
      if (req.pp && *req.pp != pp) continue;
      if (req.layers && pp != 1) continue;  // a replay is one stage (check_request)
      const int dp = world / (tp * pp);
      if (req.dp && *req.dp != dp) continue;
      Candidate c;
      c.dp = dp;
      c.pp = pp;
      c.tp = tp;
      c.cost = std::numeric_limits<double>::infinity();
      const Status ok = tp_ok.ok() ? check_stages(req, pp) : tp_ok;
      if (!ok.ok()) {
        c.reason = ok.message();
        all.push_back(c);
        eval_of.push_back(-1);
        continue;
      }
      // The best ep x etp split: one that fits before one that does not; among those that fit
      // the lowest cost, then the lowest max rank bytes; among those that do not, the lowest max
      // rank bytes; remaining ties go to the largest ep (splits are in ep ascending order).
      const int64_t cap = req.topo.memory_cap_bytes();
      int chosen = -1;
      Evaluation best_ev;
      for (size_t k = 0; k < splits.size(); ++k) {
        Evaluation ev = evaluate(req, mp, bytes_per_param, tables[first_table + k], dp, pp);
        const bool fits = ev.max_bytes <= cap, best_fits = best_ev.max_bytes <= cap;
        bool take = chosen < 0;
        if (!take && fits != best_fits) take = fits;
        else if (!take && fits && !same_cost(ev.cost, best_ev.cost)) take = ev.cost < best_ev.cost;
        else if (!take) take = ev.max_bytes <= best_ev.max_bytes;
        if (take) {
          chosen = static_cast<int>(k);
          best_ev = std::move(ev);
        }
      }
      c.ep = splits[chosen].ep;
      c.etp = splits[chosen].etp;
      c.cost = best_ev.cost;
      c.max_rank_bytes = best_ev.max_bytes;
      c.worst_rank = best_ev.worst_rank;
      Fit fit;
      fit.worst_rank = best_ev.worst_rank;
      fit.worst_bytes = best_ev.max_bytes;
      fit.cap = req.topo.memory_cap_bytes();
      c.feasible = fit.fits();
      if (!c.feasible) c.reason = describe_fit(fit);
      all.push_back(c);
      eval_of.push_back(static_cast<int>(evals.size()));
      evals.push_back(std::move(best_ev));
    }
  }
  if (considered) {
    *considered = all;
    // Wide expert parallelism is shown beside them for a MoE model, chosen only when asked for
    // (parallel.ep beyond tp): its runs replicate attention over the expert group.
    if (moe && !req.ep && !req.etp && !req.layers) {
      std::vector<Candidate> wide = wide_ep_candidates(req, world);
      considered->insert(considered->end(), wide.begin(), wide.end());
    }
  }

  int best = -1, least_short = -1;
  for (int i = 0; i < static_cast<int>(all.size()); ++i) {
    if (eval_of[i] < 0) continue;
    if (all[i].feasible) {
      if (best < 0 || better(all[i], all[best])) best = i;
    } else if (least_short < 0 || less_short(all[i], all[least_short])) {
      least_short = i;
    }
  }
  if (best < 0) {
    if (least_short < 0) {
      std::string why = all.empty() ? "no dp x pp x tp matches the fixed sizes" : all.front().reason;
      return Status::InvalidArgument("no plan fits: every candidate breaks a layout constraint (" + why + ")");
    }
    const Candidate& c = all[least_short];
    return Status::InvalidArgument("no plan fits: best candidate " + sizes(c) + " " + c.reason);
  }

  const Candidate& c = all[best];
  const Evaluation& ev = evals[eval_of[best]];
  Plan p;
  p.world_size = world;
  p.dp = c.dp;
  p.pp = c.pp;
  p.tp = c.tp;
  p.ep = c.ep;
  p.etp = c.etp;
  lay_out_ranks(p, ev.bounds, !req.layers, req.topo);
  for (RankCoord& rc : p.ranks) {
    rc.ep_rank = rc.tp_rank / c.etp;
    rc.etp_rank = rc.tp_rank % c.etp;
  }
  p.memory = estimate_memory(req.specs, req.hp, p, mp, req.names);
  p.memory_cap_bytes = req.topo.memory_cap_bytes();
  p.cost_per_token_s = c.cost;
  p.caveats = req.caveats;
  p.vision = vision_placement(req.specs, req.hp, p, mp, req.names);
  const Fit fit = check_fit(p.memory, p.memory_cap_bytes);
  DZ_CHECK(fit.worst_bytes == c.max_rank_bytes && fit.worst_rank == c.worst_rank,
           "planner tables (" << c.max_rank_bytes << " bytes on rank " << c.worst_rank << ") disagree with slice_for ("
                              << fit.worst_bytes << " bytes on rank " << fit.worst_rank << ")");
  return p;
}

void lay_out_ranks(Plan& p, const std::vector<int>& bounds, bool edges, const topology::Topology& topo) {
  for (int s = 0; s < p.pp; ++s)
    p.stages.push_back({s, bounds[s], bounds[s + 1], s == 0 && edges, s == p.pp - 1 && edges});
  const int g = topo.gpus_per_node;
  for (int i = 0; i < (p.world_size + g - 1) / g; ++i) p.nodes.push_back(topo.node_name(i));
  p.ranks.resize(p.world_size);
  for (int r = 0; r < p.world_size; ++r) {
    RankCoord& rc = p.ranks[r];
    rc.rank = r;
    rc.tp_rank = r % p.tp;
    rc.pp_rank = r / p.tp % p.pp;
    rc.dp_rank = r / (p.tp * p.pp);
    rc.node = r / g;
    rc.local_rank = r % g;
  }
}

}  // namespace dayzero::plan

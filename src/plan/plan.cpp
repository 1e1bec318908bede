// The plan value (plan.h): JSON and YAML forms, rank order, the trivial data-parallel plan.
#include "plan/plan.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace dayzero::plan {

int rank_of(const Plan& p, int dp_rank, int pp_rank, int tp_rank) { return ((dp_rank * p.pp) + pp_rank) * p.tp + tp_rank; }

namespace {

// The fields of each JSON object of a plan, one list per struct, walked by the writer and the
// reader alike so the two cannot drift apart. S is the struct, const for writing.
template <class S, class F>
void visit_sizes(S& p, F&& f) {
  f("world_size", p.world_size); f("dp", p.dp); f("pp", p.pp); f("tp", p.tp); f("ep", p.ep); f("etp", p.etp);
}
template <class S, class F>
void visit_stage(S& s, F&& f) {
  f("pp", s.pp); f("layer_begin", s.layer_begin); f("layer_end", s.layer_end); f("has_embedding", s.has_embedding);
  f("has_lm_head", s.has_lm_head);
}
template <class S, class F>
void visit_rank(S& r, F&& f) {
  f("rank", r.rank); f("dp", r.dp_rank); f("pp", r.pp_rank); f("tp", r.tp_rank); f("ep", r.ep_rank);
  f("etp", r.etp_rank); f("node", r.node); f("local_rank", r.local_rank);
}
template <class S, class F>
void visit_memory(S& m, F&& f) {  // "total" is written beside them, derived
  f("weights", m.weights); f("kv_cache", m.kv_cache); f("activations", m.activations); f("headroom", m.headroom);
  f("state", m.state);
}
template <class S, class F>
void visit_caveat(S& c, F&& f) {
  f("figure", c.figure); f("text", c.text);
}
template <class S, class F>
void visit_vision(S& v, F&& f) {  // "bytes_per_rank" is written beside them, derived
  f("stage", v.stage); f("placement", v.placement); f("tower_bytes", v.tower_bytes);
  f("projector_bytes", v.projector_bytes); f("split_bytes", v.split_bytes);
  f("split_all_reduce_bytes_per_patch", v.split_all_reduce_bytes_per_patch); f("reason", v.reason);
}

// A visitor that writes each field into the object o.
auto writer(nlohmann::json& o) {
  return [&o](const char* k, const auto& v) { o[k] = v; };
}

// An array of objects, one per element, through its visitor.
template <class T, class V>
nlohmann::json array_of(const std::vector<T>& items, V visit) {
  nlohmann::json a = nlohmann::json::array();
  for (const T& item : items) {
    nlohmann::json o = nlohmann::json::object();
    visit(item, writer(o));
    a.push_back(std::move(o));
  }
  return a;
}

}  // namespace

nlohmann::json to_json(const Plan& p) {
  nlohmann::json j;
  visit_sizes(p, writer(j));
  if (p.ep_dp > 1) j["ep_dp"] = p.ep_dp;
  j["stages"] = array_of(p.stages, [](const Stage& s, auto w) { visit_stage(s, w); });
  j["nodes"] = p.nodes;
  j["ranks"] = array_of(p.ranks, [](const RankCoord& r, auto w) { visit_rank(r, w); });
  j["memory"] = nlohmann::json::array();
  for (const auto& m : p.memory) {
    nlohmann::json o = {{"total", m.total()}};
    visit_memory(m, writer(o));
    j["memory"].push_back(std::move(o));
  }
  j["memory_cap_bytes"] = p.memory_cap_bytes;
  j["cost_per_token_s"] = p.cost_per_token_s;
  if (!p.caveats.empty()) j["caveats"] = array_of(p.caveats, [](const Caveat& c, auto w) { visit_caveat(c, w); });
  if (p.experts.present) {
    const ExpertPlacement& e = p.experts;
    nlohmann::json blocks = nlohmann::json::array();
    for (const ExpertBlock& b : e.blocks)
      blocks.push_back({{"ep_rank", b.ep_rank}, {"expert_begin", b.expert_begin}, {"expert_end", b.expert_end},
                        {"bytes", b.bytes}, {"ranks", b.ranks}});
    j["expert_placement"] = {{"n_expert", e.n_expert}, {"top_k", e.top_k},
                             {"all_to_all_bytes_per_token", e.all_to_all_bytes_per_token},
                             {"inter_node_share", e.inter_node_share}, {"blocks", blocks}, {"reason", e.reason}};
  }
  if (p.vision.present) {
    j["vision"] = {{"bytes_per_rank", p.vision.tower_bytes + p.vision.projector_bytes}};
    visit_vision(p.vision, writer(j["vision"]));
  }
  return j;
}

namespace {

Status consistent(const Plan& p) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("plan: " + m); };
  if (p.dp < 1 || p.pp < 1 || p.tp < 1 || p.ep < 1 || p.etp < 1) return bad("every size must be >= 1");
  if (p.dp * p.pp * p.tp != p.world_size) return bad("dp x pp x tp is not world_size");
  if (p.ep_dp < 1) return bad("ep_dp must be >= 1");
  if (p.ep * p.etp != p.ep_dp * p.tp) return bad("ep x etp is not ep_dp x tp");
  if (p.ep_dp > 1 && (p.etp != 1 || p.dp % p.ep_dp != 0)) return bad("ep_dp > 1 needs etp 1 and dp a multiple of ep_dp");
  if (static_cast<int>(p.stages.size()) != p.pp) return bad("stages has not pp entries");
  if (static_cast<int>(p.ranks.size()) != p.world_size) return bad("ranks has not world_size entries");
  if (!p.memory.empty() && static_cast<int>(p.memory.size()) != p.world_size)
    return bad("memory has not world_size entries");
  for (int i = 0; i < p.pp; ++i) {
    const Stage& s = p.stages[i];
    if (s.pp != i) return bad("stages[" + std::to_string(i) + "].pp is " + std::to_string(s.pp));
    if (s.layer_begin > s.layer_end || (i > 0 && s.layer_begin != p.stages[i - 1].layer_end))
      return bad("stages[" + std::to_string(i) + "]: layer ranges are not consecutive");
  }
  if (p.vision.present && (p.vision.stage < 0 || p.vision.stage >= p.pp))
    return bad("vision.stage " + std::to_string(p.vision.stage) + " is not a stage");
  for (int r = 0; r < p.world_size; ++r) {
    const RankCoord& c = p.ranks[r];
    if (c.rank != r || rank_of(p, c.dp_rank, c.pp_rank, c.tp_rank) != r || c.ep_rank * p.etp + c.etp_rank != (c.dp_rank % p.ep_dp) * p.tp + c.tp_rank || c.node < 0 ||
        c.node >= static_cast<int>(p.nodes.size()))
      return bad("ranks[" + std::to_string(r) + "]: coordinates do not match the rank order");
  }
  return Status::Ok();
}

}  // namespace

Result<Plan> plan_from_json(const nlohmann::json& j) {
  Plan p;
  std::string key;
  try {
    // A visitor that reads each field of the object o; "state" may be absent (plans written
    // before it existed), every other field is required.
    const auto reader = [&key](const nlohmann::json& o) {
      return [&key, &o](const char* k, auto& out) {
        key = k;
        if (key == "state" && !o.contains(k)) return;
        o.at(k).get_to(out);
      };
    };
    // Reads the array j[name], one T per element through its visitor.
    const auto read_array = [&](const char* name, auto& out, auto visit) {
      key = name;
      for (const auto& o : j.at(name)) {
        typename std::decay_t<decltype(out)>::value_type item;
        visit(item, reader(o));
        out.push_back(item);
      }
    };
    visit_sizes(p, reader(j));
    if (j.contains("ep_dp")) j.at("ep_dp").get_to(p.ep_dp);  // absent in plans without wide EP
    read_array("stages", p.stages, [](Stage& s, auto r) { visit_stage(s, r); });
    reader(j)("nodes", p.nodes);
    read_array("ranks", p.ranks, [](RankCoord& c, auto r) { visit_rank(c, r); });
    read_array("memory", p.memory, [](RankMemory& m, auto r) { visit_memory(m, r); });
    reader(j)("memory_cap_bytes", p.memory_cap_bytes);
    reader(j)("cost_per_token_s", p.cost_per_token_s);
    if (j.contains("caveats")) read_array("caveats", p.caveats, [](Caveat& c, auto r) { visit_caveat(c, r); });
    if (j.contains("expert_placement")) {  // wide expert parallelism only
      key = "expert_placement";
      const auto& e = j.at("expert_placement");
      p.experts.present = true;
      e.at("n_expert").get_to(p.experts.n_expert);
      e.at("top_k").get_to(p.experts.top_k);
      e.at("all_to_all_bytes_per_token").get_to(p.experts.all_to_all_bytes_per_token);
      e.at("inter_node_share").get_to(p.experts.inter_node_share);
      e.at("reason").get_to(p.experts.reason);
      for (const auto& b : e.at("blocks")) {
        ExpertBlock x;
        b.at("ep_rank").get_to(x.ep_rank);
        b.at("expert_begin").get_to(x.expert_begin);
        b.at("expert_end").get_to(x.expert_end);
        b.at("bytes").get_to(x.bytes);
        b.at("ranks").get_to(x.ranks);
        p.experts.blocks.push_back(std::move(x));
      }
    }
    if (j.contains("vision")) {  // multimodal models only (and absent in plans written before it existed)
      p.vision.present = true;
      visit_vision(p.vision, reader(j.at("vision")));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument("plan: " + key + ": " + e.what());
  }
  DZ_RETURN_IF_ERROR(consistent(p));
  return p;
}

std::string to_yaml(const Plan& p) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "world_size" << YAML::Value << p.world_size;
  out << YAML::Key << "dp" << YAML::Value << p.dp;
  out << YAML::Key << "pp" << YAML::Value << p.pp;
  out << YAML::Key << "tp" << YAML::Value << p.tp;
  out << YAML::Key << "ep" << YAML::Value << p.ep;
  out << YAML::Key << "etp" << YAML::Value << p.etp;
  if (p.ep_dp > 1) out << YAML::Key << "ep_dp" << YAML::Value << p.ep_dp;
  out << YAML::Key << "memory_cap_bytes" << YAML::Value << p.memory_cap_bytes;
  out << YAML::Key << "cost_per_token_s" << YAML::Value << p.cost_per_token_s;
  out << YAML::Key << "nodes" << YAML::Value << YAML::Flow << p.nodes;
  // Stage, rank and memory rows are short records: one line each.
  out << YAML::Key << "stages" << YAML::Value << YAML::BeginSeq;
  for (const auto& s : p.stages)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "pp" << YAML::Value << s.pp << YAML::Key << "layer_begin"
        << YAML::Value << s.layer_begin << YAML::Key << "layer_end" << YAML::Value << s.layer_end << YAML::Key
        << "has_embedding" << YAML::Value << s.has_embedding << YAML::Key << "has_lm_head" << YAML::Value
        << s.has_lm_head << YAML::EndMap;
  out << YAML::EndSeq;
  out << YAML::Key << "ranks" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : p.ranks)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "rank" << YAML::Value << r.rank << YAML::Key << "dp"
        << YAML::Value << r.dp_rank << YAML::Key << "pp" << YAML::Value << r.pp_rank << YAML::Key << "tp" << YAML::Value
        << r.tp_rank << YAML::Key << "ep" << YAML::Value << r.ep_rank << YAML::Key << "etp" << YAML::Value << r.etp_rank
        << YAML::Key << "node" << YAML::Value << r.node << YAML::Key << "local_rank" << YAML::Value << r.local_rank
        << YAML::EndMap;
  out << YAML::EndSeq;
  out << YAML::Key << "memory" << YAML::Value << YAML::BeginSeq;
  for (const auto& m : p.memory)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "weights" << YAML::Value << m.weights << YAML::Key
        << "kv_cache" << YAML::Value << m.kv_cache << YAML::Key << "activations" << YAML::Value << m.activations
        << YAML::Key << "headroom" << YAML::Value << m.headroom << YAML::Key << "state" << YAML::Value << m.state
        << YAML::Key << "total" << YAML::Value << m.total() << YAML::EndMap;
  out << YAML::EndSeq;
  if (!p.caveats.empty()) {
    out << YAML::Key << "caveats" << YAML::Value << YAML::BeginSeq;
    for (const auto& c : p.caveats)
      out << YAML::BeginMap << YAML::Key << "figure" << YAML::Value << c.figure << YAML::Key << "text" << YAML::Value
          << c.text << YAML::EndMap;
    out << YAML::EndSeq;
  }
  if (p.experts.present) {
    const ExpertPlacement& e = p.experts;
    out << YAML::Key << "expert_placement" << YAML::Value << YAML::BeginMap << YAML::Key << "n_expert" << YAML::Value
        << e.n_expert << YAML::Key << "top_k" << YAML::Value << e.top_k << YAML::Key << "all_to_all_bytes_per_token"
        << YAML::Value << e.all_to_all_bytes_per_token << YAML::Key << "inter_node_share" << YAML::Value
        << e.inter_node_share << YAML::Key << "blocks" << YAML::Value << YAML::BeginSeq;
    for (const ExpertBlock& b : e.blocks)
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "ep_rank" << YAML::Value << b.ep_rank << YAML::Key
          << "expert_begin" << YAML::Value << b.expert_begin << YAML::Key << "expert_end" << YAML::Value
          << b.expert_end << YAML::Key << "bytes" << YAML::Value << b.bytes << YAML::Key << "ranks" << YAML::Value
          << YAML::Flow << b.ranks << YAML::EndMap;
    out << YAML::EndSeq << YAML::Key << "reason" << YAML::Value << e.reason << YAML::EndMap;
  }
  if (p.vision.present) {
    const VisionPlacement& v = p.vision;
    out << YAML::Key << "vision" << YAML::Value << YAML::BeginMap << YAML::Key << "stage" << YAML::Value << v.stage
        << YAML::Key << "placement" << YAML::Value << v.placement << YAML::Key << "tower_bytes" << YAML::Value
        << v.tower_bytes << YAML::Key << "projector_bytes" << YAML::Value << v.projector_bytes << YAML::Key
        << "bytes_per_rank" << YAML::Value << v.tower_bytes + v.projector_bytes << YAML::Key << "split_bytes"
        << YAML::Value << v.split_bytes << YAML::Key << "split_all_reduce_bytes_per_patch" << YAML::Value
        << v.split_all_reduce_bytes_per_patch << YAML::Key << "reason" << YAML::Value << v.reason << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Plan data_parallel_plan(int world_size, int n_layer, const std::vector<std::string>& rank_nodes) {
  DZ_CHECK(world_size >= 1 && n_layer >= 0, "world " << world_size << ", " << n_layer << " layers");
  DZ_CHECK(rank_nodes.empty() || static_cast<int>(rank_nodes.size()) == world_size,
           rank_nodes.size() << " node names for " << world_size << " ranks");
  Plan p;
  p.world_size = world_size;
  p.dp = world_size;
  p.stages.push_back({0, 0, n_layer, true, true});
  std::map<std::string, int> node_index;
  std::vector<int> per_node;
  for (int r = 0; r < world_size; ++r) {
    const std::string name = rank_nodes.empty() ? "node0" : rank_nodes[r];
    auto [it, added] = node_index.emplace(name, static_cast<int>(p.nodes.size()));
    if (added) {
      p.nodes.push_back(name);
      per_node.push_back(0);
    }
    RankCoord c;
    c.rank = r;
    c.dp_rank = r;
    c.node = it->second;
    c.local_rank = per_node[it->second]++;
    p.ranks.push_back(c);
  }
  p.memory.assign(world_size, RankMemory{});
  return p;
}

}  // namespace dayzero::plan

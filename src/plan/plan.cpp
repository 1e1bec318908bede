// The plan value (plan.h): JSON and YAML forms, rank order, the trivial data-parallel plan.
#include "plan/plan.h"

#include <yaml-cpp/yaml.h>

#include <map>

#include "core/check.h"

namespace dayzero::plan {

int rank_of(const Plan& p, int dp_rank, int pp_rank, int tp_rank) { return ((dp_rank * p.pp) + pp_rank) * p.tp + tp_rank; }

nlohmann::json to_json(const Plan& p) {
  nlohmann::json j;
  j["world_size"] = p.world_size;
  j["dp"] = p.dp;
  j["pp"] = p.pp;
  j["tp"] = p.tp;
  j["ep"] = p.ep;
  j["etp"] = p.etp;
  j["stages"] = nlohmann::json::array();
  for (const auto& s : p.stages)
    j["stages"].push_back({{"pp", s.pp},
                           {"layer_begin", s.layer_begin},
                           {"layer_end", s.layer_end},
                           {"has_embedding", s.has_embedding},
                           {"has_lm_head", s.has_lm_head}});
  j["nodes"] = p.nodes;
  j["ranks"] = nlohmann::json::array();
  for (const auto& r : p.ranks)
    j["ranks"].push_back({{"rank", r.rank},
                          {"dp", r.dp_rank},
                          {"pp", r.pp_rank},
                          {"tp", r.tp_rank},
                          {"ep", r.ep_rank},
                          {"etp", r.etp_rank},
                          {"node", r.node},
                          {"local_rank", r.local_rank}});
  j["memory"] = nlohmann::json::array();
  for (const auto& m : p.memory)
    j["memory"].push_back({{"weights", m.weights},
                           {"kv_cache", m.kv_cache},
                           {"activations", m.activations},
                           {"headroom", m.headroom},
                           {"state", m.state},
                           {"total", m.total()}});
  j["memory_cap_bytes"] = p.memory_cap_bytes;
  j["cost_per_token_s"] = p.cost_per_token_s;
  if (!p.caveats.empty()) {
    j["caveats"] = nlohmann::json::array();
    for (const auto& c : p.caveats) j["caveats"].push_back({{"figure", c.figure}, {"text", c.text}});
  }
  if (p.vision.present) {
    const VisionPlacement& v = p.vision;
    j["vision"] = {{"stage", v.stage},
                   {"placement", v.placement},
                   {"tower_bytes", v.tower_bytes},
                   {"projector_bytes", v.projector_bytes},
                   {"bytes_per_rank", v.tower_bytes + v.projector_bytes},
                   {"split_bytes", v.split_bytes},
                   {"split_all_reduce_bytes_per_patch", v.split_all_reduce_bytes_per_patch},
                   {"reason", v.reason}};
  }
  return j;
}

namespace {

Status consistent(const Plan& p) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("plan: " + m); };
  if (p.dp < 1 || p.pp < 1 || p.tp < 1 || p.ep < 1 || p.etp < 1) return bad("every size must be >= 1");
  if (p.dp * p.pp * p.tp != p.world_size) return bad("dp x pp x tp is not world_size");
  if (p.ep * p.etp != p.tp) return bad("ep x etp is not tp");
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
    if (c.rank != r || rank_of(p, c.dp_rank, c.pp_rank, c.tp_rank) != r || c.ep_rank * p.etp + c.etp_rank != c.tp_rank || c.node < 0 ||
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
    auto get = [&](const nlohmann::json& o, const char* k, auto& out) {
      key = k;
      o.at(k).get_to(out);
    };
    get(j, "world_size", p.world_size);
    get(j, "dp", p.dp);
    get(j, "pp", p.pp);
    get(j, "tp", p.tp);
    get(j, "ep", p.ep);
    get(j, "etp", p.etp);
    key = "stages";
    for (const auto& s : j.at("stages")) {
      Stage st;
      get(s, "pp", st.pp);
      get(s, "layer_begin", st.layer_begin);
      get(s, "layer_end", st.layer_end);
      get(s, "has_embedding", st.has_embedding);
      get(s, "has_lm_head", st.has_lm_head);
      p.stages.push_back(st);
    }
    get(j, "nodes", p.nodes);
    key = "ranks";
    for (const auto& r : j.at("ranks")) {
      RankCoord c;
      get(r, "rank", c.rank);
      get(r, "dp", c.dp_rank);
      get(r, "pp", c.pp_rank);
      get(r, "tp", c.tp_rank);
      get(r, "ep", c.ep_rank);
      get(r, "etp", c.etp_rank);
      get(r, "node", c.node);
      get(r, "local_rank", c.local_rank);
      p.ranks.push_back(c);
    }
    key = "memory";
    for (const auto& m : j.at("memory")) {
      RankMemory rm;
      get(m, "weights", rm.weights);
      get(m, "kv_cache", rm.kv_cache);
      get(m, "activations", rm.activations);
      get(m, "headroom", rm.headroom);
      if (m.contains("state")) get(m, "state", rm.state);  // absent in plans written before it existed
      p.memory.push_back(rm);
    }
    get(j, "memory_cap_bytes", p.memory_cap_bytes);
    get(j, "cost_per_token_s", p.cost_per_token_s);
    if (j.contains("caveats")) {
      key = "caveats";
      for (const auto& c : j.at("caveats")) {
        Caveat cv;
        get(c, "figure", cv.figure);
        get(c, "text", cv.text);
        p.caveats.push_back(cv);
      }
    }
    if (j.contains("vision")) {  // multimodal models only (and absent in plans written before it existed)
      const auto& v = j.at("vision");
      p.vision.present = true;
      get(v, "stage", p.vision.stage);
      get(v, "placement", p.vision.placement);
      get(v, "tower_bytes", p.vision.tower_bytes);
      get(v, "projector_bytes", p.vision.projector_bytes);
      get(v, "split_bytes", p.vision.split_bytes);
      get(v, "split_all_reduce_bytes_per_patch", p.vision.split_all_reduce_bytes_per_patch);
      get(v, "reason", p.vision.reason);
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

// Fields that must agree and figures against their median (classes.h).
#include "preflight/classes.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace dayzero::preflight {
namespace {

using json = nlohmann::ordered_json;

std::string text_of(const json& v) {
  if (v.is_null()) return "(none)";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : " ") + text_of(e);
    return s.empty() ? "(none)" : s;
  }
  return v.dump();
}

const json& at(const json& j, const char* a, const char* b = nullptr) {
  static const json kNull;
  if (!j.is_object() || !j.contains(a)) return kNull;
  const json& x = j[a];
  if (!b) return x;
  if (!x.is_object() || !x.contains(b)) return kNull;
  return x[b];
}

}  // namespace

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

std::string where(const std::vector<int>& ranks, const std::vector<std::string>& host_of_rank) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> by_host;
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (int r : sorted) {
    const std::string& h = r >= 0 && r < static_cast<int>(host_of_rank.size()) ? host_of_rank[r] : "?";
    if (!by_host.count(h)) order.push_back(h);
    by_host[h].push_back(r);
  }
  std::string s;
  const size_t shown = std::min<size_t>(order.size(), 4);
  for (size_t i = 0; i < shown; ++i) {
    const auto& rs = by_host[order[i]];
    s += (i ? ", " : "") + order[i] + " (rank" + (rs.size() > 1 ? "s " : " ") + rank_ranges(rs) + ")";
  }
  if (order.size() > shown) s += ", ... (" + std::to_string(order.size()) + " nodes)";
  return s;
}

std::vector<std::pair<std::string, std::vector<std::string>>> agreeing_fields(const std::vector<json>& inv) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  auto add = [&](const std::string& name, auto&& get) {
    std::vector<std::string> vals;
    for (const json& j : inv) vals.push_back(get(j));
    out.emplace_back(name, std::move(vals));
  };
  add("cpu.model", [](const json& j) { return text_of(at(j, "cpu", "model")); });
  add("cpu.isa", [](const json& j) { return text_of(at(j, "cpu", "isa")); });
  add("cpu.cores", [](const json& j) { return text_of(at(j, "cpu", "cores")); });
  add("memory_gib", [](const json& j) {
    const json& m = at(j, "memory_bytes");
    return m.is_number() ? std::to_string(std::llround(m.get<double>() / (1024.0 * 1024 * 1024))) : "(none)";
  });
  add("gpus.count", [](const json& j) { return text_of(at(j, "gpus", "count")); });
  // Each visible device's model, compute capability, memory (GiB) and ECC state, in order.
  add("gpus.devices", [](const json& j) {
    std::string s;
    for (const json& d : at(j, "gpus", "devices"))
      s += (s.empty() ? "" : "; ") + d.value("name", "") + " sm_" + d.value("compute_capability", "") + " " +
           std::to_string(std::llround(d.value("memory_bytes", 0.0) / (1024.0 * 1024 * 1024))) + " GiB ECC " +
           (d.value("ecc", false) ? "on" : "off");
    return s.empty() ? std::string("(none)") : s;
  });
  // The driver's MIG and ECC modes of each device, in order (NVML; "unknown (no NVML)" without it).
  for (const char* mode : {"mig_mode", "ecc_mode"})
    add(std::string("gpus.") + mode, [mode](const json& j) {
      std::string s;
      for (const json& d : at(j, "gpus", "devices")) s += (s.empty() ? "" : "; ") + d.value(mode, std::string("(none)"));
      return s.empty() ? std::string("(none)") : s;
    });
  std::vector<std::string> versions, vars;
  std::set<std::string> seen_v, seen_e;
  for (const json& j : inv) {
    for (const auto& [k, v] : at(j, "versions").items())
      if (seen_v.insert(k).second) versions.push_back(k);
    for (const auto& [k, v] : at(j, "env").items())
      if (seen_e.insert(k).second) vars.push_back(k);
  }
  std::sort(vars.begin(), vars.end());
  for (const auto& k : versions) add("versions." + k, [&](const json& j) { return text_of(at(j, "versions", k.c_str())); });
  for (const auto& k : vars)
    add("env." + k, [&](const json& j) {
      const json& v = at(j, "env", k.c_str());
      return v.is_null() ? std::string("(unset)") : text_of(v);
    });
  add("interfaces", [](const json& j) {
    json up = json::array();
    for (const json& i : at(j, "interfaces"))
      if (i.value("state", "") != "down") up.push_back(i.value("name", ""));
    return text_of(up);
  });
  add("ib_devices", [](const json& j) { return text_of(at(j, "ib_devices")); });
  add("run_dir.filesystem", [](const json& j) { return text_of(at(j, "run_dir", "filesystem")); });
  add("checkpoint.filesystem", [](const json& j) { return text_of(at(j, "checkpoint", "filesystem")); });
  return out;
}

std::vector<Mismatch> find_mismatches(const std::vector<json>& inv) {
  std::vector<std::string> hosts;
  for (const json& j : inv) hosts.push_back(j.value("host", "?"));
  std::vector<Mismatch> out;
  for (const auto& [field, vals] : agreeing_fields(inv)) {
    std::vector<std::string> order;
    std::map<std::string, std::vector<int>> classes;
    for (size_t r = 0; r < vals.size(); ++r) {
      if (!classes.count(vals[r])) order.push_back(vals[r]);
      classes[vals[r]].push_back(static_cast<int>(r));
    }
    if (order.size() < 2) continue;
    // Largest first; equal sizes keep the order of their lowest rank.
    std::stable_sort(order.begin(), order.end(),
                     [&](const std::string& a, const std::string& b) { return classes[a].size() > classes[b].size(); });
    Mismatch m;
    m.field = field;
    m.classes = json::array();
    for (const auto& v : order) {
      json c;
      c["value"] = v;
      c["ranks"] = classes[v];
      std::vector<std::string> hs;
      for (int r : classes[v])
        if (std::find(hs.begin(), hs.end(), hosts[r]) == hs.end()) hs.push_back(hosts[r]);
      c["hosts"] = hs;
      m.classes.push_back(c);
    }
    for (size_t i = 1; i < order.size(); ++i)
      m.message += (i > 1 ? "; " : "") + where(classes[order[i]], hosts) + ": " + field + "=" + order[i];
    const auto& major = classes[order[0]];
    std::set<std::string> major_hosts;
    for (int r : major) major_hosts.insert(hosts[r]);
    m.message += "; the other " + std::to_string(major.size()) + " rank(s) on " + std::to_string(major_hosts.size()) +
                 " node(s): " + order[0];
    out.push_back(std::move(m));
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void rate_against_median(std::vector<Figure>& figures, double fraction) {
  std::vector<double> v;
  for (const auto& f : figures) v.push_back(f.value);
  const double m = median(v);
  for (auto& f : figures) {
    f.ratio = figures.size() < 2 || m <= 0 ? 1.0 : f.value / m;
    f.outlier = f.ratio < fraction;
  }
}

}  // namespace dayzero::preflight

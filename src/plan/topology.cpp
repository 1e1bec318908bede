// Topology parsing (topology.h): YAML keys to fields, byte sizes with units, validation.
#include "plan/topology.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace dayzero::plan {

int64_t Topology::memory_cap_bytes() const {
  return static_cast<int64_t>(std::floor(memory_fraction * static_cast<double>(device_memory_bytes)));
}

std::string Topology::node_name(int i) const {
  if (i >= 0 && i < static_cast<int>(node_names.size())) return node_names[i];
  return "node" + std::to_string(i);
}

namespace {

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

Status validate(const Topology& t) {
  auto bad = [](const std::string& key, const std::string& what) {
    return Status::InvalidArgument("topology." + key + ": " + what);
  };
  if (t.nodes < 1) return bad("nodes", std::to_string(t.nodes) + " is not >= 1");
  if (t.gpus_per_node < 1) return bad("gpus_per_node", std::to_string(t.gpus_per_node) + " is not >= 1");
  if (t.device_memory_bytes <= 0) return bad("device_memory", "not given (or not > 0)");
  if (!(t.memory_fraction > 0 && t.memory_fraction <= 1))
    return bad("memory_fraction", num(t.memory_fraction) + " is not in (0, 1]");
  const std::pair<const char*, double> speeds[] = {{"intra_node_gbps", t.intra_node_gbps},
                                                   {"inter_node_gbps", t.inter_node_gbps},
                                                   {"device_tflops", t.device_tflops},
                                                   {"device_hbm_gbps", t.device_hbm_gbps}};
  for (const auto& [k, v] : speeds)
    if (!(v > 0)) return bad(k, num(v) + " is not > 0");
  if (!(t.intra_node_latency_us >= 0)) return bad("intra_node_latency_us", "is negative");
  if (!(t.inter_node_latency_us >= 0)) return bad("inter_node_latency_us", "is negative");
  if (!t.node_names.empty()) {
    if (static_cast<int>(t.node_names.size()) != t.nodes)
      return bad("node_names", std::to_string(t.node_names.size()) + " names for " + std::to_string(t.nodes) +
                                   " nodes");
    std::set<std::string> seen;
    for (const auto& n : t.node_names) {
      if (n.empty()) return bad("node_names", "an empty name");
      if (!seen.insert(n).second) return bad("node_names", "'" + n + "' appears twice");
    }
  }
  return Status::Ok();
}

Result<int64_t> parse_bytes(const std::string& text) {
  const auto bad = [&] {
    return Status::InvalidArgument("'" + text + "' is not a size (e.g. 80GiB, 512MiB, 72.5GB; a bare number is GiB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == start) return bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(start, i - start), &used);
    if (used != i - start) return bad();
  } catch (const std::exception&) {
    return bad();
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return bad();
  double scale = 0;
  if (unit.empty()) scale = 1024.0 * 1024 * 1024;
  else if (unit == "b") scale = 1;
  else if (unit == "kb" || unit == "k") scale = 1e3;
  else if (unit == "mb" || unit == "m") scale = 1e6;
  else if (unit == "gb" || unit == "g") scale = 1e9;
  else if (unit == "tb" || unit == "t") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return bad();
  const double bytes = std::round(value * scale);
  if (!(bytes > 0) || bytes > 9.0e18) return bad();
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  const int64_t mag = bytes < 0 ? -bytes : bytes;
  if (mag >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else if (mag >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (mag >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

Result<Topology> parse_topology_yaml(const std::string& text, const std::string& source_name, const Topology& base) {
  Topology t = base;
  std::string key;
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root || root.IsNull()) return t;
    if (!root.IsMap()) return Status::InvalidArgument(source_name + ": a topology is a mapping of keys to values");
    for (const auto& kv : root) {
      key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "nodes") {
        if (v.IsSequence()) {
          t.node_names = v.as<std::vector<std::string>>();
          t.nodes = static_cast<int>(t.node_names.size());
        } else {
          t.nodes = v.as<int>();
        }
      } else if (key == "gpus_per_node") {
        t.gpus_per_node = v.as<int>();
      } else if (key == "device_memory") {
        auto b = parse_bytes(v.as<std::string>());
        if (!b.ok()) return b.status().with_context(source_name + ": device_memory");
        t.device_memory_bytes = *b;
      } else if (key == "device_memory_gib") {
        t.device_memory_bytes = static_cast<int64_t>(std::round(v.as<double>() * 1024.0 * 1024 * 1024));
      } else if (key == "memory_fraction") {
        t.memory_fraction = v.as<double>();
      } else if (key == "intra_node_gbps") {
        t.intra_node_gbps = v.as<double>();
      } else if (key == "inter_node_gbps") {
        t.inter_node_gbps = v.as<double>();
      } else if (key == "device_tflops") {
        t.device_tflops = v.as<double>();
      } else if (key == "device_hbm_gbps") {
        t.device_hbm_gbps = v.as<double>();
      } else if (key == "intra_node_latency_us") {
        t.intra_node_latency_us = v.as<double>();
      } else if (key == "inter_node_latency_us") {
        t.inter_node_latency_us = v.as<double>();
      } else if (key == "node_names") {
        t.node_names = v.as<std::vector<std::string>>();
      } else {
        return Status::InvalidArgument(source_name + ": " + key +
                                       ": unknown key (nodes, gpus_per_node, device_memory, device_memory_gib, "
                                       "memory_fraction, intra_node_gbps, inter_node_gbps, device_tflops, "
                                       "device_hbm_gbps, intra_node_latency_us, inter_node_latency_us, node_names)");
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source_name + (key.empty() ? "" : ": " + key) + ": " + e.what());
  }
  return t;
}

Result<Topology> load_topology(const std::string& path, const Topology& base) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(path + ": cannot open the topology file");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_topology_yaml(ss.str(), path, base);
}

void apply_overrides(Topology& t, const TopologyOverrides& o) {
  if (o.nodes) t.nodes = *o.nodes;
  if (o.gpus_per_node) t.gpus_per_node = *o.gpus_per_node;
  if (o.device_memory_bytes) t.device_memory_bytes = *o.device_memory_bytes;
  if (o.memory_fraction) t.memory_fraction = *o.memory_fraction;
  if (o.intra_node_gbps) t.intra_node_gbps = *o.intra_node_gbps;
  if (o.inter_node_gbps) t.inter_node_gbps = *o.inter_node_gbps;
  if (o.device_tflops) t.device_tflops = *o.device_tflops;
  if (o.device_hbm_gbps) t.device_hbm_gbps = *o.device_hbm_gbps;
}

}  // namespace dayzero::plan

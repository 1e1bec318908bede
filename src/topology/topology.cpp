// Topology (topology.h): the one parser of its keys, byte sizes with units, validation, the
// resolution order.
#include "topology/topology.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace dayzero::topology {

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

const std::vector<std::string>& file_keys() {
  static const std::vector<std::string> keys = {
      "nodes",           "gpus_per_node",  "device_memory", "device_memory_gib",     "memory_fraction",
      "intra_node_gbps", "inter_node_gbps", "device_tflops", "device_hbm_gbps",      "intra_node_latency_us",
      "inter_node_latency_us", "node_names"};
  return keys;
}

const std::vector<std::string>& run_config_keys() {
  static const std::vector<std::string> keys = {"device_memory_gib", "memory_fraction", "nodes", "gpus_per_node"};
  return keys;
}

int64_t gib_to_bytes(double gib) { return static_cast<int64_t>(std::llround(gib * 1024.0 * 1024 * 1024)); }

Result<Overrides> parse_keys(const YAML::Node& map, const std::string& key_prefix, const std::vector<std::string>& allowed) {
  Overrides o;
  if (!map || map.IsNull()) return o;
  if (!map.IsMap()) return Status::InvalidArgument(key_prefix + "expected a mapping of keys to values");
  std::string key;
  const auto bad = [&](const std::string& what) { return Status::InvalidArgument(key_prefix + key + ": " + what); };
  // Reads a count >= 1, a value > 0, or one in [lo, hi].
  const auto count = [&](const YAML::Node& v, std::optional<int>* out) -> Status {
    const int n = v.as<int>();
    if (n < 1) return bad(std::to_string(n) + " is not >= 1");
    *out = n;
    return Status::Ok();
  };
  const auto positive = [&](const YAML::Node& v, std::optional<double>* out) -> Status {
    const double x = v.as<double>();
    if (!(x > 0)) return bad(num(x) + " is not > 0");
    *out = x;
    return Status::Ok();
  };
  const auto not_negative = [&](const YAML::Node& v, std::optional<double>* out) -> Status {
    const double x = v.as<double>();
    if (!(x >= 0)) return bad(num(x) + " is negative");
    *out = x;
    return Status::Ok();
  };
  try {
    for (const auto& kv : map) {
      key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string list;
        for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
        return Status::InvalidArgument(key_prefix + key + ": unknown key (" + list + ")");
      }
      Status st;
      if (key == "nodes" && v.IsSequence()) {
        o.node_names = v.as<std::vector<std::string>>();
        o.nodes = static_cast<int>(o.node_names->size());
        if (*o.nodes < 1) st = bad("an empty list of nodes");
      } else if (key == "nodes") {
        st = count(v, &o.nodes);
      } else if (key == "gpus_per_node") {
        st = count(v, &o.gpus_per_node);
      } else if (key == "device_memory") {
        auto b = parse_bytes(v.as<std::string>());
        if (!b.ok()) return Status::InvalidArgument(key_prefix + key + ": " + b.status().message());
        o.device_memory_bytes = *b;
      } else if (key == "device_memory_gib") {
        std::optional<double> gib;
        st = positive(v, &gib);
        if (gib) o.device_memory_bytes = gib_to_bytes(*gib);
      } else if (key == "memory_fraction") {
        const double f = v.as<double>();
        if (!(f > 0 && f <= 1)) st = bad(num(f) + " is not in (0, 1]");
        else o.memory_fraction = f;
      } else if (key == "intra_node_gbps") {
        st = positive(v, &o.intra_node_gbps);
      } else if (key == "inter_node_gbps") {
        st = positive(v, &o.inter_node_gbps);
      } else if (key == "device_tflops") {
        st = positive(v, &o.device_tflops);
      } else if (key == "device_hbm_gbps") {
        st = positive(v, &o.device_hbm_gbps);
      } else if (key == "intra_node_latency_us") {
        st = not_negative(v, &o.intra_node_latency_us);
      } else if (key == "inter_node_latency_us") {
        st = not_negative(v, &o.inter_node_latency_us);
      } else if (key == "node_names") {
        o.node_names = v.as<std::vector<std::string>>();
      }
      DZ_RETURN_IF_ERROR(st);
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(key_prefix + key + (key.empty() ? "" : ": ") + e.what());
  }
  return o;
}

Result<Overrides> parse_file_text(const std::string& text, const std::string& source_name) {
  try {
    return parse_keys(YAML::Load(text), source_name + ": ");
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(source_name + ": " + e.what());
  }
}

Result<Overrides> load_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(path + ": cannot open the topology file");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_file_text(ss.str(), path);
}

void apply(Topology& t, const Overrides& o) {
  if (o.nodes) t.nodes = *o.nodes;
  if (o.gpus_per_node) t.gpus_per_node = *o.gpus_per_node;
  if (o.device_memory_bytes) t.device_memory_bytes = *o.device_memory_bytes;
  if (o.memory_fraction) t.memory_fraction = *o.memory_fraction;
  if (o.intra_node_gbps) t.intra_node_gbps = *o.intra_node_gbps;
  if (o.inter_node_gbps) t.inter_node_gbps = *o.inter_node_gbps;
  if (o.device_tflops) t.device_tflops = *o.device_tflops;
  if (o.device_hbm_gbps) t.device_hbm_gbps = *o.device_hbm_gbps;
  if (o.intra_node_latency_us) t.intra_node_latency_us = *o.intra_node_latency_us;
  if (o.inter_node_latency_us) t.inter_node_latency_us = *o.inter_node_latency_us;
  if (o.node_names) t.node_names = *o.node_names;
}

Result<Topology> resolve(Topology base, const std::optional<std::string>& file, const Overrides& overrides) {
  if (file) {
    DZ_ASSIGN_OR_RETURN(const Overrides from_file, load_file(*file));
    apply(base, from_file);
  }
  apply(base, overrides);
  DZ_RETURN_IF_ERROR(validate(base));
  return base;
}

}  // namespace dayzero::topology

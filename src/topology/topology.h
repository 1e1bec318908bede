// Topology: the machines a plan is laid out on (nodes x GPUs per node, device memory, link and
// compute speeds). The one path every command takes to it (`run`, `plan`, and a service to
// come): a base (the defaults, or what a run discovered over MPI), then a topology YAML file,
// then the keys of the run config's `topology:` section or the command's flags, then validate().
// One parser reads the keys wherever they are written (parse_keys), one rule turns GiB into
// bytes (gib_to_bytes). It is not discovery: callers that probe the hardware fill in the base.
// On CPU, device_memory_bytes is the per-rank memory budget. Speeds only rank candidate plans;
// they need not be exact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace YAML {
class Node;
}

namespace dayzero::topology {

struct Topology {
  int nodes = 1;
  int gpus_per_node = 1;
  int64_t device_memory_bytes = 0;  // per device (per rank)
  double memory_fraction = 0.9;     // of device memory a plan may use
  double intra_node_gbps = 450;     // GB/s per GPU inside a node (NVLink)
  double inter_node_gbps = 50;      // GB/s per GPU between nodes (InfiniBand 400 Gb/s)
  double device_tflops = 400;       // dense bf16 TFLOP/s per device
  double device_hbm_gbps = 3350;    // GB/s of device memory (H100 SXM HBM3)
  double intra_node_latency_us = 10;  // per collective or send inside a node
  double inter_node_latency_us = 20;  // per send between nodes
  std::vector<std::string> node_names;  // [nodes] or empty: "node0", "node1", ...

  int world_size() const { return nodes * gpus_per_node; }
  // floor(memory_fraction x device_memory_bytes): what one rank may hold.
  int64_t memory_cap_bytes() const;
  // node_names[i], or "node<i>" when no names are given.
  std::string node_name(int i) const;
};

// Ranges and consistency: nodes, gpus_per_node >= 1; device memory > 0; fraction in (0, 1];
// speeds > 0; latencies >= 0; node_names empty or one unique name per node.
// InvalidArgument naming the field ("topology.memory_fraction: 1.5 is not in (0, 1]").
Status validate(const Topology& t);

// Values given for some of a topology's fields; nullopt keeps the value beneath.
struct Overrides {
  std::optional<int> nodes, gpus_per_node;
  std::optional<int64_t> device_memory_bytes;
  std::optional<double> memory_fraction, intra_node_gbps, inter_node_gbps, device_tflops, device_hbm_gbps;
  std::optional<double> intra_node_latency_us, inter_node_latency_us;
  std::optional<std::vector<std::string>> node_names;
};

// Every key a topology YAML may hold (all optional):
//   nodes: 2                    # or a list of node names: [gpu001, gpu002]
//   gpus_per_node: 8
//   device_memory: 80GiB        # or device_memory_gib: 80
//   memory_fraction: 0.9
//   intra_node_gbps: 450        # GB/s
//   inter_node_gbps: 50
//   device_tflops: 400
//   device_hbm_gbps: 3350
//   intra_node_latency_us: 10
//   inter_node_latency_us: 20
//   node_names: [gpu001, gpu002]
const std::vector<std::string>& file_keys();
// The keys a run config's `topology:` section may set besides `file`.
const std::vector<std::string>& run_config_keys();

// The one parser of topology keys: the mapping `map` (a topology file, or a run config's
// `topology:` section without its `file`), keys limited to `allowed`. Each value is checked as it
// is read (counts >= 1, sizes and speeds > 0, memory_fraction in (0, 1], latencies >= 0).
// Errors: InvalidArgument "<key_prefix><key>: <what is wrong>" ("t.yaml: " for a file,
// "topology." in a run config), "<key_prefix><key>: unknown key (...)".
Result<Overrides> parse_keys(const YAML::Node& map, const std::string& key_prefix,
                             const std::vector<std::string>& allowed = file_keys());
// A topology YAML document (parse_keys over file_keys(); an empty document gives no overrides).
Result<Overrides> parse_file_text(const std::string& text, const std::string& source_name);
// Reads the file then parse_file_text. NotFound when it cannot be read.
Result<Overrides> load_file(const std::string& path);

// Replaces t's fields by the values o gives.
void apply(Topology& t, const Overrides& o);

// The one path: `base` (defaults or discovered), then the file's keys when `file` is given, then
// `overrides` (a run config's keys or a command's flags), then validate().
Result<Topology> resolve(Topology base, const std::optional<std::string>& file, const Overrides& overrides);

// GiB as configs write them (device_memory_gib) to bytes, rounded to the nearest byte: the one
// rule, used wherever a GiB figure becomes a byte count.
int64_t gib_to_bytes(double gib);

// "80GiB", "80 GiB", "72.5GB", "512MiB", "1TiB", "4096B"; a bare number is GiB. Units are
// case-insensitive; KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024.
// InvalidArgument for anything else, zero or negative.
Result<int64_t> parse_bytes(const std::string& text);
// 89120571392 -> "83.0 GiB": one decimal in GiB from 1 GiB up, else MiB or KiB, else "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace dayzero::topology

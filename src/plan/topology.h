// Topology: the machines a plan is laid out on (nodes x GPUs per node, device memory, link and
// compute speeds), from a YAML file and command-line/run-config overrides. It is not discovery:
// callers that probe the hardware fill one in. On CPU, device_memory_bytes is the configured
// per-rank memory budget. Speeds only rank candidate plans; they need not be exact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::plan {

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

// Parses a topology YAML document (all keys optional, unknown keys are errors):
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
// Fields not given keep the defaults of `base`. Does not validate() (overrides may follow).
// Errors: InvalidArgument "<source_name>: <key>: <what is wrong>".
Result<Topology> parse_topology_yaml(const std::string& text, const std::string& source_name,
                                     const Topology& base = {});
// Reads the file then parse_topology_yaml. NotFound when it cannot be read.
Result<Topology> load_topology(const std::string& path, const Topology& base = {});

// Command-line or run-config values that replace those of the file.
struct TopologyOverrides {
  std::optional<int> nodes, gpus_per_node;
  std::optional<int64_t> device_memory_bytes;
  std::optional<double> memory_fraction, intra_node_gbps, inter_node_gbps, device_tflops, device_hbm_gbps;
};
void apply_overrides(Topology& t, const TopologyOverrides& o);

// "80GiB", "80 GiB", "72.5GB", "512MiB", "1TiB", "4096B"; a bare number is GiB. Units are
// case-insensitive; KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024.
// InvalidArgument for anything else, zero or negative.
Result<int64_t> parse_bytes(const std::string& text);
// 89120571392 -> "83.0 GiB": one decimal in GiB from 1 GiB up, else MiB or KiB, else "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace dayzero::plan

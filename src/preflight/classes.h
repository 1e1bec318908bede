// The comparison half of `dayzero preflight`, pure functions over gathered figures: the fields
// of the ranks' inventories that must agree, grouped into classes of equal value with the odd
// ones named by node and ranks; and measured figures as ratios to their peers' median, the
// ones below a fraction named as outliers. No MPI, no I/O: unit-tested on their own.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dayzero::preflight {

// One field whose value differs between ranks.
struct Mismatch {
  std::string field;    // "env.NCCL_SOCKET_IFNAME", "versions.mpi", "cpu.isa", ...
  std::string message;  // "node1 (rank 1): env.NCCL_SOCKET_IFNAME=eth1; the other 3 rank(s): eth0"
  // [{"value": ..., "ranks": [...], "hosts": [...]}], the majority class first.
  nlohmann::ordered_json classes;
};

// The fields that must agree, as one string per rank (an unset variable reads "(unset)"), in a
// fixed order: CPU model and ISA, cores, memory (GiB), GPU count, the GPUs (model, compute
// capability, memory, ECC), their MIG and ECC modes as NVML reads them, every version, every recorded
// environment variable any rank has, the interfaces that are not down, the InfiniBand devices,
// the filesystems of the run folder and the checkpoint. inventories: one per rank, rank order.
std::vector<std::pair<std::string, std::vector<std::string>>> agreeing_fields(
    const std::vector<nlohmann::ordered_json>& inventories);

// Every field of agreeing_fields with more than one value. The majority class is the largest
// (on a tie, the one holding the lowest rank); each other class is named by its nodes and ranks.
std::vector<Mismatch> find_mismatches(const std::vector<nlohmann::ordered_json>& inventories);

// "0-3, 5, 7-8" for ranks in any order.
std::string rank_ranges(std::vector<int> ranks);

// "node1 (ranks 2-3), node4 (rank 9)": the ranks grouped by their host, hosts in order of first rank.
std::string where(const std::vector<int>& ranks, const std::vector<std::string>& host_of_rank);

double median(std::vector<double> v);  // 0 for an empty vector

// One measured figure of a test: a rank, a node, a group or a link, larger is better.
struct Figure {
  std::string subject;  // "rank 3", "node1", "tp@pp0.dp0", "node0-node3"
  double value = 0;
  double ratio = 1;     // value / the median of the test's figures
  bool outlier = false; // ratio < fraction
};

// Sets ratio and outlier of every figure against the median of all of them (REQUIRES:
// 0 < fraction <= 1). A figure alone, or a median of 0, gives ratio 1.
void rate_against_median(std::vector<Figure>& figures, double fraction);

}  // namespace dayzero::preflight

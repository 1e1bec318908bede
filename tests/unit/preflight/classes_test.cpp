// The comparison half of preflight (src/preflight/classes.h, inventory.h's variable rules):
// fields that differ (the driver's MIG and ECC modes included) are named by node and ranks with
// the majority's value; equal inventories give nothing; figures are rated against their median
// and the slow one named.
#include <gtest/gtest.h>

#include "preflight/classes.h"
#include "preflight/inventory.h"

namespace dayzero::preflight {
namespace {

using json = nlohmann::ordered_json;

json inventory(int rank, const std::string& host, const std::string& ifname) {
  json j;
  j["rank"] = rank;
  j["host"] = host;
  j["cpu"] = {{"model", "AMD EPYC"}, {"isa", {"avx2", "avx512f"}}, {"cores", 2}};
  j["memory_bytes"] = int64_t{24} << 30;
  j["gpus"] = {{"count", 0}};
  j["versions"] = {{"mpi", "Open MPI v4.1.4"}, {"hdf5", "1.10.8"}};
  j["env"] = json::object();
  if (!ifname.empty()) j["env"]["NCCL_SOCKET_IFNAME"] = ifname;
  j["interfaces"] = json::array({{{"name", "eth0"}, {"state", "up"}}});
  j["ib_devices"] = json::array();
  j["run_dir"] = {{"filesystem", "ext4"}};
  j["checkpoint"] = nullptr;
  return j;
}

TEST(PreflightClasses, EqualInventoriesAgree) {
  std::vector<json> inv;
  for (int r = 0; r < 4; ++r) inv.push_back(inventory(r, "node" + std::to_string(r / 2), "eth0"));
  EXPECT_TRUE(find_mismatches(inv).empty());
}

TEST(PreflightClasses, OddNodeIsNamedWithItsRanksAndTheMajorityValue) {
  std::vector<json> inv;
  for (int r = 0; r < 8; ++r) inv.push_back(inventory(r, "gpu0" + std::to_string(r / 2), r / 2 == 2 ? "ib0" : "eth0"));
  const auto m = find_mismatches(inv);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].field, "env.NCCL_SOCKET_IFNAME");
  EXPECT_EQ(m[0].message, "gpu02 (ranks 4-5): env.NCCL_SOCKET_IFNAME=ib0; the other 6 rank(s) on 3 node(s): eth0");
  EXPECT_EQ(m[0].classes[0]["value"], "eth0");
  EXPECT_EQ(m[0].classes[1]["ranks"], json({4, 5}));
}

TEST(PreflightClasses, AVariableSetOnOneRankOnlyReadsUnsetElsewhere) {
  std::vector<json> inv = {inventory(0, "a", ""), inventory(1, "a", "eth1")};
  const auto m = find_mismatches(inv);
  ASSERT_EQ(m.size(), 1u);
  // Two classes of one rank each: the one holding rank 0 is the majority.
  EXPECT_EQ(m[0].message, "a (rank 1): env.NCCL_SOCKET_IFNAME=eth1; the other 1 rank(s) on 1 node(s): (unset)");
}

TEST(PreflightClasses, VersionAndMissingInfinibandDeviceAreNamed) {
  std::vector<json> inv;
  for (int r = 0; r < 3; ++r) {
    inv.push_back(inventory(r, "n" + std::to_string(r), "eth0"));
    inv.back()["ib_devices"] = json::array({"mlx5_0"});
  }
  inv[2]["ib_devices"] = json::array();
  inv[1]["versions"]["mpi"] = "Open MPI v5.0.3";
  const auto m = find_mismatches(inv);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].message, "n1 (rank 1): versions.mpi=Open MPI v5.0.3; the other 2 rank(s) on 2 node(s): Open MPI v4.1.4");
  EXPECT_EQ(m[1].message, "n2 (rank 2): ib_devices=(none); the other 2 rank(s) on 2 node(s): mlx5_0");
}

TEST(PreflightClasses, AnotherGpuModelOrItsEccStateIsNamed) {
  std::vector<json> inv;
  for (int r = 0; r < 4; ++r) {
    inv.push_back(inventory(r, "g" + std::to_string(r / 2), "eth0"));
    inv.back()["gpus"] = {{"count", 1},
                          {"devices", json::array({{{"name", "NVIDIA H100"}, {"compute_capability", "9.0"},
                                                    {"memory_bytes", int64_t{80} << 30}, {"ecc", true}}})}};
  }
  EXPECT_TRUE(find_mismatches(inv).empty());
  inv[3]["gpus"]["devices"][0]["ecc"] = false;
  const auto m = find_mismatches(inv);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].message, "g1 (rank 3): gpus.devices=NVIDIA H100 sm_9.0 80 GiB ECC off; the other 3 rank(s) on 2 node(s): "
                          "NVIDIA H100 sm_9.0 80 GiB ECC on");
}

TEST(PreflightClasses, TheDriversMigModeAndANodeWithoutNvmlAreNamed) {
  std::vector<json> inv;
  for (int r = 0; r < 4; ++r) {
    inv.push_back(inventory(r, "g" + std::to_string(r / 2), "eth0"));
    inv.back()["gpus"] = {{"count", 1},
                          {"devices", json::array({{{"name", "NVIDIA H100"}, {"compute_capability", "9.0"},
                                                    {"memory_bytes", int64_t{80} << 30}, {"ecc", true},
                                                    {"mig_mode", "disabled"}, {"ecc_mode", "enabled"}}})}};
  }
  EXPECT_TRUE(find_mismatches(inv).empty());
  inv[2]["gpus"]["devices"][0]["mig_mode"] = "enabled";
  inv[3]["gpus"]["devices"][0]["ecc_mode"] = "unknown (no NVML)";
  const auto m = find_mismatches(inv);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].message, "g1 (rank 2): gpus.mig_mode=enabled; the other 3 rank(s) on 2 node(s): disabled");
  EXPECT_EQ(m[1].message, "g1 (rank 3): gpus.ecc_mode=unknown (no NVML); the other 3 rank(s) on 2 node(s): enabled");
}

TEST(PreflightClasses, RankRangesAndWhere) {
  EXPECT_EQ(rank_ranges({7, 0, 1, 2, 3, 5, 8}), "0-3, 5, 7-8");
  EXPECT_EQ(where({2, 3, 9}, {"a", "a", "b", "b", "c", "c", "c", "c", "c", "c"}), "b (ranks 2-3), c (rank 9)");
}

TEST(PreflightClasses, SlowFigureIsAnOutlierAgainstTheMedian) {
  std::vector<Figure> f = {{"node0", 1000}, {"node1", 980}, {"node2", 1010}, {"node3", 650}};
  rate_against_median(f, 0.7);
  EXPECT_FALSE(f[0].outlier);
  EXPECT_FALSE(f[1].outlier);
  EXPECT_NEAR(f[3].ratio, 650.0 / 990.0, 1e-12);
  EXPECT_TRUE(f[3].outlier);
  // Just above the fraction is not one (the boundary, both sides).
  std::vector<Figure> g = {{"a", 100}, {"b", 100}, {"c", 71}};
  rate_against_median(g, 0.7);
  EXPECT_FALSE(g[2].outlier);
  rate_against_median(g, 0.72);
  EXPECT_TRUE(g[2].outlier);
  std::vector<Figure> alone = {{"a", 5}};
  rate_against_median(alone, 0.7);
  EXPECT_EQ(alone[0].ratio, 1.0);
}

TEST(PreflightInventory, SecretsAreRedactedAndLauncherBookkeepingIsNotCompared) {
  EXPECT_TRUE(looks_secret("NCCL_IB_AUTH_TOKEN"));
  EXPECT_TRUE(looks_secret("UCX_SECRET"));
  EXPECT_FALSE(looks_secret("NCCL_SOCKET_IFNAME"));
  EXPECT_TRUE(recorded_variable("NCCL_SOCKET_IFNAME"));
  EXPECT_TRUE(recorded_variable("OMPI_MCA_btl_tcp_if_include"));
  EXPECT_TRUE(recorded_variable("CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(recorded_variable("OMP_NUM_THREADS"));
  EXPECT_FALSE(recorded_variable("OMPI_MCA_orte_app_num"));  // differs between the apps of an MPMD launch
  EXPECT_FALSE(recorded_variable("OMPI_MCA_ess_base_vpid"));
  EXPECT_FALSE(recorded_variable("OMPI_MCA_plm"));  // set by the daemons of other nodes only
  EXPECT_TRUE(recorded_variable("OMPI_MCA_plm_rsh_agent"));
  EXPECT_FALSE(recorded_variable("HOME"));
  InventoryInputs in;
  in.host = "h";
  in.run_dir = ".";
  setenv("NCCL_TEST_TOKEN", "hunter2", 1);
  const json j = local_inventory(in);
  unsetenv("NCCL_TEST_TOKEN");
  EXPECT_EQ(j["env"]["NCCL_TEST_TOKEN"], "<redacted>");
  EXPECT_EQ(j.dump().find("hunter2"), std::string::npos);
}

}  // namespace
}  // namespace dayzero::preflight

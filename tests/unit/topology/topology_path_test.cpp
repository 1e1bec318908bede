// The one topology path: a file, a run config's `topology:` keys and a command's flags read by
// one parser, applied in one order, validated by one function, GiB turned into bytes by one rule.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config/run_config.h"
#include "topology/topology.h"

namespace dayzero::topology {
namespace {

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/dz-topology-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

Result<config::RunConfig> run_config_with(const std::string& topology_yaml) {
  return config::parse_run_config("model: {path: m}\nprompts: [{id: a, text: hi}]\ntopology: " + topology_yaml + "\n", "run.yaml", "");
}

// 0.7 GiB is 751619276.8 bytes: truncation and rounding differ, so one rule must hold everywhere.
TEST(TopologyPath, GibBecomesTheSameBytesWhereverItIsWritten) {
  constexpr int64_t kRounded = 751619277;
  EXPECT_EQ(gib_to_bytes(0.7), kRounded);
  const std::string file = write_temp("device_memory_gib: 0.7\n");
  auto from_file = load_file(file);
  std::remove(file.c_str());
  ASSERT_TRUE(from_file.ok()) << from_file.status().message();
  EXPECT_EQ(from_file->device_memory_bytes, kRounded);
  auto from_config = run_config_with("{device_memory_gib: 0.7}");
  ASSERT_TRUE(from_config.ok()) << from_config.status().message();
  EXPECT_EQ(from_config->topology.keys.device_memory_bytes, kRounded);
  auto from_flag = parse_bytes("0.7");  // `dayzero plan --gpu-mem 0.7`: a bare number is GiB
  ASSERT_TRUE(from_flag.ok());
  EXPECT_EQ(*from_flag, kRounded);
  // Control: the truncation `run` used to apply is a different figure.
  EXPECT_NE(static_cast<int64_t>(0.7 * (1LL << 30)), kRounded);
}

TEST(TopologyPath, BaseThenFileThenKeys) {
  Topology discovered;
  discovered.nodes = 4;
  discovered.gpus_per_node = 2;
  discovered.device_memory_bytes = int64_t{10} << 30;
  const std::string file = write_temp("gpus_per_node: 8\ndevice_memory: 80GiB\nmemory_fraction: 0.5\n");
  Overrides keys;
  keys.memory_fraction = 0.8;
  auto t = resolve(discovered, file, keys);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->nodes, 4);                                 // discovered, untouched
  EXPECT_EQ(t->gpus_per_node, 8);                         // the file over what was discovered
  EXPECT_EQ(t->device_memory_bytes, int64_t{80} << 30);  // the file
  EXPECT_EQ(t->memory_fraction, 0.8);                     // the keys over the file
  keys.nodes = 3;
  keys.node_names = std::vector<std::string>{"a", "b"};
  auto bad = resolve(discovered, file, keys);
  std::remove(file.c_str());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "topology.node_names: 2 names for 3 nodes");
  auto missing = resolve(discovered, std::string("/nonexistent/topology.yaml"), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(TopologyPath, OneParserChecksEveryValueWhereverItIsWritten) {
  // The same bad value, written in a file and in a run config, refused by the same words.
  const std::pair<const char*, const char*> cases[] = {
      {"memory_fraction: 1.5", "memory_fraction: 1.5 is not in (0, 1]"},
      {"memory_fraction: 0", "memory_fraction: 0 is not in (0, 1]"},
      {"device_memory_gib: -80", "device_memory_gib: -80 is not > 0"},
      {"nodes: 0", "nodes: 0 is not >= 1"},
      {"gpus_per_node: 0", "gpus_per_node: 0 is not >= 1"},
  };
  for (const auto& [yaml, said] : cases) {
    auto f = parse_file_text(std::string(yaml) + "\n", "t.yaml");
    ASSERT_FALSE(f.ok()) << yaml;
    EXPECT_EQ(f.status().message(), std::string("t.yaml: ") + said);
    auto c = run_config_with(std::string("{") + yaml + "}");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_NE(c.status().message().find(std::string("topology.") + said), std::string::npos) << c.status().message();
    EXPECT_EQ(c.status().exit_code(), 2);
  }
  // A key a run config cannot set (a file can) is refused there by name.
  auto c = run_config_with("{device_tflops: 100}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("topology.device_tflops"), std::string::npos) << c.status().message();
  EXPECT_TRUE(parse_file_text("device_tflops: 100\n", "t.yaml").ok());
}

}  // namespace
}  // namespace dayzero::topology

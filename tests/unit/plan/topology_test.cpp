// Topology YAML and overrides, byte sizes with units, the plan's JSON/YAML forms, the trivial
// data-parallel plan and the HTML report's contents.
#include <gtest/gtest.h>

#include "plan/planner.h"
#include "plan/report.h"
#include "topology/topology.h"
#include "plan_test_util.h"

namespace dayzero::plan {
namespace {

using topology::format_bytes;
using topology::parse_bytes;
using topology::Topology;

// A topology YAML document read by the one parser, then applied over the defaults.
Result<Topology> parse_topology_yaml(const std::string& text, const std::string& source) {
  DZ_ASSIGN_OR_RETURN(const topology::Overrides o, topology::parse_file_text(text, source));
  Topology t;
  topology::apply(t, o);
  return t;
}

TEST(Topology, ParseBytes) {
  EXPECT_EQ(*parse_bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(*parse_bytes("80 gib"), int64_t{80} << 30);
  EXPECT_EQ(*parse_bytes("80"), int64_t{80} << 30);
  EXPECT_EQ(*parse_bytes("72.5GB"), int64_t{72500000000});
  EXPECT_EQ(*parse_bytes("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*parse_bytes("4096B"), 4096);
  EXPECT_EQ(*parse_bytes("1TiB"), int64_t{1} << 40);
  for (const char* bad : {"", "GiB", "80 parsecs", "-1GiB", "0", "1.2.3G", "80 GiB x"})
    EXPECT_FALSE(parse_bytes(bad).ok()) << bad;
  EXPECT_EQ(format_bytes(int64_t{83} << 30), "83.0 GiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(12), "12 B");
}

TEST(Topology, YamlWithOverrides) {
  auto t = parse_topology_yaml(
      "nodes: [gpu001, gpu002]\ngpus_per_node: 8\ndevice_memory: 80GiB\nmemory_fraction: 0.85\n"
      "inter_node_gbps: 25\n",
      "topo.yaml");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->nodes, 2);
  EXPECT_EQ(t->node_name(1), "gpu002");
  EXPECT_EQ(t->device_memory_bytes, int64_t{80} << 30);
  EXPECT_DOUBLE_EQ(t->inter_node_gbps, 25);
  EXPECT_DOUBLE_EQ(t->intra_node_gbps, 450);  // default kept
  EXPECT_TRUE(topology::validate(*t).ok());
  topology::Overrides o;
  o.memory_fraction = 0.5;
  o.device_memory_bytes = int64_t{40} << 30;
  topology::apply(*t, o);
  EXPECT_EQ(t->memory_cap_bytes(), int64_t{20} << 30);
  o = {};
  o.nodes = 3;  // two names for three nodes
  topology::apply(*t, o);
  EXPECT_EQ(topology::validate(*t).message(), "topology.node_names: 2 names for 3 nodes");

  auto bad = parse_topology_yaml("gpus: 8\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("t.yaml: gpus: unknown key", 0), 0u) << bad.status().message();
  bad = parse_topology_yaml("gpus_per_node: eight\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("t.yaml: gpus_per_node: ", 0), 0u) << bad.status().message();
  Topology z;
  z.device_memory_bytes = 1;
  z.memory_fraction = 1.5;
  EXPECT_EQ(topology::validate(z).message(), "topology.memory_fraction: 1.5 is not in (0, 1]");
  EXPECT_EQ(Topology{}.node_name(3), "node3");
}

Plan small_plan() {
  PlanRequest r;
  r.hp = testing::tiny_hp();
  r.specs = testing::specs_of(r.hp);
  r.layer_descs = testing::layers_of(r.hp);
  r.topo.nodes = 2;
  r.topo.gpus_per_node = 4;
  r.topo.device_memory_bytes = int64_t{1} << 30;
  r.topo.node_names = {"a", "b"};
  r.max_context_tokens = 16;
  r.headroom_bytes = 1000;
  r.tp = 2;
  r.pp = 2;
  r.ep = 2;
  auto p = choose_plan(r);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

TEST(PlanValue, JsonRoundTripAndYaml) {
  const Plan p = small_plan();
  const nlohmann::json j = to_json(p);
  EXPECT_EQ(j["tp"], 2);
  EXPECT_EQ(j["nodes"][1], "b");
  EXPECT_EQ(j["ranks"].size(), 8u);
  EXPECT_EQ(j["memory"][0]["total"], p.memory[0].total());
  auto back = plan_from_json(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(to_json(*back).dump(), j.dump());
  nlohmann::json broken = j;
  broken["dp"] = 3;
  EXPECT_EQ(plan_from_json(broken).status().message(), "plan: dp x pp x tp is not world_size");
  broken = j;
  broken.erase("stages");
  EXPECT_EQ(plan_from_json(broken).status().message().rfind("plan: stages: ", 0), 0u);
  const std::string y = to_yaml(p);
  EXPECT_NE(y.find("tp: 2"), std::string::npos) << y;
  EXPECT_NE(y.find("{rank: 5, "), std::string::npos) << y;
}

TEST(PlanValue, DataParallelPlan) {
  const Plan p = data_parallel_plan(4, 28, {"x", "x", "y", "y"});
  EXPECT_EQ(p.dp, 4);
  EXPECT_EQ(p.pp, 1);
  EXPECT_EQ(p.stages[0].layer_end, 28);
  EXPECT_TRUE(p.stages[0].has_embedding && p.stages[0].has_lm_head);
  EXPECT_EQ(p.nodes, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(p.coord(3).node, 1);
  EXPECT_EQ(p.coord(3).local_rank, 1);
  EXPECT_EQ(p.coord(2).dp_rank, 2);
  EXPECT_TRUE(plan_from_json(to_json(p)).ok());
  EXPECT_EQ(data_parallel_plan(2, 4, {}).nodes.size(), 1u);
}

TEST(Report, SelfContainedWithGridAndBars) {
  const Plan p = small_plan();
  Topology t;
  t.gpus_per_node = 4;
  ReportOptions o;
  o.title = "tiny <llama>";
  o.candidates.push_back({1, 2, 4, false, "needs 1 GiB", 0, 0, -1});
  const std::string html = render_html_report(p, t, o);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("tiny &lt;llama&gt;"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("pp1 tp1"), std::string::npos);   // a grid cell label
  EXPECT_NE(html.find("ep1 etp0"), std::string::npos);  // ep x etp shown when ep > 1
  EXPECT_NE(html.find("cap "), std::string::npos);      // the cap line
  EXPECT_NE(html.find("needs 1 GiB"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg\" width"), html.find("http://www.w3.org/2000/svg"));
}

}  // namespace
}  // namespace dayzero::plan

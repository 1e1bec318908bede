// `dayzero preflight` across four "nodes" of this machine (tests/multinode/testbed.sh, one slot
// each, TCP over a bridge): with every link alike, the pairwise exchange names no node; with
// node3's veth limited by tc (testbed.sh slow), node3 is the outlier of the pairwise test, and
// only node3, and the launch exits 1. Skips with the reason where namespaces cannot be made,
// except under CI=true (fails there). Label multinode.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../e2e/e2e_util.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

constexpr int kNodes = 4;
// The slow link: 100 Mbit/s, 0.0125 GB/s, about a twentieth of what veths between namespaces
// carried here (0.26-2.3 GB/s per link on two cores shared with other jobs).
constexpr const char* kSlowRate = "100mbit";
// Healthy links varied up to 3x between pairs of one run on those busy cores (a healthy node's
// median went down to 0.47 of the others'), so the fraction is 0.3 here, not the default 0.7;
// node3 behind the 100 Mbit/s filter measured 0.0122 GB/s, 0.02 of the median (0.09-0.12 behind
// 200 Mbit/s). Only the pairwise figures are asserted: this test is about links (the GEMMs and
// reads of four ranks on two cores vary as much).
const std::string kArgs = " --read-mib 4 --collective-mib 2 --timeout 60 --outlier-fraction 0.3";
// Four ranks share two cores: ranks waiting in a barrier would busy-poll the cores away from the
// pair being measured (healthy links measured 0.03-0.04 GB/s so, 0.2-0.8 GB/s yielding).
const std::string kMpiArgs = " --mca mpi_yield_when_idle 1 -x OPENBLAS_NUM_THREADS ";
constexpr int kLimitS = 120;

const fs::path kTestbed = fs::path(DAYZERO_SOURCE_DIR) / "tests" / "multinode" / "testbed.sh";
fs::path bed_dir() { return fs::path(DAYZERO_BINARY_DIR) / "preflight-bed"; }

bool up = false;
std::string why;

class Bed : public ::testing::Environment {
 public:
  void SetUp() override {
    fs::create_directories(bed_dir());
    const Outcome o = run_shell("bash " + kTestbed.string() + " up " + bed_dir().string() + " " +
                                std::to_string(kNodes) + " 1");
    up = o.exit_code == 0;
    if (!up) why = "the multi-node test bed could not be made (exit " + std::to_string(o.exit_code) + "): " + o.output;
  }
  void TearDown() override { run_shell("bash " + kTestbed.string() + " down " + bed_dir().string()); }
};
::testing::Environment* const bed_env = ::testing::AddGlobalTestEnvironment(new Bed);

struct Preflight {
  Outcome outcome;
  json doc;
};

Preflight preflight(const std::string& name) {
  const fs::path d = scratch_dir("preflight-bed-" + name);
  Preflight p;
  p.outcome = run_shell("timeout -k 5 " + std::to_string(kLimitS) + " bash " + kTestbed.string() + " mpirun " +
                        bed_dir().string() + " -n " + std::to_string(kNodes) + kMpiArgs +
                        dayzero_bin() + " preflight --dump-dir " + (d / "run").string() + kArgs);
  if (fs::exists(d / "run" / "preflight.json")) p.doc = json::parse(read_file(d / "run" / "preflight.json"));
  return p;
}

// The subjects the test named outliers.
std::vector<std::string> outliers_of(const json& doc, const std::string& test) {
  std::vector<std::string> out;
  for (const json& t : doc["tests"])
    if (t["name"] == test)
      for (const json& f : t["figures"])
        if (f["outlier"].get<bool>()) out.push_back(f["subject"]);
  return out;
}

class PreflightBed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (up) return;
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << "CI=true: " << why;
    GTEST_SKIP() << why;
  }
};

TEST_F(PreflightBed, EqualLinksNameNoNodeAndASlowLinkNamesItsNode) {
  const Preflight even = preflight("even");
  ASSERT_TRUE(even.outcome.exit_code == 0 || even.outcome.exit_code == 1) << even.outcome.output;
  ASSERT_TRUE(even.doc.is_object()) << even.outcome.output;
  EXPECT_EQ(even.doc["nodes"].size(), static_cast<size_t>(kNodes));
  EXPECT_TRUE(outliers_of(even.doc, "pairwise nodes").empty()) << even.outcome.output;
  EXPECT_TRUE(even.doc["mismatches"].empty()) << even.doc["mismatches"].dump(2);

  const Outcome slow = run_shell("bash " + kTestbed.string() + " slow " + bed_dir().string() + " node3 " + kSlowRate);
  ASSERT_EQ(slow.exit_code, 0) << slow.output;
  const Preflight p = preflight("slow");
  EXPECT_EQ(p.outcome.exit_code, 1) << p.outcome.output;
  ASSERT_TRUE(p.doc.is_object()) << p.outcome.output;
  EXPECT_EQ(outliers_of(p.doc, "pairwise nodes"), std::vector<std::string>{"node3"}) << p.outcome.output;
  EXPECT_NE(p.outcome.output.find("pairwise nodes: node3:"), std::string::npos) << p.outcome.output;
  std::cout << p.outcome.output;
}

}  // namespace
}  // namespace dayzero::e2e

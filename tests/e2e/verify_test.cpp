// dayzero verify end to end on a tiny 3-shard checkpoint: the same report on 1, 2 and 3 ranks;
// a flipped byte found in exactly its file by the rank that owns it and, with a manifest, in
// its tensor; a missing shard, an unknown tensor and a planted NaN named; exit 2 for what is
// not a checkpoint; --structure-only reads no tensor byte and passes on sparse shards.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstring>

#include "checkpoint/safetensors.h"
#include "checkpoint/writer.h"
#include "e2e_util.h"
#include "verify/verify.h"

namespace dayzero::e2e {
namespace {

using nlohmann::json;

const char* kShard2 = "model-00002-of-00003.safetensors";

fs::path make_checkpoint(const std::string& name) {
  const fs::path d = scratch_dir("verify_" + name);
  const Outcome o = run_dayzero("make-model --family llama --shards 3 --out " + (d / "m").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  const Outcome s = run_shell("cd " + (d / "m").string() + " && sha256sum *.safetensors > ../sums.txt");
  EXPECT_EQ(s.exit_code, 0) << s.output;
  return d;
}

// Runs verify (under mpiexec when ranks > 0) with --json; stdout parsed, stderr kept apart.
struct Verified {
  int exit_code = -1;
  json report;
  std::string stderr_text;
};
Verified verify(const fs::path& d, int ranks, const std::string& args) {
  const std::string launcher = ranks > 0 ? "mpiexec -n " + std::to_string(ranks) + " --oversubscribe " : "";
  const fs::path out = d / "report.json", err = d / "stderr.txt";
  const Outcome o = run_shell("(" + launcher + dayzero_bin() + " verify " + (d / "m").string() + " " + args +
                              " --json > " + out.string() + " 2> " + err.string() + ")");
  Verified v;
  v.exit_code = o.exit_code;
  v.stderr_text = read_file(err);
  const std::string text = read_file(out);
  if (!text.empty()) v.report = json::parse(text, nullptr, false);
  return v;
}

// The report without what depends on timing or on the number of ranks.
json without_timings(json r) {
  for (const char* k : {"seconds", "wall_seconds", "throughput_bytes_per_s", "ranks", "world_size"}) r.erase(k);
  for (auto& f : r["files"]) {
    f.erase("seconds");
    f.erase("rank");
  }
  return r;
}

std::vector<json> findings(const json& r, const std::string& kind) {
  std::vector<json> out;
  for (const auto& f : r["findings"])
    if (f["kind"] == kind) out.push_back(f);
  return out;
}

// Rewrites n bytes of path at offset.
void patch(const fs::path& path, uint64_t offset, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

// Which rank owns each shard, by the documented assignment.
int owner_of(const fs::path& m, const std::string& name, int world) {
  std::vector<std::string> names;
  std::vector<uint64_t> sizes;
  for (int i = 1; i <= 3; ++i) {
    names.push_back("model-0000" + std::to_string(i) + "-of-00003.safetensors");
    sizes.push_back(fs::file_size(m / names.back()));
  }
  const std::vector<int> owner = verify::assign_by_bytes(sizes, world);
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return owner[i];
  return -1;
}

TEST(Verify, SameReportOnOneTwoAndThreeRanks) {
  const fs::path d = make_checkpoint("ranks");
  const std::string hashes = "--hashes " + (d / "sums.txt").string() + " --scan nan,inf,range";
  const Verified alone = verify(d, 0, hashes);
  ASSERT_EQ(alone.exit_code, 0) << alone.stderr_text << alone.report.dump(1);
  EXPECT_EQ(alone.report["errors"], 0);
  EXPECT_EQ(alone.report["inventory"], "adapter llama");
  ASSERT_EQ(alone.report["files"].size(), 3u);
  for (const auto& f : alone.report["files"]) EXPECT_EQ(f["verdict"], "ok") << f["name"];
  for (int ranks : {1, 2, 3}) {
    const Verified v = verify(d, ranks, hashes);
    ASSERT_EQ(v.exit_code, 0) << ranks << " ranks: " << v.stderr_text;
    EXPECT_EQ(v.report["world_size"], ranks);
    EXPECT_EQ(without_timings(v.report), without_timings(alone.report)) << ranks << " ranks";
    // Every file was read by the rank the assignment gives it.
    for (const auto& f : v.report["files"])
      EXPECT_EQ(f["rank"], owner_of(d / "m", f["name"], ranks)) << f["name"] << " on " << ranks << " ranks";
    // The progress line (stderr; in a log: the first count, then the job's end with every rank).
    const std::string done = "100.0% ";
    EXPECT_NE(v.stderr_text.find("[verify]"), std::string::npos) << v.stderr_text;
    EXPECT_NE(v.stderr_text.find("(" + std::to_string(ranks) + "/" + std::to_string(ranks) + " ranks reporting)"),
              std::string::npos)
        << v.stderr_text;
    EXPECT_NE(v.stderr_text.find(done), std::string::npos) << v.stderr_text;
  }
  // The terminal table names every file with its verdict.
  const Outcome text = run_dayzero("verify " + (d / "m").string() + " " + hashes);
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find(std::string(kShard2)), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("throughput"), std::string::npos) << text.output;
}

TEST(Verify, FlippedByteFailsItsFileAndNamesItsTensor) {
  const fs::path d = make_checkpoint("flip");
  const fs::path manifest = d / "manifest.json";
  const Verified before = verify(d, 0, "--write-manifest " + manifest.string());
  ASSERT_EQ(before.exit_code, 0) << before.stderr_text;
  ASSERT_TRUE(fs::exists(manifest));

  auto header = checkpoint::SafetensorsFile::open((d / "m" / kShard2).string());
  ASSERT_TRUE(header.ok()) << header.status().message();
  const checkpoint::TensorInfo& t = header->tensors().at(header->tensors().size() / 2);
  const uint64_t at = t.offset + t.nbytes / 2;
  std::vector<uint8_t> b(1);
  {
    const int fd = ::open((d / "m" / kShard2).c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, b.data(), 1, static_cast<off_t>(at)), 1);
    ::close(fd);
  }
  b[0] ^= 0x10;
  patch(d / "m" / kShard2, at, b);

  const Verified v = verify(d, 3, "--hashes " + (d / "sums.txt").string() + " --manifest " + manifest.string());
  ASSERT_EQ(v.exit_code, 1) << v.stderr_text << v.report.dump(1);
  const auto mismatches = findings(v.report, "hash_mismatch");
  ASSERT_EQ(mismatches.size(), 1u) << v.report["findings"].dump(1);
  EXPECT_EQ(mismatches[0]["file"], kShard2);
  for (const auto& f : v.report["files"]) {
    if (f["name"] == kShard2) {
      EXPECT_EQ(f["verdict"], "hash_mismatch,tensor_changed");
      EXPECT_EQ(f["rank"], owner_of(d / "m", kShard2, 3));
    } else {
      EXPECT_EQ(f["verdict"], "ok") << f["name"];
    }
  }
  const auto changed = findings(v.report, "tensor_changed");
  ASSERT_EQ(changed.size(), 1u) << v.report["findings"].dump(1);
  EXPECT_EQ(changed[0]["tensor"], t.name);
  EXPECT_EQ(v.report["errors"], 2);

  // Without the manifest the file still fails on its hash, but no tensor is named.
  const Verified plain = verify(d, 2, "--hashes " + (d / "sums.txt").string());
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_EQ(findings(plain.report, "hash_mismatch").size(), 1u);
  EXPECT_TRUE(findings(plain.report, "tensor_changed").empty());
  // --structure-only reads no tensor byte: the flipped byte goes unseen, the sizes still match.
  const Verified structure = verify(d, 2, "--structure-only --hashes " + (d / "sums.txt").string());
  EXPECT_EQ(structure.exit_code, 0) << structure.report["findings"].dump(1);
  EXPECT_FALSE(structure.report["files"][0].contains("sha256"));
}

TEST(Verify, MissingShardIsNamed) {
  const fs::path d = make_checkpoint("missing");
  fs::remove(d / "m" / "model-00003-of-00003.safetensors");
  const Verified v = verify(d, 2, "--hashes " + (d / "sums.txt").string());
  ASSERT_EQ(v.exit_code, 1) << v.stderr_text;
  const auto missing = findings(v.report, "missing_file");
  ASSERT_EQ(missing.size(), 1u) << v.report["findings"].dump(1);
  EXPECT_EQ(missing[0]["file"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(v.report["errors"], 1) << v.report["findings"].dump(1);
}

TEST(Verify, UnknownTensorIsNamed) {
  const fs::path d = make_checkpoint("unknown");
  checkpoint::SafetensorsWriter w;
  w.add("model.layers.0.mlp.extra_proj.weight", DType::kBF16, {4, 4}, std::vector<uint8_t>(32, 0x11));
  ASSERT_TRUE(w.write((d / "m" / "model-extra.safetensors").string()).ok());
  const fs::path index = d / "m" / "model.safetensors.index.json";
  json j = json::parse(read_file(index));
  j["weight_map"]["model.layers.0.mlp.extra_proj.weight"] = "model-extra.safetensors";
  j["metadata"]["total_size"] = j["metadata"]["total_size"].get<uint64_t>() + 32;
  write_file(index, j.dump());
  const Verified v = verify(d, 3, "");
  ASSERT_EQ(v.exit_code, 1) << v.stderr_text;
  const auto unknown = findings(v.report, "unknown_tensor");
  ASSERT_EQ(unknown.size(), 1u) << v.report["findings"].dump(1);
  EXPECT_EQ(unknown[0]["tensor"], "model.layers.0.mlp.extra_proj.weight");
  EXPECT_EQ(unknown[0]["file"], "model-extra.safetensors");
  EXPECT_EQ(v.report["errors"], 1) << v.report["findings"].dump(1);
}

TEST(Verify, PlantedNanIsNamed) {
  const fs::path d = make_checkpoint("nan");
  auto header = checkpoint::SafetensorsFile::open((d / "m" / kShard2).string());
  ASSERT_TRUE(header.ok());
  const checkpoint::TensorInfo& t = header->tensors().front();
  ASSERT_EQ(t.dtype, DType::kBF16);
  patch(d / "m" / kShard2, t.offset + 2 * 7, {0xc0, 0x7f});  // bf16 quiet NaN, little-endian
  // Negative control: without the scan (and no expected hashes) nothing is wrong.
  EXPECT_EQ(verify(d, 0, "").exit_code, 0);
  const Verified v = verify(d, 2, "--scan nan,inf");
  ASSERT_EQ(v.exit_code, 1) << v.stderr_text;
  const auto nan = findings(v.report, "nan");
  ASSERT_EQ(nan.size(), 1u) << v.report["findings"].dump(1);
  EXPECT_EQ(nan[0]["tensor"], t.name);
  EXPECT_EQ(nan[0]["detail"], "1 NaN values");
  EXPECT_EQ(v.report["errors"], 1);
}

// A layout whose data are holes: each shard keeps its header and is truncated out to its size.
// --structure-only passes on it without reading the holes; a full verify sees the hashes differ.
TEST(Verify, StructureOnlyOnSparseShards) {
  const fs::path d = make_checkpoint("sparse");
  for (int i = 1; i <= 3; ++i) {
    const fs::path shard = d / "m" / ("model-0000" + std::to_string(i) + "-of-00003.safetensors");
    const uint64_t size = fs::file_size(shard);
    const std::string bytes = read_file(shard);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    write_file(shard, bytes.substr(0, 8 + header_len));
    fs::resize_file(shard, size);
    ASSERT_EQ(fs::file_size(shard), size);
  }
  const std::string hashes = "--hashes " + (d / "sums.txt").string();
  const Verified structure = verify(d, 2, "--structure-only " + hashes);
  EXPECT_EQ(structure.exit_code, 0) << structure.stderr_text << structure.report["findings"].dump(1);
  EXPECT_EQ(structure.report["structure_only"], true);
  const Verified full = verify(d, 2, hashes + " --scan range");
  EXPECT_EQ(full.exit_code, 1);
  EXPECT_EQ(findings(full.report, "hash_mismatch").size(), 3u) << full.report["findings"].dump(1);
  EXPECT_FALSE(findings(full.report, "all_zero").empty());
}

TEST(Verify, NotACheckpointIsBadInput) {
  const fs::path d = scratch_dir("verify_bad");
  fs::create_directories(d / "m");
  Verified v = verify(d, 0, "");
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_NE(v.stderr_text.find("neither model.safetensors"), std::string::npos) << v.stderr_text;
  write_file(d / "m" / "model.safetensors", "garbage that is no header");
  v = verify(d, 2, "");
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_NE(v.stderr_text.find("model.safetensors"), std::string::npos) << v.stderr_text;
  const fs::path good = make_checkpoint("bad_hashes");
  write_file(good / "sums.txt", "not a hash list\n");
  v = verify(good, 0, "--hashes " + (good / "sums.txt").string());
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_NE(v.stderr_text.find("sums.txt line 1"), std::string::npos) << v.stderr_text;
  v = verify(good, 0, "--scan nan,bogus");
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_NE(v.stderr_text.find("bogus"), std::string::npos) << v.stderr_text;
}

}  // namespace
}  // namespace dayzero::e2e

// make-model --like --sparse on real configs: the WizardLM-2-8x22B fixture with its real index
// (59 shards) gives exactly the index's tensor-to-shard map and total_size, and the shard files
// have the sizes its Git-LFS pointers record; Kimi-K2 and DeepSeek-V3 (FP8 + block scales, no
// index) give HF-named ~5 GB shards with their own index; DeepSeek-V4-Flash and -Pro their
// published tensor names. Each uses under 100 MB of disk and
// `inspect`, `plan` and `verify --structure-only` (WizardLM: against its LFS pointers' sizes)
// read it at full scale. Never reads the holes.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>

#include "checkpoint/safetensors.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

const fs::path kConfigs = fs::path(DAYZERO_FIXTURES_DIR) / "configs";

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p)); }

// Blocks actually allocated under dir, in bytes.
uint64_t disk_used(const fs::path& dir) {
  uint64_t used = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st;
    if (::stat(e.path().c_str(), &st) == 0) used += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return used;
}

struct Layout {
  std::map<std::string, std::string> shard_of;  // from the headers: tensor -> shard file
  std::map<std::string, std::string> dtype_of;
  uint64_t tensor_bytes = 0, apparent = 0;
  std::map<std::string, uint64_t> file_size;
};

// Reads every .safetensors header in dir (headers only).
Layout read_layout(const fs::path& dir) {
  Layout l;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    auto f = checkpoint::SafetensorsFile::open(e.path().string());
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (!f.ok()) continue;
    const std::string file = e.path().filename().string();
    l.file_size[file] = f->file_size();
    l.apparent += f->file_size();
    for (const auto& t : f->tensors()) {
      l.shard_of[t.name] = file;
      l.dtype_of[t.name] = dtype_name(t.dtype);
      l.tensor_bytes += t.nbytes;
    }
  }
  return l;
}

std::map<std::string, std::string> weight_map(const nlohmann::json& index) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : index["weight_map"].items()) m[k] = v.get<std::string>();
  return m;
}

// inspect, plan (a cluster shape that fits) and verify --structure-only (headers, index,
// adapter inventory, sizes; extra: e.g. --hashes) on the sparse folder, at full scale.
void inspect_and_plan(const fs::path& dir, uint64_t total, const std::string& plan_args,
                      const std::string& verify_extra = "") {
  const Outcome in = run_dayzero("inspect --json " + dir.string());
  ASSERT_EQ(in.exit_code, 0) << in.output;
  const nlohmann::json j = nlohmann::json::parse(in.output.substr(in.output.find('{')));
  const std::string text = j.dump();
  EXPECT_NE(text.find("\"checkpoint\""), std::string::npos) << "dtypes not read from the headers: " << text;
  EXPECT_NE(text.find(std::to_string(total)), std::string::npos) << "total " << total << " not in " << text;
  const Outcome plan = run_dayzero("plan --model " + dir.string() + " " + plan_args);
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  const Outcome verify = run_dayzero("verify --structure-only " + dir.string() + " " + verify_extra);
  EXPECT_EQ(verify.exit_code, 0) << verify.output;
}

TEST(SparseModel, WizardLmHasTheRealIndexMapAndShardSizes) {
  const fs::path like = kConfigs / "WizardLM-2-8x22B";
  const fs::path dir = scratch_dir("sparse-wizardlm") / "m";
  const Outcome made = run_dayzero("make-model --like " + like.string() + " --index " +
                                   (like / "model.safetensors.index.json").string() + " --sparse --out " + dir.string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const nlohmann::json index = read_json(like / "model.safetensors.index.json");
  const Layout l = read_layout(dir);
  EXPECT_EQ(l.file_size.size(), 59u);
  EXPECT_EQ(l.shard_of, weight_map(index)) << "tensor-to-shard map differs from the index's";
  EXPECT_EQ(l.tensor_bytes, index["metadata"]["total_size"].get<uint64_t>());
  EXPECT_EQ(read_file(dir / "config.json"), read_file(like / "config.json"));
  EXPECT_EQ(read_file(dir / "model.safetensors.index.json"), read_file(like / "model.safetensors.index.json"));
  // The LFS pointers record each real shard's size: the headers are the same length too.
  std::ifstream ptr(like / "lfs_pointers_concatenated.txt");
  std::string line, file;
  int compared = 0;
  while (std::getline(ptr, line)) {
    if (line.rfind("== ", 0) == 0) file = line.substr(3);
    if (line.rfind("size ", 0) == 0) {
      EXPECT_EQ(l.file_size.at(file), std::stoull(line.substr(5))) << file;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 59);
  EXPECT_GT(l.apparent, 280'000'000'000ull);
  EXPECT_LT(disk_used(dir), 100ull << 20);
  inspect_and_plan(dir, l.tensor_bytes, "--nodes 1 --gpus-per-node 8 --gpu-mem 80GiB",
                   "--hashes " + (like / "lfs_pointers_concatenated.txt").string());
}

// FP8 layouts without an index: every quantized Linear has its F32 weight_scale_inv in the
// same shard, shards are model-0000i-of-0000N, at most 5 GB, listed by a written index.
void check_fp8_layout(const std::string& fixture, const std::string& plan_args) {
  const fs::path dir = scratch_dir("sparse-" + fixture) / "m";
  const Outcome made = run_dayzero("make-model --like " + (kConfigs / fixture / "config.json").string() +
                                   " --sparse --out " + dir.string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const Layout l = read_layout(dir);
  const nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  EXPECT_EQ(l.shard_of, weight_map(index));
  EXPECT_EQ(l.tensor_bytes, index["metadata"]["total_size"].get<uint64_t>());
  const size_t n = l.file_size.size();
  EXPECT_GT(n, 100u);
  char last[64];
  std::snprintf(last, sizeof last, "model-%05zu-of-%05zu.safetensors", n, n);
  EXPECT_TRUE(l.file_size.count(last)) << last;
  for (const auto& [f, size] : l.file_size) EXPECT_LT(size, 5'000'100'000ull) << f;
  int fp8 = 0;
  for (const auto& [name, dtype] : l.dtype_of) {
    if (dtype != "F8_E4M3") continue;
    ++fp8;
    const std::string scale = name + "_scale_inv";
    ASSERT_TRUE(l.dtype_of.count(scale)) << name << " has no " << scale;
    EXPECT_EQ(l.dtype_of.at(scale), "F32");
    EXPECT_EQ(l.shard_of.at(scale), l.shard_of.at(name)) << name;
  }
  EXPECT_GT(fp8, 10000);
  EXPECT_EQ(l.dtype_of.at("model.embed_tokens.weight"), "BF16");
  EXPECT_GT(l.apparent, 600'000'000'000ull);
  EXPECT_LT(disk_used(dir), 100ull << 20);
  EXPECT_EQ(read_file(dir / "config.json"), read_file(kConfigs / fixture / "config.json"));
  inspect_and_plan(dir, l.tensor_bytes, plan_args);
}

TEST(SparseModel, KimiK2Fp8Layout) { check_fp8_layout("Kimi-K2-Instruct", "--nodes 2 --gpus-per-node 8 --gpu-mem 141GiB"); }

TEST(SparseModel, DeepSeekV3Fp8Layout) { check_fp8_layout("DeepSeek-V3", "--nodes 1 --gpus-per-node 8 --gpu-mem 141GiB"); }

// DeepSeek-V4-Flash and -Pro (transformers' configs, bf16): the published tensor names, I32
// tid2eid tables for the hash-routed layers, the MTP layer; inspect, plan and verify at full
// scale (V4-Flash 581.9 GB on one node of 8 H200, V4-Pro 3.2 TB on four).
void check_v4_layout(const std::string& fixture, const std::string& plan_args) {
  const fs::path dir = scratch_dir("sparse-" + fixture) / "m";
  const Outcome made = run_dayzero("make-model --like " + (kConfigs / fixture / "config.json").string() +
                                   " --sparse --out " + dir.string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const Layout l = read_layout(dir);
  EXPECT_EQ(l.shard_of, weight_map(read_json(dir / "model.safetensors.index.json")));
  for (const char* name : {"embed.weight", "layers.0.hc_attn_fn", "layers.1.attn.compressor.wkv.weight", "mtp.0.e_proj.weight"})
    EXPECT_TRUE(l.dtype_of.count(name)) << name;
  EXPECT_EQ(l.dtype_of.at("layers.0.ffn.gate.tid2eid"), "I32");
  EXPECT_LT(disk_used(dir), 100ull << 20);
  inspect_and_plan(dir, l.tensor_bytes, plan_args);
}

TEST(SparseModel, DeepSeekV4FlashLayout) {
  check_v4_layout("DeepSeek-V4-Flash", "--nodes 1 --gpus-per-node 8 --gpu-mem 141GiB");
}
TEST(SparseModel, DeepSeekV4ProLayout) {
  check_v4_layout("DeepSeek-V4-Pro", "--nodes 4 --gpus-per-node 8 --gpu-mem 141GiB");
}

TEST(SparseModel, RefusesWhatItCannotHonour) {
  const fs::path dir = scratch_dir("sparse-refusals");
  const fs::path like = kConfigs / "WizardLM-2-8x22B";
  // No adapter (GLM-5's config renamed to a family none claims): no tensor list to write.
  nlohmann::json unclaimed = read_json(kConfigs / "GLM-5" / "config.json");
  unclaimed["model_type"] = "sparse_mla_preview";
  unclaimed["architectures"] = {"SparseMlaPreviewForCausalLM"};
  fs::create_directories(dir / "unclaimed");
  write_file(dir / "unclaimed" / "config.json", unclaimed.dump());
  Outcome o = run_dayzero("make-model --like " + (dir / "unclaimed").string() + " --sparse --out " + (dir / "a").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("needs the tensor list of an adapter"), std::string::npos) << o.output;
  // An index naming a tensor the adapter does not have.
  nlohmann::json index = read_json(like / "model.safetensors.index.json");
  index["weight_map"]["model.layers.0.extra.weight"] = "model-00001-of-00059.safetensors";
  write_file(dir / "index.json", index.dump());
  o = run_dayzero("make-model --like " + like.string() + " --index " + (dir / "index.json").string() +
                  " --sparse --out " + (dir / "b").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("1 unknown (model.layers.0.extra.weight)"), std::string::npos) << o.output;
  // A shard name that leaves the folder.
  index = read_json(like / "model.safetensors.index.json");
  index["weight_map"]["lm_head.weight"] = "../escape.safetensors";
  write_file(dir / "index.json", index.dump());
  o = run_dayzero("make-model --like " + like.string() + " --index " + (dir / "index.json").string() +
                  " --sparse --out " + (dir / "c").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("not a plain .safetensors file name"), std::string::npos) << o.output;
  // --like without --sparse, and size flags that the real config would override.
  o = run_dayzero("make-model --like " + like.string() + " --out " + (dir / "d").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  o = run_dayzero("make-model --like " + like.string() + " --sparse --n-layer 2 --out " + (dir / "e").string());
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_FALSE(fs::exists(dir / "escape.safetensors"));
  for (const char* d : {"a", "b", "c", "d", "e"}) EXPECT_FALSE(fs::exists(dir / d)) << d;
}

}  // namespace
}  // namespace dayzero::e2e
